package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// attackerPrefix is the prefix a rogue router advertises.
var attackerPrefix = netip.MustParseAddr("2001:db8:ba::")

// Rogue router advertisements (CVE-2020-10749 class) and redirects: a
// container sends an RA (cur hop limit 1, router lifetime 1800, an autonomous
// prefix of its own) from its own link-local to all nodes, ICMPv6 redirects
// to each victim and an IPv4 redirect to the outside. Victims: an L2-only container on the same bridge (accept_ra
// default) and the outside netns behind the uplink (accept_ra 1, forwarding
// 0). Protected ("allowRouter" default false): no default route via the
// attacker, no SLAAC address in its prefix, hop limit unchanged, no RA or
// redirect received. Control ("allowRouter": true): all of it happens.
func TestAttackRogueRouter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		allow bool
	}{{"protected", false}, {"control-allowRouter", true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			victim := l.join(l.network("ra-l2-victim", map[string]any{"ipam": nil, "isGateway": false}, nil), "L2-only victim", nil)
			a := l.join(l.network("rogue-router", map[string]any{"allowRouter": tc.allow}, nil), "attacker", nil)
			drops := watchDrops(t, a.Container)
			out := l.Outside
			sh(out, t, "sysctl", "-qw", "net.ipv6.conf.eth0.forwarding=0", "net.ipv6.conf.eth0.accept_ra=1")
			outLL := linkLocal(t, out.NS, "eth0", "outside")
			outMAC := l.outsideMAC(t)
			type victimT struct {
				name string
				c    *framework.Container
				ll   netip.Addr
				mac  net.HardwareAddr
				sn   *sniffer
				hop  string
			}
			victims := []*victimT{
				{name: "L2-only container", c: victim.Container, ll: victim.ll, mac: victim.mac},
				{name: "outside", c: out, ll: outLL, mac: outMAC},
			}
			for _, v := range victims {
				v.sn = sniff(t, v.c.NS, "eth0", v.name)
				v.hop = sysctl(v.c, t, "net.ipv6.conf.eth0.hop_limit")
			}

			s := sender(t, a.NS, "eth0")
			allNodes := netip.MustParseAddr("ff02::1")
			ra := ethFrame(multicastMAC(allNodes), a.mac, etherIPv6,
				icmp6Packet(a.ll, allNodes, icmp6RA, 0, raBody(1, 1800, a.mac, attackerPrefix)))
			for i := 0; i < 3; i++ {
				mustSend(t, s, ra)
				for _, v := range victims {
					mustSend(t, s, ethFrame(v.mac, a.mac, etherIPv6, icmp6Packet(a.ll, v.ll, icmp6Redirect, 0,
						redirectBody(a.ll, netip.MustParseAddr(outsideV6), a.mac))))
				}
				// And an IPv4 redirect to the outside (the L2-only victim has no IPv4).
				mustSend(t, s, ethFrame(outMAC, a.mac, etherIPv4, icmp4Redirect(a.v4, netip.MustParseAddr(outsideV4), a.v4, netip.MustParseAddr("203.0.113.9"))))
				time.Sleep(50 * time.Millisecond) // time is the subject: the pace of the announcements, three rounds
			}
			isRedirect4 := func(f frame) bool {
				_, _, proto, l4, ok := f.ip()
				return ok && f.etherType == etherIPv4 && proto == protoICMP && len(l4) > 0 && l4[0] == 5 && f.src.String() == a.mac.String()
			}

			isType := func(typ uint8) func(frame) bool {
				return func(f frame) bool {
					got, _, ok := f.icmp6()
					return ok && got == typ && f.src.String() == a.mac.String()
				}
			}
			for _, v := range victims {
				if tc.allow {
					v.sn.waitFor(2*time.Second, isType(icmp6RA))
					framework.Until(2*time.Second, func() bool {
						return strings.Contains(sh(v.c, t, "ip", "-6", "route", "show", "default"), a.ll.String())
					})
				} else {
					// A negative check: the victim takes nothing of the rogue
					// router's for 300 ms after the last round.
					framework.Consistently(t, 300*time.Millisecond, v.name+" and the rogue router", func() error {
						route := sh(v.c, t, "ip", "-6", "route", "show", "default")
						addrs := sh(v.c, t, "ip", "-6", "addr", "show", "dev", "eth0")
						hop := sysctl(v.c, t, "net.ipv6.conf.eth0.hop_limit")
						nRA, nRedirect := v.sn.count(isType(icmp6RA)), v.sn.count(isType(icmp6Redirect))+v.sn.count(isRedirect4)
						if strings.Contains(route, "via "+a.ll.String()) || strings.Contains(addrs, "2001:db8:ba:") || hop != v.hop || nRA > 0 || nRedirect > 0 {
							return fmt.Errorf("took it: default route %q, addresses %q, hop limit %s -> %s, %d RAs and %d redirects received",
								strings.TrimSpace(route), addrs, v.hop, hop, nRA, nRedirect)
						}
						return nil
					})
				}
				route := sh(v.c, t, "ip", "-6", "route", "show", "default")
				addrs := sh(v.c, t, "ip", "-6", "addr", "show", "dev", "eth0")
				hop := sysctl(v.c, t, "net.ipv6.conf.eth0.hop_limit")
				nRA, nRedirect := v.sn.count(isType(icmp6RA)), v.sn.count(isType(icmp6Redirect))+v.sn.count(isRedirect4)
				gotRoute := strings.Contains(route, "via "+a.ll.String())
				gotAddr := strings.Contains(addrs, "2001:db8:ba:")
				gotHop := hop != v.hop
				if !tc.allow {
					if gotRoute || gotAddr || gotHop || nRA > 0 || nRedirect > 0 {
						t.Errorf("%s took the rogue router: default route via attacker %v (%q), SLAAC address in %s/64 %v, hop limit %s -> %s, %d RAs and %d redirects received",
							v.name, gotRoute, strings.TrimSpace(route), attackerPrefix, gotAddr, v.hop, hop, nRA, nRedirect)
					}
					continue
				}
				if v.c == out && v.sn.count(isRedirect4) == 0 {
					t.Errorf("control: the outside received no IPv4 redirect")
				}
				if !gotRoute || !gotAddr || nRA == 0 || nRedirect == 0 {
					t.Errorf("control: %s did not take the router: default route via attacker %v (%q), SLAAC address %v, %d RAs and %d redirects received",
						v.name, gotRoute, strings.TrimSpace(route), gotAddr, nRA, nRedirect)
				}
				if !gotHop {
					// Linux ≥ 6.x may ignore a cur hop limit below the current one.
					t.Logf("control: %s kept hop limit %s after an RA with cur hop limit 1", v.name, hop)
				}
			}
			drops.check(t, !tc.allow, flows.ReasonRouterAdvertisement, flows.ReasonRedirect)
			if !tc.allow {
				l.normal(t)
			}
		})
	}
}

// Link-local and neighbour discovery spoofing. The container's link-local is
// fe80::EUI-64(MAC) and the only link-local it may use as IPv6 source, NA
// target or NS source. Victims: containers B and C on the same bridge, the
// node. Protected (portSecurity default): every forgery is dropped; control
// (portSecurity false): every one gets through.
func TestAttackLinkLocal(t *testing.T) {
	for _, tc := range []struct {
		name string
		psec bool
	}{{"protected", true}, {"control-portSecurity-off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			vn := l.network("ll-victim", nil, nil)
			b, c := l.join(vn, "victim B", nil), l.join(vn, "victim C", nil)
			a := l.join(l.network("ll-attacker", map[string]any{"portSecurity": tc.psec}, nil), "attacker", nil)
			drops := watchDrops(t, a.Container)
			nodeLL := linkLocal(t, nil, l.Bridge, "node")
			gw6 := netip.MustParseAddr("2001:db8:c::1")
			if tc.psec {
				for _, m := range []*member{a, b, c} {
					if want := eui64LinkLocal(m.mac); m.ll != want {
						t.Errorf("%s: link-local %s, want %s (EUI-64 of %s)", m.role, m.ll, want, m.mac)
					}
				}
			}
			s := sender(t, a.NS, "eth0")
			snC := sniff(t, c.NS, "eth0", "C")
			// fresh gives C neighbour entries for B's and the node's link-locals.
			fresh := func(t *testing.T) {
				sh(c.Container, t, "ip", "-6", "neigh", "flush", "dev", "eth0")
				pingLL(c.Container, t, b.ll)
				pingLL(c.Container, t, nodeLL)
			}
			// checkNeigh sends attack and fails unless who's entry for ip
			// names bad exactly in the control (there the attack is sent
			// again until it has: an NS of the victim's own may set the
			// entry back first).
			checkNeigh := func(t *testing.T, who *framework.Container, dev string, ip netip.Addr, bad net.HardwareAddr, what string, attack []byte) {
				t.Helper()
				mustSend(t, s, attack)
				if tc.psec {
					// A negative check: the entry does not take the attacker's MAC for 200 ms.
					framework.Consistently(t, 200*time.Millisecond, what, func() error {
						if got := neighMAC(t, who, dev, ip); got == bad.String() {
							return fmt.Errorf("neighbour entry of %s is the attacker's MAC %s", ip, got)
						}
						return nil
					})
				} else {
					framework.Until(2*time.Second, func() bool {
						if neighMAC(t, who, dev, ip) == bad.String() {
							return true
						}
						mustSend(t, s, attack)
						return false
					})
				}
				got := neighMAC(t, who, dev, ip)
				if poisoned := got == bad.String(); poisoned == tc.psec {
					t.Errorf("%s: neighbour entry of %s is %q (the MAC the attacker gave, %s: %v), want that %v", what, ip, got, bad, poisoned, !tc.psec)
				}
			}
			echoFrom := func(t *testing.T, src netip.Addr, id uint16) {
				t.Helper()
				mustSend(t, s, ethFrame(c.mac, a.mac, etherIPv6, icmp6Packet(src, c.ll, icmp6EchoRequest, 0, echo6Body(id, 1))))
				match := func(f frame) bool {
					s, _, _, _, ok := f.ip()
					typ, body, ok6 := f.icmp6()
					return ok && ok6 && s == src && typ == icmp6EchoRequest && len(body) >= 2 && uint16(body[0])<<8|uint16(body[1]) == id
				}
				wait := 2 * time.Second // the control: until it arrives
				if tc.psec {
					wait = 300 * time.Millisecond // a negative check over a stated window
				}
				got := snC.waitFor(wait, match)
				if got == tc.psec {
					t.Errorf("echo request from forged source %s: received by C %v, want %v", src, got, !tc.psec)
				}
			}

			t.Run("source-other-containers-link-local", func(t *testing.T) { echoFrom(t, b.ll, 0x1201) })
			t.Run("source-arbitrary-link-local", func(t *testing.T) { echoFrom(t, netip.MustParseAddr("fe80::dead:beef:12"), 0x1202) })
			t.Run("NA-other-containers-link-local", func(t *testing.T) {
				fresh(t)
				checkNeigh(t, c.Container, "eth0", b.ll, a.mac, "C after an NA for B's link-local", ethFrame(c.mac, a.mac, etherIPv6, icmp6Packet(a.ll, c.ll, icmp6NA, 0, naBody(b.ll, a.mac))))
			})
			t.Run("NA-node-link-local", func(t *testing.T) {
				fresh(t)
				checkNeigh(t, c.Container, "eth0", nodeLL, a.mac, "C after an NA for the node's link-local", ethFrame(c.mac, a.mac, etherIPv6, icmp6Packet(a.ll, c.ll, icmp6NA, 0, naBody(nodeLL, a.mac))))
			})
			t.Run("NS-forged-link-local-source", func(t *testing.T) {
				fresh(t)
				sn := solicitedNode(c.ll)
				checkNeigh(t, c.Container, "eth0", b.ll, a.mac, "C after an NS from B's link-local", ethFrame(multicastMAC(sn), a.mac, etherIPv6, icmp6Packet(b.ll, sn, icmp6NS, 0, nsBody(c.ll, a.mac))))
			})
			t.Run("NA-own-global-with-victims-MAC", func(t *testing.T) {
				// The node resolves A's global address, then A claims it is at B's MAC.
				if _, err := run("ping", "-6", "-c", "1", "-W", "2", a.v6.String()); err != nil {
					t.Fatalf("node -> A: %v", err)
				}
				checkNeigh(t, nil, l.Bridge, a.v6, b.mac, "the node after an NA for A's address with B's MAC", ethFrame(l.bridgeMAC(t), a.mac, etherIPv6, icmp6Packet(a.v6, gw6, icmp6NA, 0, naBody(a.v6, b.mac))))
			})
			// ndFrom matches an NS or NA (typ) from the attacker's MAC with
			// IPv6 source src and target.
			ndFrom := func(typ uint8, src, target netip.Addr) func(frame) bool {
				return func(f frame) bool {
					s, _, _, _, _ := f.ip()
					got, body, ok := f.icmp6()
					return ok && got == typ && s == src && len(body) >= 20 && netip.AddrFrom16([16]byte(body[4:20])) == target &&
						f.src.String() == a.mac.String()
				}
			}
			unspec := netip.IPv6Unspecified()
			ndWait := 2 * time.Second // the control: until it arrives
			if tc.psec {
				ndWait = 300 * time.Millisecond // a negative check over a stated window
			}
			t.Run("DAD-NS-for-victims-address", func(t *testing.T) {
				// B's address as a tentative one of A's: B, were it still
				// tentative, would give it up.
				for _, target := range []netip.Addr{b.v6, b.ll} {
					sn := solicitedNode(target)
					mustSend(t, s, ethFrame(multicastMAC(sn), a.mac, etherIPv6, icmp6Packet(unspec, sn, icmp6NS, 0, nsBody(target, nil))))
					if got := snC.waitFor(ndWait, ndFrom(icmp6NS, unspec, target)); got == tc.psec {
						t.Errorf("DAD NS from :: for B's %s: received by C %v, want %v", target, got, !tc.psec)
					}
				}
			})
			t.Run("NA-from-foreign-source", func(t *testing.T) {
				// For A's own link-local and MAC, but from B's addresses.
				for _, src := range []netip.Addr{b.ll, b.v6} {
					mustSend(t, s, ethFrame(c.mac, a.mac, etherIPv6, icmp6Packet(src, c.ll, icmp6NA, 0, naBody(a.ll, a.mac))))
					if got := snC.waitFor(ndWait, ndFrom(icmp6NA, src, a.ll)); got == tc.psec {
						t.Errorf("NA for A's link-local from B's %s: received by C %v, want %v", src, got, !tc.psec)
					}
				}
			})
			t.Run("own-link-local-DAD-and-NA-still-pass", func(t *testing.T) {
				pingLL(a.Container, t, c.ll) // own link-local as source, NS source, NA target
				// Global addresses: A's NS and NA for its own, after a flush.
				for _, m := range []*member{a, c} {
					sh(m.Container, t, "ip", "-6", "neigh", "flush", "dev", "eth0")
				}
				if _, err := a.Exec("ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", c.v6.String()); err != nil {
					t.Errorf("A -> C %s after a neighbour flush: %v", c.v6, err)
				}
				if _, err := c.Exec("ping", "-6", "-c", "2", "-i", "0.2", "-W", "2", a.v6.String()); err != nil {
					t.Errorf("C -> A %s after a neighbour flush: %v", a.v6, err)
				}
				for _, own := range []netip.Addr{a.v6, a.ll} {
					sn := solicitedNode(own)
					mustSend(t, s, ethFrame(multicastMAC(sn), a.mac, etherIPv6, icmp6Packet(unspec, sn, icmp6NS, 0, nsBody(own, nil))))
					if !snC.waitFor(time.Second, ndFrom(icmp6NS, unspec, own)) {
						t.Errorf("a duplicate address detection NS from :: for A's own %s did not reach C", own)
					}
				}
				// An unsolicited NA for its own global address, from it.
				mustSend(t, s, ethFrame(c.mac, a.mac, etherIPv6, icmp6Packet(a.v6, c.ll, icmp6NA, 0, naBody(a.v6, a.mac))))
				if !snC.waitFor(time.Second, ndFrom(icmp6NA, a.v6, a.v6)) {
					t.Errorf("A's NA for its own %s did not reach C", a.v6)
				}
			})
			drops.check(t, tc.psec, flows.ReasonSpoofed, flows.ReasonNeighbourDiscovery)
			if tc.psec {
				l.normal(t)
			}
		})
	}
}
