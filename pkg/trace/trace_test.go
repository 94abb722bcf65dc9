package trace

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// The traces in testdata are ofproto/trace's answers (OVS 3.1, netdev) to
// the probes of sample, on a bridge with sample's flows (declared), the
// attachment on port 32781 and the client's on 32782.
func sample() (Facts, []flows.Flow) {
	mac, _ := net.ParseMAC("02:00:00:00:00:07")
	nodeMAC, _ := net.ParseMAC("fe:7a:26:a2:68:40")
	v4, node := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.1")
	c := flows.AttachmentCookie("ctr1", "eth0")
	a := Facts{Bridge: "br0", OFPort: 32781, MAC: mac, NodeMAC: nodeMAC, IPv4: v4, HairpinV4: node, SNAT: true, LinkLocal: flows.LinkLocalOf(mac),
		Rules: flows.Resolve([]flows.Mapping{{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80}, {Protocol: flows.UDP, HostPort: 5353, ContainerPort: 53}},
			[]netip.Addr{node}, v4, netip.Addr{})}
	pl := flows.DefaultPipeline()
	fa := flows.HostPorts{Cookie: c, OFPort: a.OFPort, MAC: openflow.MAC(mac), NodeMAC: openflow.MAC(nodeMAC), IPv4: v4, HairpinV4: node, Rules: a.Rules, SNAT: true}
	declared := flows.PortSecurityFlows(flows.PortSecurity{Cookie: c, OFPort: a.OFPort, MAC: openflow.MAC(mac), IPs: []netip.Addr{v4}, LinkLocal: a.LinkLocal})
	declared = append(declared, pl.SharedFlows()...)
	declared = append(declared, pl.NodeIPFlows(fa)...)
	declared = append(declared, pl.AttachmentFlows(fa)...)
	return a, declared
}

func TestVerdicts(t *testing.T) {
	a, declared := sample()
	want := map[Question]string{
		Outside: "DNAT 198.51.100.1:8080 -> 198.51.100.7:80, zone 64000, output port 32781 (the host-port output to the container, table 41, priority 100)",
		Pod:     "DNAT 198.51.100.1:8080 -> 198.51.100.7:80, zone 64002, output port 32781 (the host-port output to the container, table 41, priority 100)",
		Hairpin: "DNAT 198.51.100.1:8080 -> 198.51.100.7:80, zone 64002, SNAT 198.51.100.7 -> 198.51.100.1, zone 64001, output port 32781 (the host-port output to the container, table 41, priority 100)",
		Node:    "from the node: nft DNAT 198.51.100.1:8080 -> 198.51.100.7:80 in the node's nat/output hook (table ovsflow_hostport, not OVS); then NORMAL: flooded (no learned MAC for the destination) (the bridge's own NORMAL flow, table 0, priority 0)",
		HostIP:  "DNAT 198.51.100.1:8080 -> 198.51.100.7:80, zone 64000, output port 32781 (the host-port output to the container, table 41, priority 100)",
		UDP:     "DNAT 198.51.100.1:5353 -> 198.51.100.7:53, zone 64000, output port 32781 (the host-port output to the container, table 41, priority 100)",
		RA:      "dropped by the port-security guard for router advertisements (table 0, priority 420)",
		DHCP4:   "dropped by the port-security guard for DHCP server frames (table 0, priority 420)",
		DHCP6:   "dropped by the port-security guard for DHCP server frames (table 0, priority 420)",
		ARP:     "dropped by the port-security drop of any other frame (another source MAC or address, a VLAN tag) (table 0, priority 390)",
		ND:      "dropped by the port-security drop of neighbour discovery for other addresses (table 0, priority 405)",
		Spoof4:  "dropped by the port-security drop of any other frame (another source MAC or address, a VLAN tag) (table 0, priority 390)",
		Spoof6:  "dropped by the port-security drop of any other frame (another source MAC or address, a VLAN tag) (table 0, priority 390)",
		VLAN:    "dropped by the port-security drop of any other frame (another source MAC or address, a VLAN tag) (table 0, priority 390)",
		Frag:    "dropped by the port-security guard for fragments that do not reassemble (table 0, priority 420)",
		Own4:    "NORMAL: flooded (no learned MAC for the destination) (the bridge's own NORMAL flow, table 0, priority 0)",
		Own6:    "NORMAL: flooded (no learned MAC for the destination) (the bridge's own NORMAL flow, table 0, priority 0)",
		// sample's bridge has no tunnel: nothing to trace.
		Tunnel:     "no tunnel: bridge br0 has no overlay tunnel port, the node tunnels to no peer",
		FromTunnel: "no tunnel: bridge br0 has no overlay tunnel port, the node tunnels to no peer",
	}
	for _, q := range Questions {
		t.Run(string(q), func(t *testing.T) {
			p, err := Build(a, Ask{Question: q, InPort: "32782"})
			if err != nil {
				t.Fatal(err)
			}
			if p.Decided != "" {
				if p.Decided != want[q] {
					t.Errorf("got  %s\nwant %s", p.Decided, want[q])
				}
				return
			}
			raw, err := os.ReadFile(filepath.Join("testdata", string(q)+".trace"))
			if err != nil {
				t.Fatal(err)
			}
			// The trace is of this very packet.
			if first := strings.SplitN(string(raw), "\n", 2)[0]; !strings.HasPrefix(first, "Flow: ") {
				t.Fatalf("testdata: %q", first)
			}
			if got := Verdict(p, Parse(string(raw)), declared); got != want[q] {
				t.Errorf("got  %s\nwant %s", got, want[q])
			}
		})
	}
}

func TestVerdictUndeclared(t *testing.T) {
	a, _ := sample()
	p, _ := Build(a, Ask{Question: RA})
	raw, _ := os.ReadFile("testdata/ra.trace")
	if got := Verdict(p, Parse(string(raw)), nil); !strings.Contains(got, "that the records do not declare") {
		t.Errorf("a flow not declared: got %q", got)
	}
}

func TestBuildErrors(t *testing.T) {
	a, _ := sample()
	if _, err := Build(a, Ask{Question: Outside, Protocol: flows.SCTP}); err == nil {
		t.Error("a protocol without a host port: got no error")
	}
	a.IPv4 = netip.Addr{}
	if _, err := Build(a, Ask{Question: DHCP4}); err == nil {
		t.Error("dhcp4 without an IPv4 address: got no error")
	}
	if _, err := ParseQuestion("bogus"); err == nil {
		t.Error("ParseQuestion(bogus): got no error")
	}
}

func TestNodeLocal(t *testing.T) {
	a, _ := sample()
	p, err := Build(a, Ask{Question: Node, NodeLocalRead: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "from the node: no node-local DNAT of tcp 198.51.100.1:8080 (nft map hostports of table ovsflow_hostport): run reconcile"; p.Decided != want {
		t.Errorf("no element: got %q, want %q", p.Decided, want)
	}
	other := netip.MustParseAddrPort("198.51.100.9:8000")
	p, _ = Build(a, Ask{Question: Node, NodeLocalRead: true, NodeLocal: other})
	if p.Decided != "" || p.Packet.Dst != other.Addr() || p.Packet.DstPort != other.Port() || !strings.Contains(p.Prefix, "-> 198.51.100.9:8000 ") {
		t.Errorf("an element elsewhere: got %+v", p)
	}
}

// The overlay's traces in testdata (tunnel*, fromtunnel*) are
// ofproto/trace's answers (OVS 3.1, netdev) to the probes of
// sampleOverlay: a pod of node a of TestOverlayAcrossSubnets (test/e2e),
// whose bridge brov has the tunnel on port 2 to node b, 203.0.113.2.
func sampleOverlay() (Facts, []flows.Flow) {
	mac, _ := net.ParseMAC("7a:36:80:f4:d5:c1")
	v4, v6 := netip.MustParseAddr("198.18.1.2"), netip.MustParseAddr("2001:db8:1::2")
	b := netip.MustParseAddr("203.0.113.2")
	o := flows.Overlay{TunnelPort: 2, BridgeMAC: openflow.MAC{0x9e, 0xe9, 0xf1, 0x8a, 0x39, 0x44},
		Local: []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24"), netip.MustParsePrefix("2001:db8:1::/64")},
		Peers: []flows.OverlayPeer{{Dst: netip.MustParsePrefix("198.18.2.0/24"), Remote: b}, {Dst: netip.MustParsePrefix("2001:db8:2::/64"), Remote: b}}}
	a := Facts{ContainerID: "ctr-4", IfName: "eth0", Bridge: "brov", OFPort: 47859, MAC: mac, IPv4: v4, IPv6: v6,
		LinkLocal: flows.LinkLocalOf(mac), PortSec: true, Overlay: o, TunnelName: "ovsflow-tun"}
	declared := flows.PortSecurityFlows(flows.PortSecurity{Cookie: flows.AttachmentCookie(a.ContainerID, a.IfName), OFPort: a.OFPort,
		MAC: openflow.MAC(mac), IPs: []netip.Addr{v4, v6}, LinkLocal: a.LinkLocal})
	declared = append(declared, flows.BaseFlows()...)
	declared = append(declared, flows.OverlayFlows(o)...)
	return a, declared
}

// TestOverlayVerdicts: the pod's packet to a tunnelled peer's range, which
// the node routes into the tunnel (two legs, one trace each), and the
// tunnel's packet to the pod, from the peer and from a node it does not
// know.
func TestOverlayVerdicts(t *testing.T) {
	a, declared := sampleOverlay()
	toNode := "from the pod to the node: NORMAL: to the learned port LOCAL (the base NORMAL flow of a secure bridge, table 0, priority 0); "
	into := "into tunnel ovsflow-tun (port 2), tun_dst 203.0.113.2, tun_id 0xfc5 (the overlay's send to a peer's node, table 50, priority 100)"
	for _, tc := range []struct {
		name   string
		ask    Ask
		traces []string
		// packets are the probe's legs, as ofproto/trace's flow argument.
		packets []string
		want    string
	}{
		{"tunnel", Ask{Question: Tunnel}, []string{"tunnel", "tunnel-routed"}, []string{
			"udp,in_port=47859,dl_src=7a:36:80:f4:d5:c1,dl_dst=9e:e9:f1:8a:39:44,nw_src=198.18.1.2,nw_dst=198.18.2.1,udp_src=40000,udp_dst=53",
			"udp,in_port=LOCAL,dl_src=9e:e9:f1:8a:39:44,dl_dst=02:0f:c5:00:00:01,nw_src=198.18.1.2,nw_dst=198.18.2.1,udp_src=40000,udp_dst=53"},
			toNode + "then the node routes it to 198.18.2.1 via the overlay's next hop: " + into},
		{"tunnel-ipv6", Ask{Question: Tunnel, IPv6: true}, []string{"tunnel-ipv6", "tunnel-ipv6-routed"}, []string{
			"udp6,in_port=47859,dl_src=7a:36:80:f4:d5:c1,dl_dst=9e:e9:f1:8a:39:44,ipv6_src=2001:db8:1::2,ipv6_dst=2001:db8:2::1,udp_src=40000,udp_dst=53",
			"udp6,in_port=LOCAL,dl_src=9e:e9:f1:8a:39:44,dl_dst=02:0f:c5:00:00:01,ipv6_src=2001:db8:1::2,ipv6_dst=2001:db8:2::1,udp_src=40000,udp_dst=53"},
			toNode + "then the node routes it to 2001:db8:2::1 via the overlay's next hop: " + into},
		{"tunnel-no-peer", Ask{Question: Tunnel, Dst: netip.MustParseAddr("198.51.100.5")}, []string{"tunnel", "tunnel-no-peer-routed"}, nil,
			toNode + "then the node routes it to 198.51.100.5 via the overlay's next hop: dropped by the overlay's drop of what no tunnelled peer's range holds (table 50, priority 0)"},
		{"fromtunnel", Ask{Question: FromTunnel}, []string{"fromtunnel"}, []string{
			"udp,in_port=2,tun_src=203.0.113.2,tun_id=0xfc5,dl_src=00:00:5e:00:53:01,dl_dst=02:0f:c5:00:00:01,nw_src=198.18.2.1,nw_dst=198.18.1.2,udp_src=40000,udp_dst=53"},
			"from 203.0.113.2 through tunnel ovsflow-tun (port 2): to LOCAL, the node routes it to the pod (the overlay's delivery to the node from a known node, table 51, priority 100)"},
		{"fromtunnel-ipv6", Ask{Question: FromTunnel, IPv6: true}, []string{"fromtunnel-ipv6"}, []string{
			"udp6,in_port=2,tun_src=203.0.113.2,tun_id=0xfc5,dl_src=00:00:5e:00:53:01,dl_dst=02:0f:c5:00:00:01,ipv6_src=2001:db8:2::1,ipv6_dst=2001:db8:1::2,udp_src=40000,udp_dst=53"},
			"from 203.0.113.2 through tunnel ovsflow-tun (port 2): to LOCAL, the node routes it to the pod (the overlay's delivery to the node from a known node, table 51, priority 100)"},
		{"fromtunnel-forged", Ask{Question: FromTunnel, TunSrc: netip.MustParseAddr("198.51.100.99")}, []string{"fromtunnel-forged"}, []string{
			"udp,in_port=2,tun_src=198.51.100.99,tun_id=0xfc5,dl_src=00:00:5e:00:53:01,dl_dst=02:0f:c5:00:00:01,nw_src=203.0.113.10,nw_dst=198.18.1.2,udp_src=40000,udp_dst=53"},
			"from 198.51.100.99 through tunnel ovsflow-tun (port 2): dropped by the overlay's drop of a tunnelled packet from an unknown node or not for this node's pods (table 51, priority 0)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Build(a, tc.ask)
			if err != nil {
				t.Fatal(err)
			}
			var legs []Probe
			for q := &p; q != nil; q = q.Then {
				legs = append(legs, *q)
			}
			if len(legs) != len(tc.traces) {
				t.Fatalf("got %d legs, want %d", len(legs), len(tc.traces))
			}
			// What inspect reads before the first leg: the port NORMAL
			// sends to the bridge interface's MAC on.
			legs[0].Ask.Learned = "LOCAL"
			var got []string
			for i, leg := range legs {
				if tc.packets != nil && leg.Packet.String() != tc.packets[i] {
					t.Errorf("leg %d: got packet %s, want %s", i, leg.Packet, tc.packets[i])
				}
				raw, err := os.ReadFile(filepath.Join("testdata", tc.traces[i]+".trace"))
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, Verdict(leg, Parse(string(raw)), declared))
			}
			if v := strings.Join(got, "; "); v != tc.want {
				t.Errorf("got  %s\nwant %s", v, tc.want)
			}
		})
	}
}

// TestOverlayDecided: a bridge without a tunnel, a tunnel without a peer
// of the family, are verdicts; a pod without an address of the family is
// not asked.
func TestOverlayDecided(t *testing.T) {
	a, _ := sampleOverlay()
	none := a
	none.Overlay = flows.Overlay{}
	lone := a
	lone.Overlay.Peers = lone.Overlay.Peers[:1] // IPv4 only
	for _, tc := range []struct {
		name string
		a    Facts
		ask  Ask
		want string
	}{
		{"no tunnel", none, Ask{Question: Tunnel}, "no tunnel: bridge brov has no overlay tunnel port, the node tunnels to no peer"},
		{"no tunnel, from it", none, Ask{Question: FromTunnel}, "no tunnel: bridge brov has no overlay tunnel port, the node tunnels to no peer"},
		{"no IPv6 peer", lone, Ask{Question: Tunnel, IPv6: true}, "no peer: the record of tunnel ovsflow-tun (port 2) holds no tunnelled IPv6 pod range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Build(tc.a, tc.ask)
			if err != nil || p.Decided != tc.want || p.Then != nil {
				t.Errorf("got %q, %v, then %v; want %q", p.Decided, err, p.Then, tc.want)
			}
		})
	}
	lone.Overlay.Peers = nil
	if p, _ := Build(lone, Ask{Question: FromTunnel}); p.Decided != "no peer: the record of tunnel ovsflow-tun (port 2) holds no tunnelled node (give the outer source)" {
		t.Errorf("no peer, from the tunnel: got %q", p.Decided)
	}
	// An outer source given: traced, as the node would take it.
	if p, _ := Build(lone, Ask{Question: FromTunnel, TunSrc: netip.MustParseAddr("2001:db8::9")}); p.Decided != "" || !strings.Contains(p.Packet.String(), ",tun_ipv6_src=2001:db8::9,") {
		t.Errorf("no peer, an outer source given: got %q, packet %s", p.Decided, p.Packet)
	}
	v4only := a
	v4only.IPv6 = netip.Addr{}
	if _, err := Build(v4only, Ask{Question: Tunnel, IPv6: true}); !errors.Is(err, ErrNoAddress) {
		t.Errorf("no IPv6 address: got %v, want ErrNoAddress", err)
	}
}
