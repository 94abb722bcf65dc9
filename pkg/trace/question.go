package trace

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

// Question is what to ask of the pipeline about one attachment.
type Question string

// Host-port questions: a request to one of the attachment's host ports.
const (
	Outside Question = "outside" // from a client beyond the uplink
	Pod     Question = "pod"     // from a client in another container behind port security
	Hairpin Question = "hairpin" // from the container itself
	Node    Question = "node"    // from a process on the node (the nft DNAT, then OVS)
	HostIP  Question = "hostip"  // from outside to the node address given by Ask.HostIP
	UDP     Question = "udp"     // from outside, to a UDP host port
)

// Frames from the attachment's own port, which port security judges.
const (
	RA     Question = "ra"     // a router advertisement
	DHCP4  Question = "dhcp4"  // a DHCPv4 OFFER (from port 67 to 68)
	DHCP6  Question = "dhcp6"  // a DHCPv6 ADVERTISE (from port 547 to 546)
	ARP    Question = "arp"    // an ARP request claiming another address
	ND     Question = "nd"     // a neighbour advertisement for another address
	Spoof4 Question = "spoof4" // IPv4 from another source address
	Spoof6 Question = "spoof6" // IPv6 from another source address
	VLAN   Question = "vlan"   // a frame tagged with VID 10
	Frag   Question = "frag"   // a fragment that does not reassemble
	Own4   Question = "own4"   // IPv4 from its own address (the control)
	Own6   Question = "own6"   // IPv6 from its own address (the control)
)

// The overlay's tunnel (pkg/overlay), as the node carries a pod's packets
// through it: the node routes them, so each goes through OVS twice on the
// sending node (the pod to LOCAL, then LOCAL to the tunnel).
const (
	Tunnel     Question = "tunnel"     // from the pod to Ask.Dst in a tunnelled peer's pod range
	FromTunnel Question = "fromtunnel" // from a peer's node (Ask.TunSrc) through the tunnel to the pod
)

// Questions lists every question, host ports first.
var Questions = []Question{Outside, Pod, Hairpin, Node, HostIP, UDP, RA, DHCP4, DHCP6, ARP, ND, Spoof4, Spoof6, VLAN, Frag, Own4, Own6, Tunnel, FromTunnel}

// ParseQuestion parses a question's name.
func ParseQuestion(s string) (Question, error) {
	q := Question(strings.ToLower(s))
	if !slices.Contains(Questions, q) {
		return "", fmt.Errorf("unknown question %q (one of %s)", s, strings.Trim(fmt.Sprint(Questions), "[]"))
	}
	return q, nil
}

// HostPort reports whether q is about a host port.
func (q Question) HostPort() bool {
	switch q {
	case Outside, Pod, Hairpin, Node, HostIP, UDP:
		return true
	}
	return false
}

// Facts are what the attachment's record (OVSDB) says of it.
type Facts struct {
	ContainerID, IfName string
	Pod                 string // NAMESPACE/NAME, "" when not recorded
	Bridge              string
	OFPort              uint32
	MAC                 net.HardwareAddr
	IPv4, IPv6          netip.Addr
	LinkLocal           netip.Addr
	// NodeMAC is the bridge interface's MAC (the host port record's).
	NodeMAC   net.HardwareAddr
	Pipeline  flows.Pipeline
	Rules     []flows.Rule
	HairpinV4 netip.Addr
	HairpinV6 netip.Addr
	SNAT      bool
	PortSec   bool // port security is on (a record, not disabled)
	HostPorts bool // a host port record
	// Overlay is the overlay's record of the bridge's tunnel port
	// (pkg/overlay) with the port's ofport and the bridge interface's
	// MAC, TunnelName the port's name; TunnelPort 0: the bridge has no
	// tunnel.
	Overlay    flows.Overlay
	TunnelName string
}

// Peer is a client of the Pod question: another attachment's port, MAC and
// address, so that its frame passes that port's security as a real one
// would. The zero Peer stands for a frame already checked (reg1) entering
// at Ask.InPort.
type Peer struct {
	OFPort uint32
	MAC    net.HardwareAddr
	IP     netip.Addr
}

// Ask is a question with its options.
type Ask struct {
	Question Question
	// InPort is where a packet from outside enters (the uplink); "" is
	// LOCAL.
	InPort string
	// HostIP, HostPort and Protocol choose the rule (any when zero); IPv6
	// prefers an IPv6 rule and IPv6 frames.
	HostIP   netip.Addr
	HostPort uint16
	Protocol flows.Protocol
	IPv6     bool
	Peer     Peer
	// NodeLocal is what the node's nft map translates the host port of
	// the Node question to, when NodeLocalRead (the zero AddrPort: no
	// element). Unread, the translation is taken to be the rule's.
	NodeLocal     netip.AddrPort
	NodeLocalRead bool
	// Dst is the destination of the Tunnel question (zero: the first
	// address of the first tunnelled peer's range of the family), TunSrc
	// the outer source of the FromTunnel question (zero: the node of that
	// range).
	Dst, TunSrc netip.Addr
	// Learned is the port the bridge learned the first packet's
	// destination MAC on (fdb/show), which NORMAL sends it to; "": not
	// read.
	Learned string
}

// Probe is one question made concrete: the packet, the conntrack state of
// each recirculation, and what a verdict needs to know of it.
type Probe struct {
	Ask    Ask
	Packet Packet
	CTNext []string
	// Rule is the host port asked about (host-port questions).
	Rule flows.Rule
	// Prefix goes before the verdict: what happens before OVS sees the
	// packet (the nft DNAT of the Node question).
	Prefix string
	// Decided is the verdict when there is nothing to trace: the packet
	// never reaches OVS as the question wants.
	Decided string
	// Then is what the node sends into the bridge in turn, once OVS has
	// delivered Packet to it (LOCAL): the pod's packet it routed to the
	// overlay's next hop (the Tunnel question).
	Then *Probe
	// TunnelName and TunnelPort are the tunnel port, which the verdict
	// names with the packet's tun_dst and tun_id.
	TunnelName string
	TunnelPort uint32
}

// Addresses of the clients the probes stand for: documentation ranges
// (RFC 5737, RFC 3849) and the documentation MAC block (RFC 7042).
var (
	clientV4  = netip.MustParseAddr("203.0.113.10")
	clientV6  = netip.MustParseAddr("2001:db8:ffff::10")
	clientMAC = net.HardwareAddr{0x00, 0x00, 0x5e, 0x00, 0x53, 0x01}
	otherV4   = netip.MustParseAddr("203.0.113.99")
	otherV6   = netip.MustParseAddr("2001:db8:ffff::99")
	broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

var (
	// ErrNoRule says that the attachment has no host port the question
	// fits.
	ErrNoRule = errors.New("no host port of the attachment fits the question")
	// ErrNoAddress says that the attachment has no address of the
	// family the question needs.
	ErrNoAddress = errors.New("the attachment has no address for the question")
)

// rule chooses the host port a question is about.
func rule(a Facts, k Ask) (flows.Rule, error) {
	proto := k.Protocol
	if k.Question == UDP {
		proto = flows.UDP
	}
	var fit []flows.Rule
	for _, r := range a.Rules {
		if proto != 0 && r.Protocol != proto || k.HostPort != 0 && r.HostPort != k.HostPort ||
			k.HostIP.IsValid() && r.NodeIP != k.HostIP {
			continue
		}
		fit = append(fit, r)
	}
	for _, r := range fit {
		if r.NodeIP.Is6() == k.IPv6 && (proto != 0 || r.Protocol == flows.TCP) {
			return r, nil
		}
	}
	if len(fit) > 0 {
		return fit[0], nil
	}
	if k.Question == HostIP && k.HostIP.IsValid() {
		// Not published there: ask anyway, with a host port of the others
		// that fits, to show what happens instead.
		for _, r := range a.Rules {
			if r.NodeIP.Is4() == k.HostIP.Is4() && (proto == 0 || r.Protocol == proto) && (k.HostPort == 0 || r.HostPort == k.HostPort) {
				r.NodeIP = k.HostIP
				return r, nil
			}
		}
	}
	return flows.Rule{}, fmt.Errorf("%w (%s; the attachment has %d)", ErrNoRule, asked(proto, k), len(a.Rules))
}

// asked is what a question asks about a host port, for people: "any" for
// what it leaves open.
func asked(proto flows.Protocol, k Ask) string {
	p, ip, port := "any", "any", "any"
	if proto != 0 {
		p = proto.String()
	}
	if k.HostIP.IsValid() {
		ip = k.HostIP.String()
	}
	if k.HostPort != 0 {
		port = fmt.Sprint(k.HostPort)
	}
	return fmt.Sprintf("protocol %s, host IP %s, host port %s", p, ip, port)
}

// Build makes the probe of a question about attachment a.
func Build(a Facts, k Ask) (Probe, error) {
	if k.Question == Tunnel || k.Question == FromTunnel {
		return overlayProbe(a, k)
	}
	p := Probe{Ask: k}
	in := k.InPort
	if in == "" {
		in = "LOCAL"
	}
	own := fmt.Sprint(a.OFPort)
	if k.Question.HostPort() {
		r, err := rule(a, k)
		if err != nil {
			return p, err
		}
		p.Rule = r
		client := clientV4
		if r.NodeIP.Is6() {
			client = clientV6
		}
		pk := Packet{InPort: in, EthSrc: clientMAC, EthDst: a.NodeMAC, Proto: r.Protocol.String(),
			Src: client, Dst: r.NodeIP, SrcPort: 40000, DstPort: r.HostPort, ICMPType: -1}
		switch k.Question {
		case Pod:
			if k.Peer.OFPort != 0 && k.Peer.IP.IsValid() && k.Peer.IP.Is4() == r.NodeIP.Is4() {
				pk.InPort, pk.EthSrc, pk.Src = fmt.Sprint(k.Peer.OFPort), k.Peer.MAC, k.Peer.IP
			} else {
				pk.Reg1 = 1 // as if it passed the port security of its port
			}
		case Hairpin:
			pk.InPort, pk.EthSrc, pk.Src = own, a.MAC, containerIP(a, r.NodeIP)
		case Node:
			// Never through OVS: the node's nat/output hook translates it,
			// and the kernel sends it out of the bridge interface.
			node := a.HairpinV4
			if r.NodeIP.Is6() {
				node = a.HairpinV6
			}
			if !node.IsValid() {
				node = r.NodeIP
			}
			from, to := netip.AddrPortFrom(r.NodeIP, r.HostPort), netip.AddrPortFrom(r.ContainerIP, r.ContainerPort)
			if k.NodeLocalRead {
				if !k.NodeLocal.IsValid() {
					p.Decided = fmt.Sprintf("from the node: no node-local DNAT of %s %s (nft map hostports of table ovsflow_hostport): run reconcile", r.Protocol, from)
				}
				to = k.NodeLocal
			}
			p.Prefix = fmt.Sprintf("from the node: nft DNAT %s -> %s in the node's nat/output hook (table ovsflow_hostport, not OVS); then ", from, to)
			pk = Packet{InPort: "LOCAL", EthSrc: a.NodeMAC, EthDst: a.MAC, Proto: r.Protocol.String(),
				Src: node, Dst: to.Addr(), SrcPort: 40000, DstPort: to.Port(), ICMPType: -1}
		}
		p.Packet = pk
		// A new connection at each ct: the DNAT commit, and the hairpin
		// SNAT after it.
		switch k.Question {
		case Node:
		case Hairpin:
			p.CTNext = []string{"trk,new", "trk,new"}
		default:
			p.CTNext = []string{"trk,new"}
		}
		return p, nil
	}
	v4, v6 := a.IPv4, a.IPv6
	ll := a.LinkLocal
	if !ll.IsValid() {
		ll = flows.LinkLocalOf(a.MAC)
	}
	if !v6.IsValid() {
		v6 = ll
	}
	pk := Packet{InPort: own, EthSrc: a.MAC, EthDst: clientMAC, ICMPType: -1}
	need4 := func() error {
		if !v4.IsValid() {
			return fmt.Errorf("question %s: %w (no IPv4 address)", k.Question, ErrNoAddress)
		}
		return nil
	}
	switch k.Question {
	case RA:
		pk.Proto, pk.EthDst, pk.Src, pk.Dst, pk.ICMPType = "icmp6", net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, ll, netip.MustParseAddr("ff02::1"), 134
	case DHCP4:
		if err := need4(); err != nil {
			return p, err
		}
		pk.Proto, pk.EthDst, pk.Src, pk.Dst, pk.SrcPort, pk.DstPort = "udp", broadcast, v4, netip.MustParseAddr("255.255.255.255"), 67, 68
	case DHCP6:
		pk.Proto, pk.Src, pk.Dst, pk.SrcPort, pk.DstPort = "udp", ll, flows.LinkLocalOf(clientMAC), 547, 546
	case ARP:
		if err := need4(); err != nil {
			return p, err
		}
		pk.Proto, pk.EthDst, pk.ARPOp, pk.Src, pk.Dst = "arp", broadcast, 1, otherV4, clientV4
	case ND:
		pk.Proto, pk.Src, pk.Dst, pk.ICMPType, pk.NDTarget = "icmp6", ll, flows.LinkLocalOf(clientMAC), 136, otherV6
	case Spoof4:
		pk.Proto, pk.Src, pk.Dst, pk.SrcPort, pk.DstPort = "udp", otherV4, clientV4, 40000, 53
	case Spoof6:
		pk.Proto, pk.Src, pk.Dst, pk.SrcPort, pk.DstPort = "udp", otherV6, clientV6, 40000, 53
	case Own4:
		if err := need4(); err != nil {
			return p, err
		}
		pk.Proto, pk.Src, pk.Dst, pk.SrcPort, pk.DstPort = "udp", v4, clientV4, 40000, 53
	case Own6:
		pk.Proto, pk.Src, pk.Dst, pk.SrcPort, pk.DstPort = "udp", v6, clientV6, 40000, 53
	case VLAN:
		src, dst := v4, clientV4
		if !src.IsValid() {
			src, dst = v6, clientV6
		}
		pk.Proto, pk.VLAN, pk.Src, pk.Dst, pk.SrcPort, pk.DstPort = "udp", 10, src, dst, 40000, 53
	case Frag:
		src, dst, proto := v4, clientV4, "ip"
		if !src.IsValid() {
			src, dst, proto = v6, clientV6, "ipv6"
		}
		// The first fragment of a datagram that conntrack cannot
		// reassemble (too small for it, overlapping): +trk+inv after the
		// reassembly zone.
		pk.Proto, pk.Src, pk.Dst, pk.Frag = proto, src, dst, "first"
		p.CTNext = []string{"trk,inv"}
	}
	p.Packet = pk
	return p, nil
}

// containerIP is the attachment's address of the family of a.
func containerIP(at Facts, a netip.Addr) netip.Addr {
	if a.Is4() {
		return at.IPv4
	}
	return at.IPv6
}

// overlayProbe makes the probe of a question about the overlay's tunnel.
// A bridge without a tunnel, or a tunnel without a peer to ask about, is
// a verdict (Decided), not an error: it is what the node does.
func overlayProbe(a Facts, k Ask) (Probe, error) {
	o := a.Overlay
	p := Probe{Ask: k, TunnelName: a.TunnelName, TunnelPort: o.TunnelPort}
	if o.TunnelPort == 0 {
		p.Decided = fmt.Sprintf("no tunnel: bridge %s has no overlay tunnel port, the node tunnels to no peer", a.Bridge)
		return p, nil
	}
	v6 := k.IPv6
	if k.Question == Tunnel && k.Dst.IsValid() {
		v6 = k.Dst.Is6()
	}
	fam, own := "IPv4", a.IPv4
	if v6 {
		fam, own = "IPv6", a.IPv6
	}
	if !own.IsValid() {
		return p, fmt.Errorf("question %s: %w (no %s address)", k.Question, ErrNoAddress, fam)
	}
	tunnel := fmt.Sprintf("tunnel %s (port %d)", a.TunnelName, o.TunnelPort)
	bridgeMAC := o.BridgeMAC.HardwareAddr()
	switch k.Question {
	case Tunnel:
		dst := k.Dst
		if !dst.IsValid() {
			i := slices.IndexFunc(o.Peers, func(pr flows.OverlayPeer) bool { return pr.Dst.Addr().Is6() == v6 })
			if i < 0 {
				p.Decided = fmt.Sprintf("no peer: the record of %s holds no tunnelled %s pod range", tunnel, fam)
				return p, nil
			}
			dst = o.Peers[i].Dst.Masked().Addr().Next()
		}
		// The pod's gateway is the bridge interface (isGateway): the pod
		// sends to its MAC, and the node routes the packet back into the
		// bridge to the overlay's next hop.
		pk := Packet{InPort: fmt.Sprint(a.OFPort), EthSrc: a.MAC, EthDst: bridgeMAC, Proto: "udp",
			Src: own, Dst: dst, SrcPort: 40000, DstPort: 53, ICMPType: -1}
		p.Prefix, p.Packet = "from the pod to the node: ", pk
		routed := p
		routed.Prefix = fmt.Sprintf("then the node routes it to %s via the overlay's next hop: ", dst)
		routed.Packet.InPort, routed.Packet.EthSrc, routed.Packet.EthDst = "LOCAL", bridgeMAC, flows.OverlayMAC.HardwareAddr()
		p.Then = &routed
	case FromTunnel:
		src := k.TunSrc
		if !src.IsValid() {
			if len(o.Peers) == 0 {
				p.Decided = fmt.Sprintf("no peer: the record of %s holds no tunnelled node (give the outer source)", tunnel)
				return p, nil
			}
			src = o.Peers[0].Remote
		}
		// The inner source: a pod of the sending node's range of the
		// family, as its node routed it to the overlay's MAC.
		inner := clientV4
		if v6 {
			inner = clientV6
		}
		if i := slices.IndexFunc(o.Peers, func(pr flows.OverlayPeer) bool { return pr.Remote == src && pr.Dst.Addr().Is6() == v6 }); i >= 0 {
			inner = o.Peers[i].Dst.Masked().Addr().Next()
		}
		p.Packet = Packet{InPort: fmt.Sprint(o.TunnelPort), TunSrc: src, TunID: flows.OverlayVNI,
			EthSrc: clientMAC, EthDst: flows.OverlayMAC.HardwareAddr(), Proto: "udp",
			Src: inner, Dst: own, SrcPort: 40000, DstPort: 53, ICMPType: -1}
		p.Prefix = fmt.Sprintf("from %s through %s: ", src, tunnel)
	}
	return p, nil
}
