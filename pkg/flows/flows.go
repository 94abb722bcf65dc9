package flows

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// Flow is one OpenFlow flow: a typed value that renders ovs-ofctl text
// (String) and encodes itself (pkg/openflow).
type Flow = openflow.Flow

// HostPorts is everything the host port flows of one container interface
// (its attachment's cookie, CookieKindAttachment) depend on; the facts of
// its port flows are PortSecurity. record.HostPorts stores it as JSON.
type HostPorts struct {
	Cookie Cookie `json:"cookie"`
	// OFPort is the OpenFlow port of the container's host-side interface.
	OFPort uint32 `json:"ofport"`
	// MAC is the container interface's MAC address.
	MAC openflow.MAC `json:"mac"`
	// NodeMAC is the MAC of the bridge's internal interface, which holds the
	// node addresses: requests are translated only when sent to it, since
	// their destination MAC becomes the reply's source (LabelOrigEthDst).
	// Zero (records from before it): any destination MAC.
	NodeMAC openflow.MAC `json:"nodeMAC,omitzero"`
	// IPv4 and IPv6 are the container's addresses; either may be zero.
	IPv4 netip.Addr `json:"ipv4,omitzero"`
	IPv6 netip.Addr `json:"ipv6,omitzero"`
	// HairpinV4 and HairpinV6 are node addresses used as the source of
	// hairpin (SNAT) and masqueraded (MasqAll) requests.
	HairpinV4 netip.Addr `json:"hairpinV4,omitzero"`
	HairpinV6 netip.Addr `json:"hairpinV6,omitzero"`
	// SNAT makes hairpin work: container → its own host port.
	SNAT bool `json:"snat"`
	// MasqAll SNATs every request to the container to the hairpin address,
	// hiding the client's address.
	MasqAll bool `json:"masqAll"`
	// Rules are the resolved translations to this container (see Resolve).
	Rules []Rule `json:"rules"`
	// Loopback are the translations of the node's IPv4 loopback addresses
	// (127.0.0.1 for a mapping without a host IP). They are served to the
	// node's own processes by the kernel's nat/output hook (pkg/hostport),
	// never by a flow: a frame to 127.0.0.0/8 on the bridge is nobody's.
	// None in records written before them.
	Loopback []Rule `json:"loopback,omitempty"`
	// ConnRate bounds the new connections (ct_state +new) per second of
	// each mapping, after a burst of ConnBurst (0: no bound); see
	// TablePortmapNew.
	ConnRate  uint32 `json:"newConnectionRate,omitempty"`
	ConnBurst uint32 `json:"newConnectionBurst,omitempty"`
}

// Validate reports facts AttachmentFlows cannot render correctly.
func (a HostPorts) Validate() error {
	var errs []error
	if !a.Cookie.IsOurs() || a.Cookie.Kind() != CookieKindAttachment {
		errs = append(errs, fmt.Errorf("cookie %s is not an attachment cookie", a.Cookie))
	}
	// 16 bits because the ingress port is kept in LabelOrigInPort; 0xff00 and
	// above are reserved ports.
	if a.OFPort == 0 || a.OFPort >= 0xff00 {
		errs = append(errs, fmt.Errorf("ofport %d out of range", a.OFPort))
	}
	if a.MAC.IsZero() {
		errs = append(errs, errors.New("no mac"))
	}
	if a.NodeMAC[0]&1 != 0 {
		errs = append(errs, fmt.Errorf("node mac %s is not a unicast MAC", a.NodeMAC))
	}
	if a.IPv4.IsValid() && !a.IPv4.Is4() || a.IPv6.IsValid() && !a.IPv6.Is6() {
		errs = append(errs, fmt.Errorf("container addresses %s, %s are of the wrong family", a.IPv4, a.IPv6))
	}
	for _, r := range a.Rules {
		if !r.Protocol.IsValid() {
			errs = append(errs, fmt.Errorf("rule %s: invalid protocol", r))
		}
		if c := a.containerIP(r.ContainerIP); !c.IsValid() || c != r.ContainerIP {
			errs = append(errs, fmt.Errorf("rule %s: container address is not the attachment's", r))
		}
		if r.NodeIP.Is4() != r.ContainerIP.Is4() {
			errs = append(errs, fmt.Errorf("rule %s: mixes address families", r))
		}
		if h := a.hairpinIP(r.ContainerIP); (a.SNAT || a.MasqAll) && !h.IsValid() {
			errs = append(errs, fmt.Errorf("rule %s: snat needs a hairpin address of its family", r))
		}
	}
	for _, r := range a.Loopback {
		if !r.Protocol.IsValid() || !r.NodeIP.Is4() || !r.NodeIP.IsLoopback() || r.ContainerIP != a.IPv4 || !r.ContainerIP.IsValid() {
			errs = append(errs, fmt.Errorf("loopback rule %s: want an IPv4 loopback address to the attachment's IPv4 address", r))
		}
	}
	if a.ConnRate > 0 && len(a.connMappings()) > MaxConnMeters {
		errs = append(errs, fmt.Errorf("%d mappings with a new-connection rate, at most %d", len(a.connMappings()), MaxConnMeters))
	}
	return errors.Join(errs...)
}

// connMapping is what a new-connection meter is per: a mapping's protocol
// and host port, on every node IP.
type connMapping struct {
	proto Protocol
	port  uint16
}

// connMappings numbers the distinct mappings of the rules, in rule order.
func (a HostPorts) connMappings() map[connMapping]int {
	m := map[connMapping]int{}
	for _, r := range a.Rules {
		k := connMapping{r.Protocol, r.HostPort}
		if _, ok := m[k]; !ok {
			m[k] = len(m)
		}
	}
	return m
}

// ConnMeters returns the new-connection meters of a (none without
// ConnRate), in packets per second.
func ConnMeters(a HostPorts) []openflow.MeterBand {
	if a.ConnRate == 0 {
		return nil
	}
	m := a.connMappings()
	out := make([]openflow.MeterBand, len(m))
	for _, i := range m {
		out[i] = openflow.MeterBand{ID: ConnMeterOf(a.OFPort, i), RateKbps: a.ConnRate, BurstKb: max(a.ConnBurst, 1), Pkts: true}
	}
	return out
}

func (a HostPorts) containerIP(family netip.Addr) netip.Addr {
	if family.Is4() {
		return a.IPv4
	}
	return a.IPv6
}

func (a HostPorts) hairpinIP(family netip.Addr) netip.Addr {
	if family.Is4() {
		if a.HairpinV4.Is4() {
			return a.HairpinV4
		}
	} else if a.HairpinV6.Is6() {
		return a.HairpinV6
	}
	return netip.Addr{}
}

// ethOf returns the ethertype of a's family.
func ethOf(a netip.Addr) uint16 {
	if a.Is4() {
		return openflow.EthIPv4
	}
	return openflow.EthIPv6
}

// flow builds a flow of the pipeline.
func flow(c Cookie, table uint8, prio uint16, m openflow.Match, as ...openflow.Action) Flow {
	return Flow{Cookie: uint64(c), Table: table, Priority: prio, Match: m, Actions: as}
}

// BaseFlows returns table 0's NORMAL flow, which the suite owns (with the
// shared cookie) on a bridge with fail_mode=secure only; on any other bridge
// ovs-vswitchd keeps its own. With it goes the flow that drops the node's
// own ICMPv6 redirects from LOCAL, which a prepared node never means to
// send (PriorityNodeRedirect).
func BaseFlows() []Flow {
	c := SharedCookie()
	return []Flow{
		flow(c, TableClassifier, PriorityBase, openflow.Match{}, openflow.Normal),
		flow(c, TableClassifier, PriorityNodeRedirect,
			openflow.Match{}.InPort(openflow.PortLocal).Proto(openflow.EthIPv6, openflow.ProtoICMPv6).ICMPType(137)),
	}
}

// SharedFlows returns the reply flows shared by all attachments (tables 42 and
// 43). Installing them again is harmless.
func (p Pipeline) SharedFlows() []Flow {
	c := SharedCookie()
	unDNAT := func(zone uint16) openflow.CT {
		return openflow.CT{Zone: zone, NAT: &openflow.NAT{}, Table: openflow.Table(TablePortmapReplyRestore)}
	}
	restore := []openflow.Action{
		openflow.Move{Src: LabelOrigEthSrc, Dst: openflow.FieldEthDst.All()},
		openflow.Move{Src: LabelOrigEthDst, Dst: openflow.FieldEthSrc.All()},
		openflow.Move{Src: LabelOrigInPort, Dst: RegOutPort},
		openflow.Load{Value: 0, Dst: openflow.FieldInPort.All()},
		openflow.OutputReg{Src: RegOutPort},
	}
	ip, ip6 := openflow.Match{}.EthType(openflow.EthIPv4), openflow.Match{}.EthType(openflow.EthIPv6)
	reply := openflow.CTTrk | openflow.CTRpl
	out := []Flow{
		flow(c, TablePortmapReplySNAT, PriorityReplyNAT, ip, unDNAT(p.DNATZone)),
		flow(c, TablePortmapReplySNAT, PriorityReplyNAT, ip6, unDNAT(p.DNATZone)),
		flow(c, TablePortmapReplySNAT, PriorityMiss, openflow.Match{}, openflow.Normal),
		flow(c, TablePortmapReplyRestore, PriorityReplyNAT, openflow.Match{}.CTState(reply, reply), restore...),
		flow(c, TablePortmapReplyRestore, PriorityMiss, openflow.Match{}, openflow.Normal),
		flow(c, TablePortmapDNAT, PriorityMiss, openflow.Match{}, openflow.Normal),
		flow(c, TablePortmapFragmentMiss, PriorityMiss, openflow.Match{}, openflow.Normal),
	}
	if p.ContainerZone != 0 {
		out = append(out,
			flow(c, TablePortmapReplyRestore, PriorityReplyContainer, ip.CTZone(p.DNATZone), unDNAT(p.ContainerZone)),
			flow(c, TablePortmapReplyRestore, PriorityReplyContainer, ip6.CTZone(p.DNATZone), unDNAT(p.ContainerZone)))
	}
	return out
}

// icmpErrors are the ICMP types that report on a packet of a connection
// (destination unreachable, fragmentation needed included; time exceeded;
// ICMPv6 packet too big, parameter problem): conntrack finds them related
// (+rel) to it and ct(nat) translates them, inner header included.
var icmpErrors = map[uint16][]uint8{openflow.EthIPv4: {3, 11}, openflow.EthIPv6: {1, 2, 3, 4}}

// icmpOf returns the ICMP protocol of a's family.
func icmpOf(a netip.Addr) uint8 {
	if a.Is4() {
		return openflow.ProtoICMP
	}
	return openflow.ProtoICMPv6
}

// NodeIPFlows returns the shared request flows of the node IPs of a's
// rules (table 0, shared cookie: node IPs are the bridge's, shared by every
// attachment that publishes on them): the ICMP errors sent to a node IP
// (PriorityRelated), which may be about a host-port connection (path MTU
// discovery: fragmentation needed, packet too big), and the fragments
// (PriorityFragment, PriorityFragmentContainer), of any protocol: a TCP
// segment carries DF, but one fragmented on the way must not reach the node
// untranslated either. Both go through ct(nat) without commit: what
// no connection translates goes to the node (table 40's PriorityMiss). The
// pipeline's comment says how a fragment goes through them.
func (p Pipeline) NodeIPFlows(a HostPorts) []Flow {
	var out []Flow
	seen, seenFrag := make(map[netip.Addr]bool), make(map[netip.Addr]bool)
	nodeMAC, hasMAC := a.NodeMAC, !a.NodeMAC.IsZero()
	lookup := func(zone uint16) openflow.CT {
		return openflow.CT{Zone: zone, NAT: &openflow.NAT{}, Table: openflow.Table(TablePortmapDNAT)}
	}
	for _, r := range a.Rules {
		base := openflow.Match{}.EthType(ethOf(r.NodeIP)).VLANTCI(0, 0x1000).IPDst(openflow.Host(r.NodeIP))
		if hasMAC {
			base = base.EthDst(nodeMAC)
		}
		if !seen[r.NodeIP] {
			seen[r.NodeIP] = true
			// With commit: the kernel datapath translates an error that
			// travels in the connection's original direction (client to
			// node, IP_CT_RELATED) only when the ct action commits
			// (net/openvswitch's ovs_ct_nat); committing an error creates
			// no connection, and the userspace datapath does the same.
			related := lookup(p.DNATZone)
			related.Commit = true
			for _, typ := range icmpErrors[ethOf(r.NodeIP)] {
				m := base.IPProto(icmpOf(r.NodeIP)).ICMPType(typ)
				out = append(out, flow(SharedCookie(), TableClassifier, PriorityRelated, m, related))
			}
		}
		if seenFrag[r.NodeIP] {
			continue
		}
		seenFrag[r.NodeIP] = true
		// No protocol: a later IPv6 fragment shows the fragment header's
		// (44), not the datagram's.
		m := base.IPFrag(openflow.FragAny, openflow.FragAny)
		out = append(out, flow(SharedCookie(), TableClassifier, PriorityFragment, m, lookup(p.DNATZone)))
		if p.ContainerZone != 0 {
			out = append(out, flow(SharedCookie(), TableClassifier, PriorityFragmentContainer,
				m.RegBits(RegPortSecurityChecked, 1), lookup(p.ContainerZone)))
		}
		// The fragments of a new datagram that no PriorityFragmentCommit
		// took, in the zone of their fragment flow.
		miss := openflow.Match{}.EthType(ethOf(r.NodeIP)).
			CTState(openflow.CTTrk|openflow.CTNew, openflow.CTTrk|openflow.CTNew|openflow.CTDNAT).
			IPDst(openflow.Host(r.NodeIP)).IPFrag(openflow.FragAny, openflow.FragAny)
		for _, z := range []uint16{p.DNATZone, p.ContainerZone} {
			if z != 0 {
				out = append(out, flow(SharedCookie(), TablePortmapDNAT, PriorityFragmentMiss, miss.CTZone(z),
					openflow.CT{Zone: z, Table: openflow.Table(TablePortmapFragmentMiss)}))
			}
		}
	}
	return out
}

// AttachmentFlows returns the flows of one attachment, all with a.Cookie, in
// a deterministic order: request classifiers in rule order, reply
// classifiers, then tables 40 and 41 per family (IPv4 first). Families
// without rules get no flows. When two rules share a protocol, node IP and
// host port, the first wins; callers reject such conflicts beforehand.
func (p Pipeline) AttachmentFlows(a HostPorts) []Flow {
	type replyKey struct {
		ip    netip.Addr
		proto Protocol
		port  uint16
	}
	var (
		flows    = make([]Flow, 0, len(a.Rules)+8)
		requests = make(map[openflow.Match]bool, len(a.Rules))
		replies  []Flow
		seen     = make(map[replyKey]bool)
		has4     bool
		has6     bool
	)
	label := openflow.Actions{
		openflow.Move{Src: openflow.FieldEthSrc.All(), Dst: LabelOrigEthSrc},
		openflow.Move{Src: openflow.FieldEthDst.All(), Dst: LabelOrigEthDst},
		openflow.Move{Src: openflow.FieldInPort.All(), Dst: LabelOrigInPort},
	}
	mac := a.MAC
	conns := a.connMappings()
	for _, r := range a.Rules {
		// Untagged only: a tagged frame has no path to the node's addresses.
		match := openflow.Match{}.Proto(ethOf(r.NodeIP), uint8(r.Protocol)).VLANTCI(0, 0x1000).
			IPDst(openflow.Host(r.NodeIP)).TPDst(r.HostPort)
		if nodeMAC := a.NodeMAC; !nodeMAC.IsZero() {
			// The reply's source MAC is this one (LabelOrigEthDst): a
			// request sent to any other is not ours to answer.
			match = match.EthDst(nodeMAC)
		}
		if requests[match] {
			continue
		}
		requests[match] = true
		has4 = has4 || r.ContainerIP.Is4()
		has6 = has6 || r.ContainerIP.Is6()
		dnat := func(zone uint16) openflow.CT {
			return openflow.CT{Commit: true, Zone: zone,
				NAT:  &openflow.NAT{Dst: true, Addr: r.ContainerIP, Port: r.ContainerPort},
				Exec: label, Table: openflow.Table(TablePortmapDNAT)}
		}
		if a.ConnRate == 0 {
			flows = append(flows, flow(a.Cookie, TableClassifier, PriorityRequest, match, dnat(p.DNATZone)))
			if p.ContainerZone != 0 {
				flows = append(flows, flow(a.Cookie, TableClassifier, PriorityRequestContainer,
					match.RegBits(RegPortSecurityChecked, 1), dnat(p.ContainerZone)))
			}
		} else {
			// A lookup first; table 39 meters what is new.
			lookup := func(zone uint16) openflow.CT {
				return openflow.CT{Zone: zone, NAT: &openflow.NAT{}, Table: openflow.Table(TablePortmapNew)}
			}
			meter := openflow.Meter{ID: ConnMeterOf(a.OFPort, conns[connMapping{r.Protocol, r.HostPort}])}
			isNew := match.CTState(openflow.CTNew|openflow.CTTrk, openflow.CTNew|openflow.CTTrk)
			flows = append(flows, flow(a.Cookie, TableClassifier, PriorityRequest, match, lookup(p.DNATZone)))
			if p.ContainerZone != 0 {
				flows = append(flows,
					flow(a.Cookie, TableClassifier, PriorityRequestContainer, match.RegBits(RegPortSecurityChecked, 1), lookup(p.ContainerZone)),
					flow(a.Cookie, TablePortmapNew, PriorityNewConnection, isNew.RegBits(RegPortSecurityChecked, 0), meter, dnat(p.DNATZone)),
					flow(a.Cookie, TablePortmapNew, PriorityNewConnection, isNew.RegBits(RegPortSecurityChecked, 1), meter, dnat(p.ContainerZone)))
			} else {
				flows = append(flows, flow(a.Cookie, TablePortmapNew, PriorityNewConnection, isNew, meter, dnat(p.DNATZone)))
			}
		}
		// The fragments of a connection's first datagram, untranslated
		// after the ct of PriorityFragment (or of PriorityFragmentContainer)
		// in its zone: the same commit as the request's.
		first := openflow.Match{}.EthType(ethOf(r.NodeIP)).
			CTState(openflow.CTTrk|openflow.CTNew, openflow.CTTrk|openflow.CTNew|openflow.CTDNAT).
			IPDst(openflow.Host(r.NodeIP)).CTNWProto(uint8(r.Protocol)).CTTPDst(r.HostPort)
		flows = append(flows, flow(a.Cookie, TablePortmapDNAT, PriorityFragmentCommit, first.CTZone(p.DNATZone), dnat(p.DNATZone)))
		if p.ContainerZone != 0 {
			flows = append(flows, flow(a.Cookie, TablePortmapDNAT, PriorityFragmentCommit,
				first.CTZone(p.ContainerZone), dnat(p.ContainerZone)))
		}
		// Its first fragment, when PriorityFragmentCommit did not take
		// the datagram whole (PriorityFragmentHeld): any zone.
		flows = append(flows, flow(a.Cookie, TablePortmapFragmentMiss, PriorityFragmentHeld,
			openflow.Match{}.EthType(ethOf(r.NodeIP)).CTState(openflow.CTTrk|openflow.CTNew, openflow.CTTrk|openflow.CTNew).
				IPDst(openflow.Host(r.NodeIP)).CTNWProto(uint8(r.Protocol)).CTTPDst(r.HostPort)))

		k := replyKey{r.ContainerIP, r.Protocol, r.ContainerPort}
		if seen[k] {
			continue
		}
		seen[k] = true
		replies = append(replies, flow(a.Cookie, TableClassifier, PriorityReply,
			openflow.Match{}.Proto(ethOf(r.ContainerIP), uint8(r.Protocol)).InPort(a.OFPort).
				IPSrc(openflow.Host(r.ContainerIP)).TPSrc(r.ContainerPort),
			openflow.CT{Zone: p.SNATZone, NAT: &openflow.NAT{}, Table: openflow.Table(TablePortmapReplySNAT)}))
	}
	flows = append(flows, replies...)
	for _, cip := range []netip.Addr{a.IPv4, a.IPv6} {
		if !cip.IsValid() || !slices.ContainsFunc(a.Rules, func(r Rule) bool { return r.ContainerIP == cip }) {
			continue
		}
		// ICMP errors the container sends about a packet of a host-port
		// connection (port unreachable, ...) go down the reply path.
		for _, typ := range icmpErrors[ethOf(cip)] {
			flows = append(flows, flow(a.Cookie, TableClassifier, PriorityReplyRelated,
				openflow.Match{}.Proto(ethOf(cip), icmpOf(cip)).InPort(a.OFPort).IPSrc(openflow.Host(cip)).ICMPType(typ),
				openflow.CT{Zone: p.SNATZone, NAT: &openflow.NAT{}, Table: openflow.Table(TablePortmapReplySNAT)}))
		}
		flows = append(flows, flow(a.Cookie, TableClassifier, PriorityReplyFragment,
			openflow.Match{}.EthType(ethOf(cip)).InPort(a.OFPort).IPSrc(openflow.Host(cip)).IPFrag(openflow.FragAny, openflow.FragAny),
			openflow.CT{Zone: p.SNATZone, NAT: &openflow.NAT{}, Table: openflow.Table(TablePortmapReplySNAT)}))
	}

	var families []netip.Addr
	if has4 && a.IPv4.Is4() {
		families = append(families, a.IPv4)
	}
	if has6 && a.IPv6.Is6() {
		families = append(families, a.IPv6)
	}
	for _, cip := range families {
		toContainer := openflow.Match{}.EthType(ethOf(cip)).IPDst(openflow.Host(cip))
		snat := func(src netip.Addr) openflow.CT {
			return openflow.CT{Commit: true, Zone: p.SNATZone, NAT: &openflow.NAT{Src: true, Addr: src},
				Table: openflow.Table(TablePortmapOutput)}
		}
		if h := a.hairpinIP(cip); h.IsValid() {
			if a.SNAT {
				flows = append(flows, flow(a.Cookie, TablePortmapDNAT, PriorityHairpin,
					openflow.Match{}.EthType(ethOf(cip)).IPSrc(openflow.Host(cip)).IPDst(openflow.Host(cip)), snat(h)))
			}
			if a.MasqAll {
				flows = append(flows, flow(a.Cookie, TablePortmapDNAT, PriorityMasquerade, toContainer, snat(h)))
			}
		}
		flows = append(flows, flow(a.Cookie, TablePortmapDNAT, PriorityPass, toContainer,
			openflow.GotoTable{Table: TablePortmapOutput}))
	}
	if a.ConnRate > 0 {
		// +trk-new-inv: a packet of a connection the lookup knew, and
		// translated.
		tracked := openflow.CTTrk | openflow.CTNew | openflow.CTInv
		for _, cip := range families {
			flows = append(flows, flow(a.Cookie, TablePortmapNew, PriorityTracked,
				openflow.Match{}.EthType(ethOf(cip)).IPDst(openflow.Host(cip)).CTState(openflow.CTTrk, tracked),
				openflow.GotoTable{Table: TablePortmapDNAT}))
		}
	}
	for _, cip := range families {
		flows = append(flows, flow(a.Cookie, TablePortmapOutput, PriorityOutput,
			openflow.Match{}.EthType(ethOf(cip)).IPDst(openflow.Host(cip)),
			openflow.Move{Src: openflow.FieldEthDst.All(), Dst: openflow.FieldEthSrc.All()},
			openflow.SetField{Field: openflow.FieldEthDst, MAC: mac},
			openflow.Load{Value: 0, Dst: openflow.FieldInPort.All()},
			openflow.Output{Port: a.OFPort}))
	}
	return flows
}

// Bundle returns the bundle that replaces the attachment's flows: a delete
// of every flow with a.Cookie in every table, then the shared flows and the
// attachment's flows. OVS 3.1 applies such a mixed bundle as one
// transaction (all or nothing), so a retried ADD replaces the attachment's
// flows atomically and a bad entry changes nothing. Bundles need OpenFlow
// 1.4 or later on the bridge.
func (p Pipeline) Bundle(a HostPorts) openflow.Bundle {
	shared, own := append(p.SharedFlows(), p.NodeIPFlows(a)...), p.AttachmentFlows(a)
	b := make(openflow.Bundle, 0, 1+len(shared)+len(own))
	b = append(b, a.Cookie.Delete())
	for _, f := range shared {
		b = append(b, f)
	}
	for _, f := range own {
		b = append(b, f)
	}
	return b
}

// ConntrackFlushes returns, for the UDP and SCTP rules, the original tuple
// of their connections (node IP, protocol, host port) in each of the
// pipeline's DNAT zones (Zones), for openflow.FlushConntrack. The
// userspace conntrack matches partial tuples but only on the original
// (pre-NAT) direction, and needs the protocol whenever a port is given.
//
// Flushing them on ADD stops stale entries (of an earlier container, or an
// earlier ADD) from steering datagrams of a still-active flow to the old
// destination: ct(nat) keeps the binding of an existing connection. TCP is
// left alone, as its connections end. Duplicates are dropped; the order is
// that of rules, then of zones.
func ConntrackFlushes(p Pipeline, rules []Rule) []openflow.CTFlush {
	var out []openflow.CTFlush
	seen := make(map[openflow.CTFlush]bool)
	for _, r := range rules {
		if r.Protocol != UDP && r.Protocol != SCTP {
			continue
		}
		for _, z := range p.Zones() {
			f := openflow.CTFlush{Zone: z, Proto: uint8(r.Protocol), Dst: r.NodeIP, DstPort: r.HostPort}
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// WithdrawFlushes returns what a DEL flushes: for every rule, whatever its
// protocol, the original tuple of its connections in each DNAT zone (as
// ConntrackFlushes), and in the SNAT zone the tuple they have there, after
// DNAT (container IP, protocol, container port). Entries of a deleted
// attachment would otherwise stay until they expire (a TCP one for days)
// and count against the zones' limits. Duplicates are dropped; the order is
// that of rules, then of zones.
func WithdrawFlushes(p Pipeline, rules []Rule) []openflow.CTFlush {
	var out []openflow.CTFlush
	seen := make(map[openflow.CTFlush]bool)
	add := func(f openflow.CTFlush) {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for _, r := range rules {
		for _, z := range p.Zones() {
			add(openflow.CTFlush{Zone: z, Proto: uint8(r.Protocol), Dst: r.NodeIP, DstPort: r.HostPort})
		}
		add(openflow.CTFlush{Zone: p.SNATZone, Proto: uint8(r.Protocol), Dst: r.ContainerIP, DstPort: r.ContainerPort})
	}
	return out
}
