package e2e

// Odd traffic that a guard keyed on one port or one ICMP type misses: DHCP
// server messages from other source ports, and IP fragments, whose L4
// fields Open vSwitch shows as 0 (see pkg/flows/pipeline.go).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// frag4 splits an IPv4 packet (ipv4Packet) into fragments of chunk bytes of
// payload (a multiple of 8) with identification id.
func frag4(pkt []byte, chunk int, id uint16) [][]byte {
	h, payload := pkt[:20], pkt[20:]
	var out [][]byte
	for off := 0; off < len(payload); off += chunk {
		end := min(off+chunk, len(payload))
		f := append(append([]byte{}, h...), payload[off:end]...)
		binary.BigEndian.PutUint16(f[2:], uint16(len(f)))
		binary.BigEndian.PutUint16(f[4:], id)
		flags := uint16(off / 8)
		if end < len(payload) {
			flags |= 0x2000 // more fragments
		}
		binary.BigEndian.PutUint16(f[6:], flags)
		f[10], f[11] = 0, 0
		binary.BigEndian.PutUint16(f[10:], checksum(f[:20]))
		out = append(out, f)
	}
	return out
}

// frag6 splits an IPv6 packet (ipv6Packet, no extension headers) into
// fragments of chunk bytes of payload (a multiple of 8) with a fragment
// header of identification id.
func frag6(pkt []byte, chunk int, id uint32) [][]byte {
	h, payload := pkt[:40], pkt[40:]
	next := h[6]
	var out [][]byte
	for off := 0; off < len(payload); off += chunk {
		end := min(off+chunk, len(payload))
		f := append([]byte{}, h...)
		f[6] = 44
		fh := []byte{next, 0, 0, 0, 0, 0, 0, 0}
		offm := uint16(off)
		if end < len(payload) {
			offm |= 1 // more fragments
		}
		binary.BigEndian.PutUint16(fh[2:], offm)
		binary.BigEndian.PutUint32(fh[4:], id)
		f = append(append(f, fh...), payload[off:end]...)
		binary.BigEndian.PutUint16(f[4:], uint16(len(f)-40))
		out = append(out, f)
	}
	return out
}

// isFragment tells an IPv4 or IPv6 fragment.
func (f frame) isFragment() bool {
	_, _, proto, _, ok := f.ip()
	if !ok {
		return false
	}
	if f.etherType == etherIPv6 {
		return proto == 44
	}
	return binary.BigEndian.Uint16(f.payload[6:])&0x3fff != 0
}

// fragID returns the identification and offset of an IPv4 or IPv6 fragment.
func (f frame) fragID() (id uint32, off int, ok bool) {
	if !f.isFragment() {
		return 0, 0, false
	}
	if f.etherType == etherIPv6 {
		if len(f.payload) < 48 {
			return 0, 0, false
		}
		return binary.BigEndian.Uint32(f.payload[44:]), int(binary.BigEndian.Uint16(f.payload[42:]) &^ 7), true
	}
	return uint32(binary.BigEndian.Uint16(f.payload[4:])), int(binary.BigEndian.Uint16(f.payload[6:])&0x1fff) * 8, true
}

// udpDelivered returns how many IPv4 and IPv6 UDP datagrams the kernel of
// c handed to its UDP (delivered to a socket, to no port, or in error:
// every fragmented datagram counts once reassembled, however its kernel
// reassembled it; the IPv6 defragmentation of a netns with conntrack moves
// no Ip6ReasmOKs).
func udpDelivered(t *testing.T, c *framework.Container) (v4, v6 int) {
	t.Helper()
	snmp, snmp6 := sh(c, t, "cat", "/proc/net/snmp"), sh(c, t, "cat", "/proc/net/snmp6")
	var hdr []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if hdr == nil {
			hdr = f
			continue
		}
		for i, k := range hdr {
			if (k == "InDatagrams" || k == "NoPorts" || k == "InErrors" || k == "IgnoredMulti") && i < len(f) {
				var n int
				fmt.Sscan(f[i], &n)
				v4 += n
			}
		}
	}
	for _, line := range strings.Split(snmp6, "\n") {
		if f := strings.Fields(line); len(f) == 2 && (f[0] == "Udp6InDatagrams" || f[0] == "Udp6NoPorts" || f[0] == "Udp6InErrors" || f[0] == "Udp6IgnoredMulti") {
			var n int
			fmt.Sscan(f[1], &n)
			v6 += n
		}
	}
	return v4, v6
}

// Rogue DHCP servers that avoid the server ports: a DHCPv4 OFFER and ACK
// from UDP source port 6767 to a client's port 68 (broadcast), a DHCPv6
// ADVERTISE from 5547 to a client's 546 (unicast to its link-local) and a
// REPLY to all nodes; clients filter on the destination port only.
// Protected ("allowDHCPServer" default false): the victim receives none.
// Control ("allowDHCPServer": true): it receives all four.
func TestAttackDHCPServerPorts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		allow bool
	}{{"protected", false}, {"control-allowDHCPServer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			v := l.join(l.network("frag-dhcp-victim", nil, nil), "victim", nil)
			a := l.join(l.network("frag-dhcp-server", map[string]any{"allowDHCPServer": tc.allow}, nil), "attacker", nil)
			drops := watchDrops(t, a.Container)
			sn := sniff(t, v.NS, "eth0", "victim")
			s := sender(t, a.NS, "eth0")
			bcast := netip.MustParseAddr("255.255.255.255")
			allNodes := netip.MustParseAddr("ff02::1")
			offered := netip.MustParseAddr("192.0.2.251")
			const xid = 0x12130001
			mustSend(t, s,
				ethFrame(broadcastMAC, a.mac, etherIPv4, udp4(a.v4, bcast, 6767, 68, dhcp4(2, xid, v.mac, offered, a.v4))),
				ethFrame(broadcastMAC, a.mac, etherIPv4, udp4(a.v4, bcast, 6767, 68, dhcp4(5, xid, v.mac, offered, a.v4))),
				ethFrame(v.mac, a.mac, etherIPv6, udp6(a.ll, v.ll, 5547, 546, dhcp6(2, xid, a.mac))),
				ethFrame(multicastMAC(allNodes), a.mac, etherIPv6, udp6(a.ll, allNodes, 5547, 546, dhcp6(7, xid, a.mac))))
			v4 := func(f frame) bool {
				sp, dp, d, ok := f.udp()
				return ok && sp == 6767 && dp == 68 && len(d) > 8 && binary.BigEndian.Uint32(d[4:]) == xid
			}
			v6 := func(f frame) bool {
				sp, dp, d, ok := f.udp()
				return ok && sp == 5547 && dp == 546 && len(d) > 4 && uint32(d[1])<<16|uint32(d[2])<<8|uint32(d[3]) == xid&0xffffff
			}
			if tc.allow {
				framework.Until(time.Second, func() bool { return sn.count(v4) >= 2 && sn.count(v6) >= 2 })
			} else {
				// A negative check: none of them arrives for 300 ms.
				framework.Consistently(t, 300*time.Millisecond, "DHCP server messages from the attacker's other ports", func() error {
					if n := sn.count(v4) + sn.count(v6); n > 0 {
						return fmt.Errorf("the victim received %d, want none: %v", n, sn.first(5, func(f frame) bool { return v4(f) || v6(f) }))
					}
					return nil
				})
			}
			n4, n6 := sn.count(v4), sn.count(v6)
			if tc.allow && (n4 != 2 || n6 != 2) {
				t.Errorf("control: the victim received %d DHCPv4 server messages from port 6767 (want 2) and %d DHCPv6 from 5547 (want 2)", n4, n6)
			}
			if !tc.allow && n4+n6 > 0 {
				t.Errorf("the victim received %d DHCPv4 server messages to port 68 and %d DHCPv6 to 546 from the attacker's other ports, want none: %v",
					n4, n6, sn.first(5, func(f frame) bool { return v4(f) || v6(f) }))
			}
			drops.check(t, !tc.allow, flows.ReasonDHCPServer)
			if !tc.allow {
				l.normal(t)
			}
		})
	}
}

// Fragmented guard bypass. The attacker sends, as IP fragments: DHCPv4
// OFFERs (67 -> 68) and DHCPv6 ADVERTISEs (547 -> 546), each once in small
// fragments (which the userspace reassembler refuses) and once padded to
// 2500 bytes in fragments of 1400 (which it reassembles, so the guards see
// the datagram's ports); a router advertisement to all nodes and a
// neighbour advertisement for the victim B's link-local and an ICMPv4
// redirect, in small fragments. Victim: container C, which must neither receive the first
// fragment (the one with the headers) of any of them nor reassemble a
// datagram (its UDP counters). Later fragments of a datagram whose
// first was dropped may pass (the userspace datapath gives them no L4
// tuple): without the first, nothing reassembles them. Protected
// (portSecurity default, neither allowRouter nor allowDHCPServer): nothing
// reassembles. Controls: the same attacker with "allowDHCPServer" (the
// large DHCP datagrams pass, reassembled and classified as DHCP from an
// allowed server) and one with portSecurity off (everything passes).
func TestAttackFragments(t *testing.T) {
	for _, tc := range []struct {
		name       string
		extra      map[string]any
		large, all bool // what must be received: the large DHCP datagrams; every datagram
	}{
		{"protected", nil, false, false},
		{"control-allowDHCPServer", map[string]any{"allowDHCPServer": true}, true, false},
		{"control-portSecurity-off", map[string]any{"portSecurity": false}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			vn := l.network("frag-victim", nil, nil)
			b, c := l.join(vn, "victim B", nil), l.join(vn, "victim C", nil)
			a := l.join(l.network("frag-attacker", tc.extra, nil), "attacker", nil)
			drops := watchDrops(t, a.Container)
			snC := sniff(t, c.NS, "eth0", "C")
			s := sender(t, a.NS, "eth0")
			bcast := netip.MustParseAddr("255.255.255.255")
			allNodes := netip.MustParseAddr("ff02::1")
			offered := netip.MustParseAddr("192.0.2.252")
			pad := func(b []byte, n int) []byte { return append(b, make([]byte, n-len(b))...) }
			type attack struct {
				name   string
				id     uint32
				frames [][]byte
				large  bool
			}
			var attacks []attack
			add := func(name string, large bool, id uint32, dst net.HardwareAddr, et uint16, frags [][]byte) {
				at := attack{name: name, id: id, large: large}
				for _, f := range frags {
					at.frames = append(at.frames, ethFrame(dst, a.mac, et, f))
				}
				attacks = append(attacks, at)
			}
			const xid = 0x12140000
			add("DHCPv4 OFFER in 8-byte fragments", false, 0x1201, broadcastMAC, etherIPv4,
				frag4(udp4(a.v4, bcast, 67, 68, dhcp4(2, xid+1, c.mac, offered, a.v4)), 8, 0x1201))
			add("DHCPv4 OFFER of 2500 bytes in 1400-byte fragments", true, 0x1202, broadcastMAC, etherIPv4,
				frag4(udp4(a.v4, bcast, 67, 68, pad(dhcp4(2, xid+2, c.mac, offered, a.v4), 2500)), 1400, 0x1202))
			add("DHCPv6 ADVERTISE in 8-byte fragments", false, 0x1203, c.mac, etherIPv6,
				frag6(udp6(a.ll, c.ll, 547, 546, dhcp6(2, xid+3, a.mac)), 8, 0x1203))
			add("DHCPv6 ADVERTISE of 2500 bytes in 1400-byte fragments", true, 0x1204, c.mac, etherIPv6,
				frag6(udp6(a.ll, c.ll, 547, 546, pad(dhcp6(2, xid+4, a.mac), 2500)), 1400, 0x1204))
			ra := icmp6Packet(a.ll, allNodes, icmp6RA, 0, raBody(1, 1800, a.mac, attackerPrefix))
			add("router advertisement in 16-byte fragments", false, 0x1205, multicastMAC(allNodes), etherIPv6, frag6(ra, 16, 0x1205))
			na := icmp6Packet(a.ll, c.ll, icmp6NA, 0, naBody(b.ll, a.mac))
			add("NA for B's link-local in 16-byte fragments", false, 0x1206, c.mac, etherIPv6, frag6(na, 16, 0x1206))
			redirect := icmp4Redirect(a.v4, c.v4, a.v4, netip.MustParseAddr("203.0.113.9"))
			add("ICMPv4 redirect in 8-byte fragments", false, 0x1207, c.mac, etherIPv4, frag4(redirect, 8, 0x1207))
			r4, r6 := udpDelivered(t, c.Container)
			for i := 0; i < 3; i++ {
				for _, at := range attacks {
					mustSend(t, s, at.frames...)
				}
				time.Sleep(50 * time.Millisecond) // time is the subject: three rounds, each its own arrival, not one burst
			}
			// A negative check: no first fragment of a blocked attack
			// reaches C within 300 ms of the last round.
			framework.Consistently(t, 300*time.Millisecond, "fragments that must be dropped", func() error {
				for _, at := range attacks {
					if tc.all || at.large && tc.large || datapath == "system" && tc.large && strings.HasPrefix(at.name, "DHCP") {
						continue
					}
					if n := snC.count(func(f frame) bool {
						id, off, ok := f.fragID()
						return ok && f.src.String() == a.mac.String() && id == at.id && off == 0
					}); n > 0 {
						return fmt.Errorf("%s: first fragment received by C %d times, want none", at.name, n)
					}
				}
				return nil
			})
			if tc.all || tc.large {
				framework.Until(2*time.Second, func() bool { n4, n6 := udpDelivered(t, c.Container); return n4 > r4 && n6 > r6 })
			}
			for _, at := range attacks {
				want := tc.all || at.large && tc.large
				if datapath == "system" && tc.large && !tc.all && strings.HasPrefix(at.name, "DHCP") {
					// nf_defrag reassembles small fragments too: from an
					// allowed DHCP server they pass there.
					continue
				}
				head := func(f frame) bool {
					id, off, ok := f.fragID()
					return ok && f.src.String() == a.mac.String() && id == at.id && off == 0
				}
				if want {
					snC.waitFor(time.Second, head)
				}
				if got := snC.count(head) > 0; got != want {
					t.Errorf("%s: first fragment received by C %v, want %v (%d fragments sent 3 times)", at.name, got, want, len(at.frames))
				}
			}
			n4, n6 := udpDelivered(t, c.Container)
			n4, n6 = n4-r4, n6-r6
			switch {
			case tc.all && (n4 == 0 || n6 == 0):
				t.Errorf("control: C's UDP got %d IPv4 and %d IPv6 datagrams, want some of each", n4, n6)
			case tc.large && (n4 == 0 || n6 == 0):
				t.Errorf("control: C's UDP got %d IPv4 and %d IPv6 datagrams, want the large DHCP ones", n4, n6)
			case !tc.large && n4+n6 > 0:
				t.Errorf("C's UDP got %d IPv4 and %d IPv6 datagrams from the attacker's fragments, want none", n4, n6)
			}
			switch { // small fragments never reassemble; large ones are DHCP
			case tc.all:
				drops.check(t, false)
			case tc.large:
				drops.expect(t, []string{flows.ReasonFragment}, []string{flows.ReasonDHCPServer})
			default:
				drops.check(t, true, flows.ReasonFragment, flows.ReasonDHCPServer)
			}
			if tc.extra == nil {
				l.normal(t)
			}
		})
	}
}

// Large UDP datagrams between two protected containers on the bridge, which
// their kernels fragment (3000 bytes over an MTU of 1500), arrive whole, in
// IPv4 and in IPv6: port security reassembles fragments to classify them
// and passes the legitimate ones on.
func TestFragmentedUDP(t *testing.T) {
	l := newLab(t)
	n := l.network("frag-udp", nil, nil)
	p1, p2 := l.join(n, "sender", nil), l.join(n, "receiver", nil)
	for _, dst := range []netip.Addr{p2.v4, p2.v6} {
		t.Run(fmt.Sprintf("v6=%v", dst.Is6()), func(t *testing.T) {
			payload := bytes.Repeat([]byte("fragmented-udp-"), 200)[:3000]
			var pc net.PacketConn
			if err := p2.NS.Do(func(ns.NetNS) error {
				var err error
				pc, err = net.ListenPacket("udp", netip.AddrPortFrom(dst, 7070).String())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			got := make(chan []byte, 1)
			go func() {
				buf := make([]byte, 65536)
				pc.SetReadDeadline(time.Now().Add(framework.Scaled(5 * time.Second)))
				k, _, err := pc.ReadFrom(buf)
				if err != nil {
					got <- nil
					return
				}
				got <- buf[:k]
			}()
			var conn net.Conn
			if err := p1.NS.Do(func(ns.NetNS) (err error) {
				conn, err = net.Dial("udp", netip.AddrPortFrom(dst, 7070).String())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Copies until one arrives: the first may wait for neighbour
			// resolution (the receiver gives up after its own deadline).
			var d []byte
			framework.Until(10*time.Second, func() bool {
				if _, err := conn.Write(payload); err != nil {
					t.Fatal(err)
				}
				select {
				case d = <-got:
					return true
				default:
					return false
				}
			})
			if !bytes.Equal(d, payload) {
				t.Errorf("%s: received %d bytes, want the %d-byte datagram", dst, len(d), len(payload))
			}
		})
	}
	l.normal(t)
}
