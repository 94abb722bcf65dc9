// Package overlay lets the pods of nodes on different subnets reach each
// other: where host-gw routes (pkg/podroutes) need every node on one L2
// segment, the node agent tunnels a peer's pod ranges through one
// flow-based tunnel port of the bridge (Geneve or VXLAN) to the peer's
// InternalIP.
//
// Cross-node pod traffic goes through each node's own stack either way,
// so that kube-proxy's Services, the node's conntrack and its firewall
// treat it as they treat host-gw traffic. A tunnelled peer's pod range is
// routed by the kernel into the bridge, via a fixed next hop (NextHop4,
// NextHop6) on the bridge interface whose static neighbour is
// flows.OverlayMAC; the bridge's flows (pkg/flows, overlay.go) send what
// the node routes to that MAC through the tunnel to the peer's InternalIP,
// and hand what comes out of the tunnel from a known node to this node's
// pod ranges to the node's stack (output LOCAL), which routes it to the pod.
//
// Split (pure) says which peers are tunnelled; Discover reads the node's
// own facts; Apply and Withdraw keep the tunnel port, its record, its flows
// and the next hops' neighbours; Rebuild gives reconcile the flows from the
// record (OVSDB is the record, as for every attachment).
package overlay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
)

// Mode is how the node reaches the pod ranges of the other nodes (the
// agent's -overlay).
type Mode string

const (
	// None: host-gw routes to every peer, as without the overlay.
	None Mode = "none"
	// Geneve and VXLAN: every peer through the tunnel of that type.
	Geneve Mode = "geneve"
	VXLAN  Mode = "vxlan"
	// Hybrid: host-gw to the peers whose InternalIP is on this node's own
	// subnet, Geneve to the others, where the node can tell (Facts.CanTell);
	// host-gw to every peer where it cannot.
	Hybrid Mode = "hybrid"
)

// ParseMode reads a mode ("": Hybrid).
func ParseMode(s string) (Mode, error) {
	return parseOneOf("overlay", s, Hybrid, Geneve, VXLAN, None)
}

// Underlay is the address family the tunnel's packets travel in (the
// agent's -underlay): that of the node's InternalIP the tunnel goes from
// and of each peer's it goes to. One family per cluster: a node takes a
// tunnel's packets only at its own tunnel address.
type Underlay string

const (
	// Auto: IPv4 where the node has an IPv4 InternalIP on a link, IPv6
	// where it has only that.
	Auto Underlay = "auto"
	IPv4 Underlay = "ipv4"
	IPv6 Underlay = "ipv6"
)

// ParseUnderlay reads an underlay ("": Auto).
func ParseUnderlay(s string) (Underlay, error) {
	return parseOneOf("underlay", s, Auto, IPv4, IPv6)
}

// parseOneOf reads s as one of values ("": the first), the flag's name
// what in its error.
func parseOneOf[T ~string](what, s string, values ...T) (T, error) {
	if s == "" {
		return values[0], nil
	}
	if i := slices.Index(values, T(s)); i >= 0 {
		return values[i], nil
	}
	want := make([]string, len(values))
	for i, v := range values {
		want[i] = string(v)
	}
	return "", fmt.Errorf("%s %q: want one of %s", what, s, strings.Join(want, ", "))
}

// families are the families of InternalIP the tunnel may go from, in the
// order tried (true: IPv4).
func (u Underlay) families() []bool {
	switch u {
	case IPv4:
		return []bool{true}
	case IPv6:
		return []bool{false}
	}
	return []bool{true, false}
}

// Config is how a node tunnels: the agent's -overlay and -underlay.
type Config struct {
	Mode     Mode
	Underlay Underlay
}

// TunnelType is the Interface type of the mode's tunnel port.
func (m Mode) TunnelType() string {
	if m == VXLAN {
		return "vxlan"
	}
	return "geneve"
}

// The next hops of the routes to tunnelled ranges: link-local addresses
// that no host has, resolved by a static neighbour to flows.OverlayMAC on
// the bridge interface.
var (
	NextHop4 = netip.MustParseAddr("169.254.253.1")
	NextHop6 = netip.MustParseAddr("fe80::fc5:1")
)

// NextHop is the next hop of the routes of a's family.
func NextHop(a netip.Addr) netip.Addr {
	if a.Is4() {
		return NextHop4
	}
	return NextHop6
}

// PortName is the name of the tunnel port (and interface) on the bridge.
const PortName = "ovsflow-tun"

// Overhead is what a tunnel adds to a packet: the inner Ethernet header,
// the Geneve (without options) or VXLAN header, UDP and the outer IP
// header of outer's family.
func Overhead(outer netip.Addr) int {
	if outer.Is4() {
		return 14 + 8 + 8 + 20
	}
	return 14 + 8 + 8 + 40
}

// Facts are what the node knows of itself for the overlay.
type Facts struct {
	Mode Mode
	// Local is this node's InternalIP that the tunnel's packets come from
	// (options:local_ip; of the Underlay's family) with the prefix
	// length of its subnet, as an address of the link that holds it; not
	// valid: the node cannot tell (no such address, or no subnet).
	Local netip.Prefix
	// Bridge is the Open vSwitch bridge whose interface holds Local (the
	// tunnel goes on it; "": that link is not a bridge's, and the node
	// cannot tell), BridgeLink that interface's index and MTU the MTU
	// the tunnel's packets leave with: the bridge's uplinks' (its own
	// where it has none).
	Bridge     string
	BridgeLink int
	MTU        int
	// Datapath is the bridge's datapath_type ("netdev": the userspace
	// datapath, whose tunnels resolve their next hops themselves).
	Datapath string
	// PodCIDRs are this node's pod ranges: what the tunnel delivers.
	PodCIDRs []netip.Prefix
}

// CanTell reports whether the node can tell which peers are on its
// subnet, and tunnel the others: it knows the subnet of its InternalIP
// (an address of one of its links, with a prefix shorter than a host's),
// and that link is an Open vSwitch bridge's interface, where the tunnel
// port goes (the userspace datapath's tunnels leave through the bridge
// that holds their local address).
func (f Facts) CanTell() bool {
	return f.Local.IsValid() && !f.Local.IsSingleIP() && f.Bridge != "" && f.BridgeLink > 0
}

// Plan is what Split decides.
type Plan struct {
	HostGW []podroutes.Route // stay as podroutes.Plan made them
	// Tunnel are the routes to tunnelled ranges: via NextHop on the
	// bridge interface, with the bridge's MTU less the Overhead.
	Tunnel []podroutes.Route
	Peers  []flows.OverlayPeer // the flows' peers
}

// Split sorts podroutes.Plan's routes (of the peers peers) into those that
// stay host-gw and those that go through the tunnel, by f: with None all
// stay; with Geneve or VXLAN every peer with an InternalIP of Local's
// family is tunnelled; with Hybrid, where the node CanTell, the peers
// whose InternalIP of that family is outside Local's subnet are, and with
// none at all where it cannot. A tunnelled peer's ranges of both families
// go to its InternalIP of Local's family (one tunnel family per node); a
// peer without one stays host-gw.
func Split(f Facts, routes []podroutes.Route, peers []podroutes.Peer) Plan {
	var p Plan
	if f.Mode == None || !f.Local.IsValid() || f.BridgeLink == 0 || f.Mode == Hybrid && !f.CanTell() {
		p.HostGW = routes
		return p
	}
	outer := map[string]netip.Addr{}
	for _, peer := range peers {
		for _, a := range peer.Addrs {
			if a.Is4() == f.Local.Addr().Is4() && !a.Is4In6() {
				outer[peer.Name] = a
				break
			}
		}
	}
	mtu := 0
	if f.MTU > 0 {
		mtu = f.MTU - Overhead(f.Local.Addr())
	}
	for _, r := range routes {
		remote, ok := outer[r.Node]
		if !ok || f.Mode == Hybrid && f.Local.Masked().Contains(remote) {
			p.HostGW = append(p.HostGW, r)
			continue
		}
		p.Tunnel = append(p.Tunnel, podroutes.Route{Dst: r.Dst, Via: NextHop(r.Dst.Addr()), Node: r.Node, Link: f.BridgeLink, MTU: mtu})
		p.Peers = append(p.Peers, flows.OverlayPeer{Dst: r.Dst, Remote: remote})
	}
	return p
}

// Active reports whether the node needs its tunnel: with Geneve or VXLAN
// always (where it can have one), with Hybrid while a peer is tunnelled.
func (f Facts) Active(p Plan) bool {
	switch f.Mode {
	case Geneve, VXLAN:
		return f.Local.IsValid() && f.BridgeLink > 0 && f.Bridge != ""
	case Hybrid:
		return len(p.Tunnel) > 0
	}
	return false
}

// ConflistMTU is the MTU the conflist gives the pods: the bridge's less
// the overhead while the node tunnels (Active), else 0 (the template's).
func ConflistMTU(f Facts, p Plan) int {
	if !f.Active(p) || f.MTU <= 0 {
		return 0
	}
	return f.MTU - Overhead(f.Local.Addr())
}

// KeyRecord is the tunnel port's external_ids key of the overlay's
// record (Record, as JSON).
const KeyRecord = "ovsflow.io/overlay"

// Record is what the tunnel's flows are built from, less what the node
// says now (the tunnel's ofport, the bridge's MAC): this node's pod ranges
// and the tunnelled peers' ranges and InternalIPs.
type Record struct {
	Local []netip.Prefix `json:"local"`
	Peers []RecordPeer   `json:"peers"`
}

// RecordPeer is one tunnelled range.
type RecordPeer struct {
	Dst    netip.Prefix `json:"dst"`
	Remote netip.Addr   `json:"remote"`
}

// RecordOf is the record of plan p for this node's pod ranges local,
// sorted, so that the same facts give the same text.
func RecordOf(local []netip.Prefix, p Plan) Record {
	r := Record{Local: slices.Clone(local), Peers: []RecordPeer{}}
	slices.SortFunc(r.Local, comparePrefix)
	for _, peer := range p.Peers {
		r.Peers = append(r.Peers, RecordPeer{peer.Dst, peer.Remote})
	}
	slices.SortFunc(r.Peers, func(a, b RecordPeer) int {
		return cmp.Or(comparePrefix(a.Dst, b.Dst), a.Remote.Compare(b.Remote))
	})
	return r
}

// Encode renders the record for the port's external_ids.
func (r Record) Encode() string {
	b, _ := json.Marshal(r) // prefixes and addresses marshal as text
	return string(b)
}

// ParseRecord reads what Encode rendered.
func ParseRecord(s string) (Record, error) {
	var r Record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, fmt.Errorf("overlay record %q: %w", s, err)
	}
	return r, nil
}

// Overlay is the record as the flows' facts, with the tunnel's ofport and
// the bridge interface's MAC.
func (r Record) Overlay(ofport uint32, mac [6]byte) flows.Overlay {
	o := flows.Overlay{TunnelPort: ofport, BridgeMAC: mac, Local: r.Local}
	for _, p := range r.Peers {
		o.Peers = append(o.Peers, flows.OverlayPeer{Dst: p.Dst, Remote: p.Remote})
	}
	return o
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(cmp.Compare(a.Addr().BitLen(), b.Addr().BitLen()), a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}
