package flows

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Flow is one OpenFlow flow in ovs-ofctl syntax.
type Flow struct {
	Cookie   Cookie
	Table    uint8
	Priority uint16
	// Match is the comma-separated match without priority and cookie; empty
	// matches everything.
	Match   string
	Actions string
}

// String renders the flow as one line of an ovs-ofctl add-flows file:
// "cookie=0x...,table=N,priority=P,MATCH,actions=ACTIONS".
func (f Flow) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cookie=%s,table=%d,priority=%d,", f.Cookie, f.Table, f.Priority)
	if f.Match != "" {
		b.WriteString(f.Match)
		b.WriteByte(',')
	}
	b.WriteString("actions=")
	b.WriteString(f.Actions)
	return b.String()
}

// Attachment is everything the flows of one container interface depend on.
type Attachment struct {
	Cookie Cookie
	// OFPort is the OpenFlow port of the container's host-side interface.
	OFPort uint32
	// MAC is the container interface's MAC address.
	MAC net.HardwareAddr
	// IPv4 and IPv6 are the container's addresses; either may be zero.
	IPv4, IPv6 netip.Addr
	// HairpinV4 and HairpinV6 are node addresses used as the source of
	// hairpin (SNAT) and masqueraded (MasqAll) requests.
	HairpinV4, HairpinV6 netip.Addr
	// Rules are the resolved translations to this container (see Resolve).
	Rules []Rule
	// SNAT makes hairpin work: container → its own host port.
	SNAT bool
	// MasqAll SNATs every request to the container to the hairpin address,
	// hiding the client's address.
	MasqAll bool
}

// Validate reports facts AttachmentFlows cannot render correctly.
func (a Attachment) Validate() error {
	var errs []error
	if !a.Cookie.IsOurs() || a.Cookie.Kind() != CookieKindAttachment {
		errs = append(errs, fmt.Errorf("cookie %s is not an attachment cookie", a.Cookie))
	}
	// 16 bits because the ingress port is kept in LabelOrigInPort; 0xff00 and
	// above are reserved ports.
	if a.OFPort == 0 || a.OFPort >= 0xff00 {
		errs = append(errs, fmt.Errorf("ofport %d out of range", a.OFPort))
	}
	if len(a.MAC) != 6 {
		errs = append(errs, fmt.Errorf("mac %q is not a 48-bit MAC", a.MAC))
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
	return errors.Join(errs...)
}

func (a Attachment) containerIP(family netip.Addr) netip.Addr {
	if family.Is4() {
		return a.IPv4
	}
	return a.IPv6
}

func (a Attachment) hairpinIP(family netip.Addr) netip.Addr {
	if family.Is4() {
		if a.HairpinV4.Is4() {
			return a.HairpinV4
		}
	} else if a.HairpinV6.Is6() {
		return a.HairpinV6
	}
	return netip.Addr{}
}

// ipMatch renders the ethertype keyword and the field name prefix of a's family.
func ipMatch(a netip.Addr) (ethertype, field string) {
	if a.Is4() {
		return "ip", "nw"
	}
	return "ipv6", "ipv6"
}

// natAddr renders an address for nat(): IPv6 in brackets.
func natAddr(a netip.Addr) string {
	if a.Is6() {
		return "[" + a.String() + "]"
	}
	return a.String()
}

// BaseFlows returns table 0's NORMAL flow, which the suite owns (with the
// shared cookie) on a bridge with fail_mode=secure only; on any other bridge
// ovs-vswitchd keeps its own.
func BaseFlows() []Flow {
	return []Flow{{SharedCookie(), TableClassifier, PriorityBase, "", "NORMAL"}}
}

// SharedFlows returns the reply flows shared by all attachments (tables 42 and
// 43). Installing them again is harmless.
func (p Pipeline) SharedFlows() []Flow {
	c := SharedCookie()
	unDNAT := fmt.Sprintf("ct(zone=%d,nat,table=%d)", p.DNATZone, TablePortmapReplyRestore)
	restore := "move:" + LabelOrigEthSrc + "->NXM_OF_ETH_DST[]," +
		"move:" + LabelOrigEthDst + "->NXM_OF_ETH_SRC[]," +
		"move:" + LabelOrigInPort + "->" + RegOutPort + "," +
		"load:0->NXM_OF_IN_PORT[]," +
		"output:" + RegOutPort
	out := []Flow{
		{c, TablePortmapReplySNAT, PriorityReplyNAT, "ip", unDNAT},
		{c, TablePortmapReplySNAT, PriorityReplyNAT, "ipv6", unDNAT},
		{c, TablePortmapReplySNAT, PriorityMiss, "", "NORMAL"},
		{c, TablePortmapReplyRestore, PriorityReplyNAT, "ct_state=+trk+rpl", restore},
		{c, TablePortmapReplyRestore, PriorityMiss, "", "NORMAL"},
	}
	if p.ContainerZone != 0 {
		unDNAT := fmt.Sprintf("ct(zone=%d,nat,table=%d)", p.ContainerZone, TablePortmapReplyRestore)
		zone := fmt.Sprintf("ct_zone=%d", p.DNATZone)
		out = append(out,
			Flow{c, TablePortmapReplyRestore, PriorityReplyContainer, "ip," + zone, unDNAT},
			Flow{c, TablePortmapReplyRestore, PriorityReplyContainer, "ipv6," + zone, unDNAT})
	}
	return out
}

// AttachmentFlows returns the flows of one attachment, all with a.Cookie, in
// a deterministic order: request classifiers in rule order, reply
// classifiers, then tables 40 and 41 per family (IPv4 first). Families
// without rules get no flows. When two rules share a protocol, node IP and
// host port, the first wins; callers reject such conflicts beforehand.
func (p Pipeline) AttachmentFlows(a Attachment) []Flow {
	type replyKey struct {
		ip    netip.Addr
		proto Protocol
		port  uint16
	}
	var (
		flows    = make([]Flow, 0, len(a.Rules)+8)
		requests = make(map[string]bool, len(a.Rules))
		replies  []Flow
		seen     = make(map[replyKey]bool)
		has4     bool
		has6     bool
	)
	label := "exec(move:NXM_OF_ETH_SRC[]->" + LabelOrigEthSrc +
		",move:NXM_OF_ETH_DST[]->" + LabelOrigEthDst +
		",move:NXM_OF_IN_PORT[]->" + LabelOrigInPort + ")"
	for _, r := range a.Rules {
		_, field := ipMatch(r.NodeIP)
		// Untagged only: a tagged frame has no path to the node's addresses.
		match := fmt.Sprintf("%s,vlan_tci=0x0000/0x1000,%s_dst=%s,tp_dst=%d", r.Protocol.match(r.NodeIP), field, r.NodeIP, r.HostPort)
		if requests[match] {
			continue
		}
		requests[match] = true
		has4 = has4 || r.ContainerIP.Is4()
		has6 = has6 || r.ContainerIP.Is6()
		dnat := func(zone uint16) string {
			return fmt.Sprintf("ct(commit,zone=%d,nat(dst=%s:%d),%s,table=%d)",
				zone, natAddr(r.ContainerIP), r.ContainerPort, label, TablePortmapDNAT)
		}
		flows = append(flows, Flow{a.Cookie, TableClassifier, PriorityRequest, match, dnat(p.DNATZone)})
		if p.ContainerZone != 0 {
			flows = append(flows, Flow{a.Cookie, TableClassifier, PriorityRequestContainer,
				strings.Replace(match, ",", ",reg1=0x1/0x1,", 1), dnat(p.ContainerZone)})
		}

		k := replyKey{r.ContainerIP, r.Protocol, r.ContainerPort}
		if seen[k] {
			continue
		}
		seen[k] = true
		_, field = ipMatch(r.ContainerIP)
		replies = append(replies, Flow{a.Cookie, TableClassifier, PriorityReply,
			fmt.Sprintf("%s,in_port=%d,%s_src=%s,tp_src=%d", r.Protocol.match(r.ContainerIP), a.OFPort, field, r.ContainerIP, r.ContainerPort),
			fmt.Sprintf("ct(zone=%d,nat,table=%d)", p.SNATZone, TablePortmapReplySNAT)})
	}
	flows = append(flows, replies...)

	var families []netip.Addr
	if has4 && a.IPv4.Is4() {
		families = append(families, a.IPv4)
	}
	if has6 && a.IPv6.Is6() {
		families = append(families, a.IPv6)
	}
	for _, cip := range families {
		eth, field := ipMatch(cip)
		toContainer := fmt.Sprintf("%s,%s_dst=%s", eth, field, cip)
		snat := func(src netip.Addr) string {
			return fmt.Sprintf("ct(commit,zone=%d,nat(src=%s),table=%d)", p.SNATZone, natAddr(src), TablePortmapOutput)
		}
		if h := a.hairpinIP(cip); h.IsValid() {
			if a.SNAT {
				flows = append(flows, Flow{a.Cookie, TablePortmapDNAT, PriorityHairpin,
					fmt.Sprintf("%s,%s_src=%s,%s_dst=%s", eth, field, cip, field, cip), snat(h)})
			}
			if a.MasqAll {
				flows = append(flows, Flow{a.Cookie, TablePortmapDNAT, PriorityMasquerade, toContainer, snat(h)})
			}
		}
		flows = append(flows, Flow{a.Cookie, TablePortmapDNAT, PriorityPass, toContainer,
			fmt.Sprintf("goto_table:%d", TablePortmapOutput)})
	}
	for _, cip := range families {
		eth, field := ipMatch(cip)
		flows = append(flows, Flow{a.Cookie, TablePortmapOutput, PriorityOutput,
			fmt.Sprintf("%s,%s_dst=%s", eth, field, cip),
			fmt.Sprintf("move:NXM_OF_ETH_DST[]->NXM_OF_ETH_SRC[],set_field:%s->eth_dst,load:0->NXM_OF_IN_PORT[],output:%d", a.MAC, a.OFPort)})
	}
	return flows
}

// Bundle renders the input of `ovs-ofctl --bundle add-flows BRIDGE -`: a
// "delete" of every flow with a.Cookie in every table, then "add" lines for
// the shared flows and the attachment's flows. OVS 3.1 applies such a
// mixed-verb bundle as one transaction (all or nothing), so a retried ADD
// replaces the attachment's flows atomically and a bad line changes nothing.
// Bundles need OpenFlow 1.4 or later on the bridge.
func (p Pipeline) Bundle(a Attachment) string {
	var b strings.Builder
	b.WriteString("delete " + a.Cookie.Match() + "\n")
	for _, flows := range [][]Flow{p.SharedFlows(), p.AttachmentFlows(a)} {
		for _, f := range flows {
			b.WriteString("add ")
			b.WriteString(f.String())
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// ConntrackFlushTuples returns, for the UDP and SCTP rules, the original
// tuple of their connections in the DNAT zone (node IP, protocol, host port),
// each to be flushed with
//
//	ovs-ofctl ct-flush BRIDGE zone=<p.DNATZone> TUPLE
//
// e.g. TUPLE "ct_nw_dst=198.51.100.1,ct_nw_proto=17,ct_tp_dst=5353" or
// "ct_ipv6_dst=2001:db8:100::1,ct_nw_proto=17,ct_tp_dst=5353". The zone must
// be its own argument: "zone=N,TUPLE" flushes the whole zone. The userspace
// conntrack matches partial tuples but only on the original (pre-NAT)
// direction, and needs ct_nw_proto whenever a port is given.
//
// Flushing them on ADD stops stale entries (of an earlier container, or an
// earlier ADD) from steering datagrams of a still-active flow to the old
// destination: ct(nat) keeps the binding of an existing connection. TCP is
// left alone, as its connections end. Duplicates are dropped; the order is
// that of rules.
func ConntrackFlushTuples(p Pipeline, rules []Rule) []string {
	var tuples []string
	seen := make(map[string]bool)
	for _, r := range rules {
		if r.Protocol != UDP && r.Protocol != SCTP {
			continue
		}
		dst := "ct_nw_dst"
		if r.NodeIP.Is6() {
			dst = "ct_ipv6_dst"
		}
		t := fmt.Sprintf("%s=%s,ct_nw_proto=%d,ct_tp_dst=%d", dst, r.NodeIP, uint8(r.Protocol), r.HostPort)
		if !seen[t] {
			seen[t] = true
			tuples = append(tuples, t)
		}
	}
	return tuples
}
