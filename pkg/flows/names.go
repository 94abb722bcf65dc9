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
	}
	return GroupOther
}

// Drop reasons: what each port-security drop flow is for. They name the
// flows in traces and label the drop counters (pkg/metrics), so they are
// short and stable.
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
)

// DropReason returns the reason of a flow of the pipeline that drops what
// it matches (no actions), "" for any other flow.
func DropReason(f Flow) string {
	if len(f.Actions) != 0 {
		return ""
	}
	switch GroupOf(Cookie(f.Cookie)) {
	case GroupTombstone:
		return ReasonTombstone
	case GroupHostPorts:
		if f.Table == TablePortmapFragmentMiss && f.Priority == PriorityFragmentHeld {
			return ReasonHostPortFragment
		}
		return ""
	case GroupShared:
		if f.Priority == PriorityNodeRedirect {
			return ReasonNodeRedirect
		}
		return ""
	case GroupPortSecurity:
	default:
		return ""
	}
	m := f.Match
	switch f.Priority {
	case PriorityPortSecGuard:
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
	case PriorityPortSecNDDrop:
		return ReasonNeighbourDiscovery
	case PriorityPortSecDrop:
		return ReasonSpoofed
	}
	return ""
}

// reasonText says what each drop reason's flow is for, in a verdict.
var reasonText = map[string]string{
	ReasonRouterAdvertisement: "the port-security guard for router advertisements",
	ReasonRedirect:            "the port-security guard for ICMP redirects",
	ReasonDHCPServer:          "the port-security guard for DHCP server frames",
	ReasonDoubleTag:           "the port-security guard for double-tagged frames",
	ReasonVRRP:                "the port-security guard for VRRP adverts (without allowVRRP, or not to their group from the container's addresses)",
	ReasonFragment:            "the port-security guard for fragments that do not reassemble",
	ReasonNeighbourDiscovery:  "the port-security drop of neighbour discovery for other addresses",
	ReasonSpoofed:             "the port-security drop of any other frame (another source MAC or address, a VLAN tag)",
	ReasonTombstone:           "the tombstone of a port being deleted",
	ReasonNodeRedirect:        "the drop of the node's own ICMPv6 redirects into the bridge (a secure bridge's, with its base flow)",
	ReasonHostPortFragment:    "the drop of a host port's new fragmented datagram that its fragments' DNAT did not take (userspace datapath before OVS 3.1.7)",
}

// Name says what a flow of the pipeline is for, as its declarations in
// pipeline.go do: "the port-security guard for router advertisements",
// "the host-port request classifier". A flow that is not of this pipeline
// is "a flow of someone else".
func Name(f Flow) string {
	if r := DropReason(f); r != "" {
		return reasonText[r]
	}
	g := GroupOf(Cookie(f.Cookie))
	type key struct {
		table uint8
		prio  uint16
	}
	var names map[key]string
	switch g {
	case GroupPortSecurity:
		names = map[key]string{
			{TableClassifier, PriorityPortSecFrag}:   "the port-security reassembly of fragments (zone 64003)",
			{TableClassifier, PriorityPortSecND}:     "the port-security allow of neighbour discovery for its own addresses",
			{TableClassifier, PriorityPortSecVRRP}:   "the port-security allow of VRRP adverts from its own and allowed addresses",
			{TableClassifier, PriorityPortSecAllow}:  "the port-security allow of its own MAC and addresses",
			{TableClassifier, PriorityVLANIsolation}: "the VLAN isolation of a port off VLAN 0",
			{TableClassifier, PriorityGatewayReply}:  "the Service reply to the gateway (zone 64004)",
			{TableClassifier, PriorityGatewaySkip}:   "the pass of what needs no Service reply lookup",
			{TableClassifier, PriorityGatewayTrack}:  "the Service reply lookup (zone 64004)",
		}
	case GroupHostPorts:
		names = map[key]string{
			{TableClassifier, PriorityRequest}:          "the host-port request classifier (DNAT zone)",
			{TableClassifier, PriorityRequestContainer}: "the host-port request classifier for clients in containers (container zone)",
			{TableClassifier, PriorityReply}:            "the host-port reply classifier",
			{TableClassifier, PriorityReplyFragment}:    "the host-port reply classifier for fragments",
			{TableClassifier, PriorityReplyRelated}:     "the host-port reply classifier for ICMP errors",
			{TablePortmapDNAT, PriorityHairpin}:         "the hairpin SNAT",
			{TablePortmapDNAT, PriorityMasquerade}:      "the masquerade SNAT (masqAll)",
			{TablePortmapDNAT, PriorityPass}:            "the host-port request without SNAT",
			{TablePortmapOutput, PriorityOutput}:        "the host-port output to the container",
			{TablePortmapDNAT, PriorityFragmentCommit}:  "the host-port DNAT of a new datagram's fragments",
			{TablePortmapNew, PriorityNewConnection}:    "the host-port new-connection meter and DNAT (newConnectionRate)",
			{TablePortmapNew, PriorityTracked}:          "the host-port pass of a known connection (newConnectionRate)",
		}
	case GroupBandwidth:
		names = map[key]string{
			{TableClassifier, PriorityBandwidth}: "the egress limit's meter (ovs-bandwidth)",
		}
	case GroupShared:
		names = map[key]string{
			{TableClassifier, PriorityBase}:                    "the base NORMAL flow of a secure bridge",
			{TableClassifier, PriorityFragment}:                "the fragment classifier of a node IP",
			{TableClassifier, PriorityFragmentContainer}:       "the fragment classifier of a node IP for clients in containers",
			{TableClassifier, PriorityRelated}:                 "the ICMP error classifier of a node IP",
			{TablePortmapDNAT, PriorityMiss}:                   "the untranslated-request fallback (NORMAL)",
			{TablePortmapReplySNAT, PriorityReplyNAT}:          "the host-port reply un-DNAT",
			{TablePortmapReplySNAT, PriorityMiss}:              "the reply fallback (NORMAL)",
			{TablePortmapReplyRestore, PriorityReplyNAT}:       "the host-port reply restore (back where the request came from)",
			{TablePortmapReplyRestore, PriorityReplyContainer}: "the host-port reply lookup in the container zone",
			{TablePortmapReplyRestore, PriorityMiss}:           "the reply fallback (NORMAL)",
			{TablePortmapDNAT, PriorityFragmentMiss}:           "the reassembly of a new datagram's other fragments (to table 44)",
			{TablePortmapFragmentMiss, PriorityMiss}:           "the fragment fallback to the node (NORMAL)",
		}
	case GroupGateway:
		names = map[key]string{
			{TableClassifier, PriorityGatewaySkip}:  "the pass of the node's own connections from the gateway",
			{TableClassifier, PriorityGatewayTrack}: "the commit of a connection the gateway forwards to a pod (zone 64004)",
		}
	case GroupTombstone:
		return reasonText[ReasonTombstone]
	default:
		return "a flow of someone else"
	}
	if n, ok := names[key{f.Table, f.Priority}]; ok {
		return n
	}
	return "a flow of the " + g.String()
}
