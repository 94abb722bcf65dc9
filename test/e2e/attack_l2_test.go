package e2e

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// VLAN hopping. A victim is attached with "vlan": 10. The attacker sends, from
// its own MAC and address, an ARP request and an ICMP echo request tagged with
// VID 10, and a double-tagged (10, 10) ARP request; it also listens for the
// victim's VLAN-10 broadcasts. Protected: from a port with no vlan and no
// trunk (access VLAN 0) and from a trunk of VID 20 only, nothing reaches the
// victim and nothing comes back. Control: from a trunk of VID 10, the victim
// receives all of it and answers ARP and ICMP.
func TestAttackVLANHopping(t *testing.T) {
	for _, tc := range []struct {
		name    string
		extra   map[string]any
		blocked bool
		// drops are the reasons port security drops some of it for:
		// a tag on an access port is not from the port's own frames, a
		// second tag on a trunk is; the rest is ovs-vswitchd's VLANs.
		drops []string
	}{
		{"protected-no-vlan", nil, true, []string{flows.ReasonSpoofed}},
		{"protected-no-vlan-portSecurity-off", map[string]any{"portSecurity": false}, true, nil},
		{"protected-trunk-20", map[string]any{"trunk": []any{map[string]any{"id": 20}}}, true, []string{flows.ReasonDoubleTag}},
		{"control-trunk-10-portSecurity-off", map[string]any{"trunk": []any{map[string]any{"id": 10}}, "portSecurity": false}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			v := l.join(l.network("vlan10-victim", map[string]any{"vlan": 10, "isGateway": false}, nil), "VLAN-10 victim", nil)
			a := l.join(l.network("vlan-hopper", tc.extra, nil), "attacker", nil)
			drops := watchDrops(t, a.Container)
			snV := sniff(t, v.NS, "eth0", "victim")
			snA := sniff(t, a.NS, "eth0", "attacker")
			s := sender(t, a.NS, "eth0")

			mustSend(t, s,
				ethFrame(broadcastMAC, a.mac, etherARP, arpPacket(1, a.mac, a.v4, make([]byte, 6), v.v4), 10),
				ethFrame(v.mac, a.mac, etherIPv4, icmp4Echo(a.v4, v.v4, 0x1210, 1), 10),
				ethFrame(broadcastMAC, a.mac, etherARP, arpPacket(1, a.mac, a.v4, make([]byte, 6), netip.MustParseAddr("192.0.2.251")), 10, 10))
			// The victim's own broadcast on VLAN 10 (ARP for an absent address).
			v.Exec("ping", "-c", "1", "-W", "1", "192.0.2.252")

			arpFor := func(tpa string) func(frame) bool {
				return func(f frame) bool {
					op, _, _, got, ok := f.arp()
					return ok && op == 1 && got.String() == tpa && f.src.String() == a.mac.String()
				}
			}
			checks := []struct {
				what  string
				sn    *sniffer
				match func(frame) bool
			}{
				{"victim receives the tagged ARP request", snV, arpFor(v.v4.String())},
				{"victim receives the tagged echo request", snV, func(f frame) bool {
					_, dst, proto, _, ok := f.ip()
					return ok && proto == protoICMP && dst == v.v4 && f.src.String() == a.mac.String()
				}},
				{"victim receives the double-tagged frame", snV, func(f frame) bool {
					if len(f.vlans) > 0 && f.etherType == etherARP && f.src.String() == a.mac.String() {
						return true
					}
					return arpFor("192.0.2.251")(f)
				}},
				{"attacker receives the victim's ARP reply", snA, func(f frame) bool {
					op, sha, _, _, ok := f.arp()
					return ok && op == 2 && sha.String() == v.mac.String()
				}},
				{"attacker receives the victim's echo reply", snA, func(f frame) bool {
					src, _, proto, l4, ok := f.ip()
					return ok && proto == protoICMP && src == v.v4 && len(l4) > 0 && l4[0] == 0
				}},
				{"attacker receives the victim's VLAN-10 broadcast", snA, func(f frame) bool {
					op, sha, _, tpa, ok := f.arp()
					return ok && op == 1 && sha.String() == v.mac.String() && tpa.String() == "192.0.2.252"
				}},
			}
			if tc.blocked {
				// A negative check: none of it arrives for half a second.
				framework.Consistently(t, 500*time.Millisecond, "frames that must be blocked", func() error {
					for _, c := range checks {
						if c.sn.count(c.match) > 0 {
							return fmt.Errorf("%s: true, want false (first frames: %v)", c.what, c.sn.first(3, c.match))
						}
					}
					return nil
				})
			}
			for _, c := range checks {
				got := c.sn.count(c.match) > 0 || !tc.blocked && c.sn.waitFor(time.Second, c.match)
				if got == tc.blocked {
					t.Errorf("%s: %v, want %v (first frames: %v)", c.what, got, !tc.blocked, c.sn.first(3, c.match))
				}
			}
			drops.check(t, len(tc.drops) > 0, tc.drops...)
			if tc.blocked {
				l.normal(t)
			}
		})
	}
}

// Host ports across VLANs: a container on access VLAN 20 has no path to the
// node address, yet addresses a frame to the bridge interface's MAC (a static
// neighbour entry for its gateway, as CAP_NET_ADMIN in its netns allows) and
// connects to a host port published by a container on the default VLAN.
// Protected: no answer, while the outside still reaches the host port.
// Control: the same client on the default VLAN gets the answer.
func TestAttackVLANHostPort(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vlan    any
		blocked bool
	}{{"protected-vlan-20", 20, true}, {"control-default-vlan", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			srv := l.join(l.network("vlan0-publisher", nil, map[string]any{}), "publisher", mappings(pm(8097, 80, "tcp", "")))
			srv.ServeTCP(t, 80)
			// The client's addresses are in subnets of their own, so that the
			// publisher answers through its gateway (the bridge interface's MAC,
			// where the host-port reply flows take over) rather than by ARP on
			// its own VLAN.
			x := l.join(l.network("vlan-overlap", map[string]any{"vlan": tc.vlan, "isGateway": false, "ipam": map[string]any{
				"type": "static",
				"addresses": []any{
					map[string]any{"address": "203.0.113.20/24", "gateway": "203.0.113.1"},
					map[string]any{"address": "2001:db8:12::20/64", "gateway": "2001:db8:12::1"},
				},
				"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
			}}, nil), "attacker", nil)
			br := l.bridgeMAC(t).String()
			sh(x.Container, t, "ip", "neigh", "replace", "203.0.113.1", "lladdr", br, "dev", "eth0")
			sh(x.Container, t, "ip", "-6", "neigh", "replace", "2001:db8:12::1", "lladdr", br, "dev", "eth0")
			// The outside first: the host port is up before the client tries.
			expect(t, l.Outside.NS, "tcp", hp(nodeV4, 8097), srv.Container, outsideV4)
			expect(t, l.Outside.NS, "tcp", hp(nodeV6, 8097), srv.Container, outsideV6)
			for _, addr := range []string{hp(nodeV4, 8097), hp(nodeV6, 8097)} {
				if !tc.blocked {
					// The control waits for its answer (a loaded machine's
					// userspace datapath takes its time over the first packets).
					if err := framework.Wait(10*time.Second, func() error { _, err := dialWithin(x.NS, addr, time.Second); return err }); err != nil {
						t.Errorf("client on VLAN %v -> host port %s: no answer (%v), want one", tc.vlan, addr, err)
					}
					continue
				}
				// Blocked: no answer within a second, the host port being up.
				if got, err := dialWithin(x.NS, addr, time.Second); err == nil {
					t.Errorf("client on VLAN %v -> host port %s: answered %q, want no answer", tc.vlan, addr, got)
				}
			}
			if tc.blocked {
				l.normal(t)
			}
		})
	}
}

// Rogue DHCP servers. A victim container and the outside send a DHCPv4
// DISCOVER and a DHCPv6 SOLICIT; the attacker, which receives them (client
// broadcasts must pass), answers with OFFER and ACK from its own address
// (router and DNS = itself) and with DHCPv6 ADVERTISE and REPLY (source port
// 547, to the client and to all nodes). Protected ("allowDHCPServer" default
// false): no victim receives any of them. Control ("allowDHCPServer": true):
// every victim does.
func TestAttackRogueDHCP(t *testing.T) {
	for _, tc := range []struct {
		name  string
		allow bool
	}{{"protected", false}, {"control-allowDHCPServer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			v := l.join(l.network("dhcp-victim", nil, nil), "victim", nil)
			a := l.join(l.network("rogue-dhcp", map[string]any{"allowDHCPServer": tc.allow}, nil), "attacker", nil)
			drops := watchDrops(t, a.Container)
			out := l.Outside
			outMAC, outLL := l.outsideMAC(t), linkLocal(t, out.NS, "eth0", "outside")
			snA := sniff(t, a.NS, "eth0", "attacker")
			sA := sender(t, a.NS, "eth0")
			allDHCP6 := netip.MustParseAddr("ff02::1:2")
			allNodes := netip.MustParseAddr("ff02::1")
			zero := netip.IPv4Unspecified()
			bcast := netip.MustParseAddr("255.255.255.255")
			for i, victim := range []struct {
				name string
				c    *framework.Container
				mac  []byte
				ll   netip.Addr
			}{{"victim container", v.Container, v.mac, v.ll}, {"outside", out, outMAC, outLL}} {
				xid := uint32(0x12120000 + i)
				sn := sniff(t, victim.c.NS, "eth0", victim.name)
				s := sender(t, victim.c.NS, "eth0")
				mustSend(t, s,
					ethFrame(broadcastMAC, victim.mac, etherIPv4, udp4(zero, bcast, 68, 67, dhcp4(1, xid, victim.mac, netip.Addr{}, netip.Addr{}))),
					ethFrame(multicastMAC(allDHCP6), victim.mac, etherIPv6, udp6(victim.ll, allDHCP6, 546, 547, dhcp6(1, xid, victim.mac))))
				gotDiscover := snA.waitFor(time.Second, func(f frame) bool {
					sp, dp, d, ok := f.udp()
					return ok && sp == 68 && dp == 67 && len(d) > 8 && binary.BigEndian.Uint32(d[4:]) == xid
				})
				if !gotDiscover {
					t.Errorf("the attacker did not receive the DISCOVER of %s: client broadcasts must pass", victim.name)
				}
				offered := netip.MustParseAddr("192.0.2.250")
				mustSend(t, sA,
					ethFrame(broadcastMAC, a.mac, etherIPv4, udp4(a.v4, bcast, 67, 68, dhcp4(2, xid, victim.mac, offered, a.v4))),
					ethFrame(broadcastMAC, a.mac, etherIPv4, udp4(a.v4, bcast, 67, 68, dhcp4(5, xid, victim.mac, offered, a.v4))),
					ethFrame(victim.mac, a.mac, etherIPv6, udp6(a.ll, victim.ll, 547, 546, dhcp6(2, xid, a.mac))),
					ethFrame(multicastMAC(allNodes), a.mac, etherIPv6, udp6(a.ll, allNodes, 547, 546, dhcp6(7, xid, a.mac))),
					ethFrame(victim.mac, a.mac, etherIPv6, udp6(a.ll, victim.ll, 547, 547, dhcp6(13, xid, a.mac))))
				v4 := func(f frame) bool {
					sp, dp, d, ok := f.udp()
					return ok && sp == 67 && dp == 68 && len(d) > 8 && binary.BigEndian.Uint32(d[4:]) == xid
				}
				v6 := func(f frame) bool {
					sp, _, d, ok := f.udp()
					return ok && sp == 547 && len(d) > 4 && uint32(d[1])<<16|uint32(d[2])<<8|uint32(d[3]) == xid&0xffffff
				}
				if tc.allow {
					// Every message must come; under emulation they trickle in.
					framework.Until(time.Second, func() bool { return sn.count(v4) >= 2 && sn.count(v6) >= 3 })
				} else {
					// A negative check: none of them arrives for 300 ms.
					framework.Consistently(t, 300*time.Millisecond, victim.name+": DHCP server messages from the attacker", func() error {
						if n := sn.count(v4) + sn.count(v6); n > 0 {
							return fmt.Errorf("received %d, want none: %v", n, sn.first(5, func(f frame) bool { return v4(f) || v6(f) }))
						}
						return nil
					})
				}
				n4, n6 := sn.count(v4), sn.count(v6)
				if tc.allow && (n4 != 2 || n6 != 3) {
					t.Errorf("control: %s received %d DHCPv4 server messages (want 2) and %d DHCPv6 (want 3)", victim.name, n4, n6)
				}
				if !tc.allow && n4+n6 > 0 {
					t.Errorf("%s received %d DHCPv4 server messages and %d DHCPv6 server/relay messages from the attacker, want none: %v",
						victim.name, n4, n6, sn.first(5, func(f frame) bool { return v4(f) || v6(f) }))
				}
			}
			drops.check(t, !tc.allow, flows.ReasonDHCPServer)
			if !tc.allow {
				l.normal(t)
			}
		})
	}
}

// DHCP client frames go to the broadcast address only: a container that
// sends 0.0.0.0:68 -> victim:67 unicast (to the victim's MAC and address) is
// dropped; the broadcast DISCOVER from the same container still passes.
// Control (portSecurity false): the unicast frame arrives.
func TestAttackDHCPClientUnicast(t *testing.T) {
	for _, tc := range []struct {
		name string
		psec bool
	}{{"protected", true}, {"control-portSecurity-off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			v := l.join(l.network("dhcp-unicast-victim", nil, nil), "victim", nil)
			a := l.join(l.network("dhcp-unicast", map[string]any{"portSecurity": tc.psec}, nil), "attacker", nil)
			drops := watchDrops(t, a.Container)
			sn := sniff(t, v.NS, "eth0", "victim")
			s := sender(t, a.NS, "eth0")
			zero := netip.IPv4Unspecified()
			const uni, bc = 0x12121001, 0x12121002
			mustSend(t, s,
				ethFrame(v.mac, a.mac, etherIPv4, udp4(zero, v.v4, 68, 67, dhcp4(3, uni, a.mac, netip.Addr{}, netip.Addr{}))),
				ethFrame(broadcastMAC, a.mac, etherIPv4, udp4(zero, netip.MustParseAddr("255.255.255.255"), 68, 67, dhcp4(1, bc, a.mac, netip.Addr{}, netip.Addr{}))))
			xidIs := func(xid uint32) func(frame) bool {
				return func(f frame) bool {
					sp, dp, d, ok := f.udp()
					return ok && sp == 68 && dp == 67 && len(d) > 8 && binary.BigEndian.Uint32(d[4:]) == xid
				}
			}
			if !sn.waitFor(time.Second, xidIs(bc)) {
				t.Errorf("the broadcast DISCOVER did not reach the victim")
			}
			got := sn.waitFor(300*time.Millisecond, xidIs(uni))
			if got == tc.psec {
				t.Errorf("unicast DHCP client frame 0.0.0.0:68 -> %s:67 received %v, want %v", v.v4, got, !tc.psec)
			}
			drops.check(t, tc.psec, flows.ReasonSpoofed)
			if tc.psec {
				l.normal(t)
			}
		})
	}
}

// dialWithin connects over TCP from netns n within d and returns what the
// server said (dial's 3 s are long for a connection that must fail).
func dialWithin(n ns.NetNS, addr string, d time.Duration) (string, error) {
	var out string
	err := n.Do(func(ns.NetNS) error {
		conn, err := net.DialTimeout("tcp", addr, d)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(d))
		b, err := io.ReadAll(conn)
		out = string(b)
		return err
	})
	return out, err
}
