package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

const protoVRRP = 112

// vrrpAdvert is a VRRPv2 advert (RFC 3768) for virtual router vrid with one
// address, its checksum left 0: Open vSwitch does not look at it.
func vrrpAdvert(vrid byte, vip netip.Addr) []byte {
	b := []byte{0x21, vrid, 100, 1, 0, 1, 0, 0}
	return append(b, vip.AsSlice()...)
}

var (
	vrrpGroup4 = netip.MustParseAddr("224.0.0.18")
	vrrpGroup6 = netip.MustParseAddr("ff02::12")
	vrrpMAC4   = net.HardwareAddr{0x01, 0x00, 0x5e, 0x00, 0x00, 0x12}
)

// allowedAddresses. The attacker's network allows 203.0.113.0/28 (not the
// node's 198.51.100.0/24: a range holding a node address is refused) and
// 2001:db8:d::7 besides its IPAM addresses. From its own MAC it sends UDP
// to the victim and ARP and neighbour advertisements, from sources inside
// and outside those. Protected: what is outside is dropped (spoofed-source,
// neighbour-discovery). Control (inside): the victim receives it. The same
// frames from a network without allowedAddresses: the inside ones are
// dropped too, so it is the key that lets them pass.
func TestAttackAllowedAddresses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed bool
	}{{"allowedAddresses", true}, {"control-no-allowedAddresses", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			v := l.join(l.network("allowed-victim", nil, nil), "victim", nil)
			extra := map[string]any{}
			if tc.allowed {
				extra["allowedAddresses"] = []any{"203.0.113.0/28", "2001:db8:d::7"}
			}
			a := l.join(l.network("allowed-sender", extra, nil), "attacker", nil)
			if tc.allowed {
				if err := a.n.Check(a.Container, "eth0", nil); err != nil {
					t.Errorf("CHECK of the attachment with allowedAddresses: %v", err)
				}
			}
			drops := watchDrops(t, a.Container)
			snV := sniff(t, v.NS, "eth0", "victim")
			s := sender(t, a.NS, "eth0")
			in4, out4 := netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("203.0.113.17")
			in6, out6 := netip.MustParseAddr("2001:db8:d::7"), netip.MustParseAddr("2001:db8:d::8")
			allNodes := netip.MustParseAddr("ff02::1")
			udpFrom := func(src netip.Addr) func(frame) bool {
				return func(f frame) bool {
					got, _, proto, _, ok := f.ip()
					return ok && proto == protoUDP && got == src && f.src.String() == a.mac.String()
				}
			}
			arpFrom := func(spa netip.Addr) func(frame) bool {
				return func(f frame) bool {
					_, sha, got, _, ok := f.arp()
					return ok && got == spa && sha.String() == a.mac.String()
				}
			}
			naFor := func(target netip.Addr) func(frame) bool {
				return func(f frame) bool {
					typ, body, ok := f.icmp6()
					return ok && typ == icmp6NA && len(body) >= 20 && netip.AddrFrom16([16]byte(body[4:20])) == target
				}
			}
			mustSend(t, s,
				ethFrame(v.mac, a.mac, etherIPv4, udp4(in4, v.v4, 4000, 4001, []byte("inside"))),
				ethFrame(v.mac, a.mac, etherIPv4, udp4(out4, v.v4, 4000, 4001, []byte("outside"))),
				ethFrame(broadcastMAC, a.mac, etherARP, arpPacket(1, a.mac, in4, make([]byte, 6), v.v4)),
				ethFrame(broadcastMAC, a.mac, etherARP, arpPacket(1, a.mac, out4, make([]byte, 6), v.v4)),
				ethFrame(v.mac, a.mac, etherIPv6, udp6(in6, v.v6, 4000, 4001, []byte("inside"))),
				ethFrame(v.mac, a.mac, etherIPv6, udp6(out6, v.v6, 4000, 4001, []byte("outside"))),
				ethFrame(multicastMAC(allNodes), a.mac, etherIPv6, icmp6Packet(in6, allNodes, icmp6NA, 0, naBody(in6, a.mac))),
				ethFrame(multicastMAC(allNodes), a.mac, etherIPv6, icmp6Packet(in6, allNodes, icmp6NA, 0, naBody(out6, a.mac))))
			checks := []struct {
				what   string
				match  func(frame) bool
				passes bool
			}{
				{"UDP from 203.0.113.5 (inside the allowed /28)", udpFrom(in4), tc.allowed},
				{"UDP from 203.0.113.17 (outside)", udpFrom(out4), false},
				{"ARP from 203.0.113.5", arpFrom(in4), tc.allowed},
				{"ARP from 203.0.113.17", arpFrom(out4), false},
				{"UDP from 2001:db8:d::7 (allowed)", udpFrom(in6), tc.allowed},
				{"UDP from 2001:db8:d::8", udpFrom(out6), false},
				{"NA for 2001:db8:d::7", naFor(in6), tc.allowed},
				{"NA for 2001:db8:d::8", naFor(out6), false},
			}
			for _, c := range checks {
				if c.passes && !snV.waitFor(2*time.Second, c.match) {
					t.Errorf("%s: the victim did not receive it, want it to", c.what)
				}
			}
			// A negative check: what is dropped stays away for half a second
			// after the frames sent with it that pass have arrived.
			framework.Consistently(t, 500*time.Millisecond, "frames outside the allowed addresses", func() error {
				for _, c := range checks {
					if !c.passes && snV.count(c.match) > 0 {
						return fmt.Errorf("%s: the victim received %v, want it dropped", c.what, snV.first(2, c.match))
					}
				}
				return nil
			})
			drops.check(t, true, flows.ReasonSpoofed, flows.ReasonNeighbourDiscovery)
			l.normal(t)
		})
	}
}

// allowVRRP. The sender advertises VRRP to 224.0.0.18 from its own IPv4
// address and to ff02::12 from its link-local one. Protected (no
// allowVRRP): both dropped, by the VRRP guard. Control (allowVRRP): the
// victim receives both, while with allowVRRP an advert from an address not
// its own, and one to a unicast address, are still dropped.
func TestAttackVRRP(t *testing.T) {
	for _, tc := range []struct {
		name      string
		allowVRRP bool
	}{{"protected-no-allowVRRP", false}, {"control-allowVRRP", true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			v := l.join(l.network("vrrp-peer", nil, nil), "victim", nil)
			a := l.join(l.network("vrrp-sender", map[string]any{"allowVRRP": tc.allowVRRP}, nil), "attacker", nil)
			drops := watchDrops(t, a.Container)
			snV := sniff(t, v.NS, "eth0", "victim")
			s := sender(t, a.NS, "eth0")
			vip := netip.MustParseAddr("192.0.2.250")
			spoofed := netip.MustParseAddr("192.0.2.251")
			mustSend(t, s,
				ethFrame(vrrpMAC4, a.mac, etherIPv4, ipv4Packet(a.v4, vrrpGroup4, protoVRRP, vrrpAdvert(7, vip))),
				ethFrame(multicastMAC(vrrpGroup6), a.mac, etherIPv6, ipv6Packet(a.ll, vrrpGroup6, protoVRRP, 255, []byte{0x31, 7, 100, 1, 0, 100, 0, 0})),
				ethFrame(vrrpMAC4, a.mac, etherIPv4, ipv4Packet(spoofed, vrrpGroup4, protoVRRP, vrrpAdvert(8, vip))),
				ethFrame(v.mac, a.mac, etherIPv4, ipv4Packet(a.v4, v.v4, protoVRRP, vrrpAdvert(9, vip))))
			advert := func(src, dst netip.Addr) func(frame) bool {
				return func(f frame) bool {
					s, d, proto, _, ok := f.ip()
					return ok && proto == protoVRRP && s == src && d == dst
				}
			}
			checks := []struct {
				what   string
				match  func(frame) bool
				passes bool
			}{
				{"VRRP advert from its own address to 224.0.0.18", advert(a.v4, vrrpGroup4), tc.allowVRRP},
				{"VRRPv3 advert from its link-local address to ff02::12", advert(a.ll, vrrpGroup6), tc.allowVRRP},
				{"VRRP advert from 192.0.2.251 (not its own)", advert(spoofed, vrrpGroup4), false},
				{"VRRP to a unicast address", advert(a.v4, v.v4), false},
			}
			for _, c := range checks {
				if c.passes && !snV.waitFor(2*time.Second, c.match) {
					t.Errorf("%s: the peer did not receive it, want it to", c.what)
				}
			}
			// A negative check: what is dropped stays away for half a second
			// after the frames sent with it that pass have arrived.
			framework.Consistently(t, 500*time.Millisecond, "VRRP adverts that are not allowed", func() error {
				for _, c := range checks {
					if !c.passes && snV.count(c.match) > 0 {
						return fmt.Errorf("%s: the peer received %v, want it dropped", c.what, snV.first(2, c.match))
					}
				}
				return nil
			})
			drops.check(t, true, flows.ReasonVRRP)
			l.normal(t)
		})
	}
}

// A VIP moves between two containers whose network allows it: the holder
// answers on it; the other takes it over with a gratuitous ARP, and the
// client's traffic to the VIP reaches the new holder. A container of a
// network that does not allow the VIP cannot take it (its gratuitous ARP is
// dropped), and allowedAddresses that cover another attachment's address,
// or an address inside another's allowedAddresses, are refused (code 7).
func TestVIPFailover(t *testing.T) {
	l := newLab(t)
	vip := netip.MustParseAddr("192.0.2.250")
	vipNet := l.network("vip", map[string]any{"allowedAddresses": []any{vip.String() + "/32"}, "allowVRRP": true}, nil)
	a := l.join(vipNet, "holder A", nil)
	b := l.join(vipNet, "standby B", nil)
	c := l.join(l.network("vip-client", nil, nil), "client", nil)
	x := l.join(l.network("vip-thief", nil, nil), "attacker", nil)
	for _, m := range []*member{a, b, x} {
		m.ServeTCP(t, 80)
	}
	garp := func(m *member) {
		t.Helper()
		s := sender(t, m.NS, "eth0")
		mustSend(t, s, ethFrame(broadcastMAC, m.mac, etherARP, arpPacket(1, m.mac, vip, make([]byte, 6), vip)),
			ethFrame(broadcastMAC, m.mac, etherARP, arpPacket(2, m.mac, vip, broadcastMAC, vip)))
	}
	take := func(m *member) {
		t.Helper()
		sh(m.Container, t, "ip", "addr", "add", vip.String()+"/32", "dev", "eth0")
		garp(m)
	}
	drop := func(m *member) { sh(m.Container, t, "ip", "addr", "del", vip.String()+"/32", "dev", "eth0") }
	to := func(want *member, when string) {
		t.Helper()
		got, err := framework.Dial(c.NS, "tcp", vip.String()+":80")
		if err != nil || !strings.HasPrefix(got, "hello from "+want.ID+" ") {
			t.Errorf("%s: client to the VIP: got %q, %v; want an answer from %s (%s); client's neighbour: %s",
				when, got, err, want.role, want.ID, neighMAC(t, c.Container, "eth0", vip))
		}
	}

	take(a)
	to(a, "A holds the VIP")
	drop(a)
	take(b)
	framework.Until(2*time.Second, func() bool { return neighMAC(t, c.Container, "eth0", vip) == b.mac.String() })
	if got := neighMAC(t, c.Container, "eth0", vip); got != b.mac.String() {
		t.Errorf("after B's gratuitous ARP: the client's neighbour entry for the VIP is %s, want B's %s", got, b.mac)
	}
	to(b, "B took the VIP over")

	// The thief's network does not allow the VIP.
	drops := watchDrops(t, x.Container)
	take(x)
	// A negative check: the client keeps B for half a second after the
	// thief's gratuitous ARP.
	framework.Consistently(t, 500*time.Millisecond, "after the thief's gratuitous ARP", func() error {
		if got := neighMAC(t, c.Container, "eth0", vip); got != b.mac.String() {
			return fmt.Errorf("the client's neighbour entry for the VIP is %s, want B's %s", got, b.mac)
		}
		return nil
	})
	to(b, "the thief claimed the VIP")
	drops.check(t, true, flows.ReasonSpoofed)

	// Overlaps with other attachments' addresses are refused.
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"allowedAddresses cover the client's address", map[string]any{"allowedAddresses": []any{c.v4.String() + "/32"}},
			`"allowedAddresses" ` + c.v4.String() + "/32 contains " + c.v4.String()},
		{"own address inside the VIP network's allowedAddresses", map[string]any{"ipam": map[string]any{"type": "static",
			"addresses": []any{map[string]any{"address": vip.String() + "/24"}}}},
			"address " + vip.String() + ` is in the "allowedAddresses" ` + vip.String() + "/32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := l.network("vip-overlap", tc.extra, nil)
			m := framework.NewContainer(t)
			_, err := n.Add(m, "eth0", nil)
			if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ADD: got %v (code %d), want code 7 with %q", err, cniCode(err), tc.want)
			}
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, m.ID); len(ports) != 0 {
				t.Errorf("ports %v left", ports)
			}
		})
	}
}

// The allowed addresses are in the attachment's record: after ovs-vswitchd
// is killed and started again (its flows lost), one reconcile puts them
// back. CHECK then finds the flows the record asks for, the VIP holder's
// frames from the VIP reach the client, and one from an address it is not
// allowed is still dropped.
func TestAllowedAddressesAfterRestart(t *testing.T) {
	l := newLab(t)
	vip := netip.MustParseAddr("192.0.2.250")
	a := l.join(l.network("vip-restart", map[string]any{"allowedAddresses": []any{vip.String() + "/32"}}, nil), "attacker holding the VIP", nil)
	c := l.join(l.network("vip-restart-client", nil, nil), "client", nil)
	restartVswitchd(t, nil)
	var out string
	err := framework.Wait(10*time.Second, func() (err error) { // until ovs-vswitchd serves the bridge again
		out, err = run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr)
		return err
	})
	if err != nil {
		t.Fatalf("reconcile: %v: %s", err, out)
	}
	if err := a.n.Check(a.Container, "eth0", nil); err != nil {
		t.Errorf("CHECK after the restart and reconcile: %v", err)
	}
	drops := watchDrops(t, a.Container)
	sn := sniff(t, c.NS, "eth0", "client")
	s := sender(t, a.NS, "eth0")
	other := netip.MustParseAddr("192.0.2.249")
	mustSend(t, s,
		ethFrame(c.mac, a.mac, etherIPv4, udp4(vip, c.v4, 4000, 4001, []byte("from the VIP"))),
		ethFrame(c.mac, a.mac, etherIPv4, udp4(other, c.v4, 4000, 4001, []byte("from another"))))
	from := func(src netip.Addr) func(frame) bool {
		return func(f frame) bool {
			got, _, proto, _, ok := f.ip()
			return ok && proto == protoUDP && got == src
		}
	}
	if !sn.waitFor(2*time.Second, from(vip)) {
		t.Errorf("after the restart: UDP from the allowed VIP did not reach the client")
	}
	// A negative check: half a second after the allowed frame sent with it.
	framework.Consistently(t, 500*time.Millisecond, "after the restart", func() error {
		if sn.count(from(other)) > 0 {
			return fmt.Errorf("UDP from %s reached the client, want it dropped", other)
		}
		return nil
	})
	drops.check(t, true, flows.ReasonSpoofed)
}

// Concurrent ADDs that conflict: one network allows 192.0.2.240/32, the
// other gives a container that address. Run at the same moment, round
// after round, at most one of each pair passes, and the loser leaves no
// port.
func TestAllowedAddressesConcurrentConflict(t *testing.T) {
	l := newLab(t)
	addr := "192.0.2.240"
	p := l.network("race-allow", map[string]any{"allowedAddresses": []any{addr + "/32"}}, nil)
	q := l.network("race-own", map[string]any{"ipam": map[string]any{"type": "static",
		"addresses": []any{map[string]any{"address": addr + "/24"}}}}, nil)
	for round := 0; round < 8; round++ {
		cp, cq := framework.NewContainer(t), framework.NewContainer(t)
		var wg sync.WaitGroup
		var errP, errQ error
		wg.Add(2)
		go func() { defer wg.Done(); _, errP = p.Add(cp, "eth0", nil) }()
		go func() { defer wg.Done(); _, errQ = q.Add(cq, "eth0", nil) }()
		wg.Wait()
		if errP == nil && errQ == nil {
			t.Errorf("round %d: both ADDs passed: the allowed %s/32 and the address %s", round, addr, addr)
		}
		for _, e := range []error{errP, errQ} {
			if e != nil && cniCode(e) != types.ErrInvalidNetworkConfig {
				t.Errorf("round %d: got %v (code %d), want code 7", round, e, cniCode(e))
			}
		}
		for c, err := range map[*framework.Container]error{cp: errP, cq: errQ} {
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); err != nil && len(ports) != 0 {
				t.Errorf("round %d: the refused ADD left ports %v", round, ports)
			}
		}
		p.Del(cp, "eth0", nil)
		q.Del(cq, "eth0", nil)
	}
}
