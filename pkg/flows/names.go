package flows

import "github.com/ovsflow/ovs-cni/pkg/openflow"

// Group is the part of the pipeline a flow belongs to, by its cookie's kind.
type Group uint8

const (
	GroupOther        Group = iota // not a flow of this pipeline
	GroupShared                    // CookieKindShared: tables 40, 42, 43, the node IPs' and the base flow
	GroupHostPorts                 // CookieKindAttachment: one attachment's host ports
	GroupPortSecurity              // CookieKindPortSecurity: one port's table-0 flows
	GroupTombstone                 // CookieKindTombstone: ports being deleted
	GroupBandwidth                 // CookieKindBandwidth: one port's egress limit (ovs-bandwidth)
	GroupGateway                   // CookieKindGateway: one gateway of a bridge (isGateway)
	GroupOverlay                   // CookieKindOverlay: the overlay's flows of a bridge (pkg/overlay)
)

func (g Group) String() string {
	switch g {
	case GroupShared:
		return "shared pipeline"
	case GroupHostPorts:
		return "host ports"
	case GroupPortSecurity:
		return "port security"
	case GroupTombstone:
		return "tombstone"
	case GroupBandwidth:
		return "bandwidth"
	case GroupGateway:
		return "gateway"
	case GroupOverlay:
		return "overlay"
	}
	return "other"
}

// GroupOf returns the group of a flow with cookie c.
func GroupOf(c Cookie) Group {
	if !c.IsOurs() {
		return GroupOther
	}
	switch c.Kind() {
	case CookieKindShared:
		return GroupShared
	case CookieKindAttachment:
		return GroupHostPorts
	case CookieKindPortSecurity:
		return GroupPortSecurity
	case CookieKindTombstone:
		return GroupTombstone
	case CookieKindBandwidth:
		return GroupBandwidth
	case CookieKindGateway:
		return GroupGateway
	case CookieKindOverlay:
		return GroupOverlay
	}
	return GroupOther
}

// Drop reasons: why a drop flow drops, as tables declares them. They name
// the flows in traces and label the drop counters (pkg/metrics), so they
// are short and stable.
const (
	ReasonRouterAdvertisement = "router-advertisement"
	ReasonRedirect            = "redirect"
	ReasonDHCPServer          = "dhcp-server"
	ReasonDoubleTag           = "double-tag"
	ReasonVRRP                = "vrrp"
	ReasonFragment            = "invalid-fragment"
	ReasonNeighbourDiscovery  = "neighbour-discovery"
	ReasonSpoofed             = "spoofed-source"
	ReasonTombstone           = "port-deleted"
	// Not port security: a host port's new datagram whose first fragment
	// the DNAT of its fragments could not take (PriorityFragmentHeld).
	ReasonHostPortFragment = "host-port-fragment"
	// Nor this: an ICMPv6 redirect the node sent into the bridge
	// (PriorityNodeRedirect).
	ReasonNodeRedirect = "node-redirect"
	// The overlay's (PriorityOverlayDrop): a frame the node routed to
	// OverlayMAC that no tunnelled peer's range holds, and a packet from
	// the tunnel port from a node that is not a known peer's, or not for a
	// pod range of this node.
	ReasonOverlayNoPeer  = "overlay-no-peer"
	ReasonOverlayRefused = "overlay-refused"
)

// DropReason returns the reason of a flow of the pipeline that drops what
// it matches (no actions), as declared in tables; "" for any other flow.
func DropReason(f Flow) string {
	if len(f.Actions) != 0 {
		return ""
	}
	g := GroupOf(Cookie(f.Cookie))
	if g == GroupTombstone {
		// Any flow of its kind: a trace may know a tombstone by its cookie
		// alone.
		return ReasonTombstone
	}
	switch p := declared[flowKey{g, f.Table, f.Priority}]; {
	case p == nil || len(p.Drops) == 0:
		return ""
	case len(p.Drops) == 1:
		return p.Drops[0].Reason
	default:
		return p.Which(f.Match)
	}
}

// guardReason tells the flows of PriorityPortSecGuard apart by their
// match; "" for a match that is none of them.
func guardReason(m openflow.Match) string {
	eth, _ := m.EthTypeOf()
	if t, ok := m.ICMPTypeOf(); ok {
		if eth == openflow.EthIPv6 && t == 134 {
			return ReasonRouterAdvertisement
		}
		return ReasonRedirect
	}
	if v, _, ok := m.CTStateOf(); ok && v&openflow.CTInv != 0 {
		return ReasonFragment
	}
	if p, ok := m.IPProtoOf(); ok && p == openflow.ProtoVRRP {
		return ReasonVRRP
	}
	_, src := m.TPSrcOf()
	_, dst := m.TPDstOf()
	_, ctSrc := m.CTTPSrcOf()
	_, ctDst := m.CTTPDstOf()
	if src || dst || ctSrc || ctDst {
		return ReasonDHCPServer
	}
	if _, _, ok := m.VLANTCIOf(); ok {
		return ReasonDoubleTag
	}
	return ""
}

// flowKey finds the declaration of a flow: its cookie kind, table and
// priority.
type flowKey struct {
	group Group
	table uint8
	prio  uint16
}

// declared indexes tables by flowKey.
var declared = func() map[flowKey]*prioDecl {
	m := make(map[flowKey]*prioDecl)
	for i := range tables {
		t := &tables[i]
		for j := range t.Prios {
			p := &t.Prios[j]
			m[flowKey{p.Group, t.ID, p.Value}] = p
		}
	}
	return m
}()

// reasonText says what each drop reason's flow is for, in a verdict: the
// names of the drops declared in tables.
var reasonText = func() map[string]string {
	m := make(map[string]string)
	for _, t := range tables {
		for _, p := range t.Prios {
			for _, d := range p.Drops {
				m[d.Reason] = d.Name
			}
		}
	}
	return m
}()

// Name says what a flow of the pipeline is for, as tables declares it:
// "the port-security guard for router advertisements", "the host-port
// request classifier (DNAT zone)". A flow that is not of this pipeline is
// "a flow of someone else"; one of the pipeline that tables does not
// declare is "a flow of the" and its group.
func Name(f Flow) string {
	if r := DropReason(f); r != "" {
		return reasonText[r]
	}
	g := GroupOf(Cookie(f.Cookie))
	switch g {
	case GroupOther:
		return "a flow of someone else"
	case GroupTombstone:
		return reasonText[ReasonTombstone]
	}
	if p := declared[flowKey{g, f.Table, f.Priority}]; p != nil && p.Name != "" {
		return p.Name
	}
	return "a flow of the " + g.String()
}
