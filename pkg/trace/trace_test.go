package trace

import (
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
func sample() (Attachment, []flows.Flow) {
	mac, _ := net.ParseMAC("02:00:00:00:00:07")
	nodeMAC, _ := net.ParseMAC("fe:7a:26:a2:68:40")
	v4, node := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.1")
	c := flows.AttachmentCookie("ctr1", "eth0")
	a := Attachment{OFPort: 32781, MAC: mac, NodeMAC: nodeMAC, IPv4: v4, HairpinV4: node, SNAT: true, LinkLocal: flows.LinkLocalOf(mac),
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
	}
	for _, q := range Questions {
		t.Run(string(q), func(t *testing.T) {
			p, err := Build(a, Ask{Question: q, InPort: "32782"})
			if err != nil {
				t.Fatal(err)
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
