// Package flows turns the facts of one container attachment (ofport, MAC,
// addresses, resolved port mappings, cookie) into the OpenFlow flows that
// publish its host ports with conntrack NAT on an Open vSwitch bridge. It is
// pure: no I/O, no logging, deterministic output rendered as ovs-ofctl text.
//
// Pipeline (every table, priority, zone, register and cookie field is declared
// in this file):
//
//	                 table 0 (Classifier, shared with NORMAL at priority 0)
//	                   |                                  |
//	 request to node IP:hostPort (200)     reply from container IP:containerPort (210)
//	 ct(commit, zone=DNAT, nat(dst=C:P),   ct(zone=SNAT, nat)  un-SNAT hairpin/masq
//	    label := eth_src|eth_dst|in_port)          |
//	                   |                           v
//	                   v                 table 42 (PortmapReplySNAT)
//	        table 40 (PortmapDNAT)         ct(zone=DNAT, nat)  un-DNAT
//	  300 hairpin: ct(commit, zone=SNAT,           |
//	      nat(src=hairpin IP))                     v
//	  200 masqAll: ct(commit, zone=SNAT,  table 43 (PortmapReplyRestore)
//	      nat(src=hairpin IP))              +trk+rpl: eth_dst, eth_src, out port
//	  100 otherwise: goto table 41              := ct_label; output
//	                   |                    otherwise: NORMAL
//	                   v
//	        table 41 (PortmapOutput)
//	  eth_src := eth_dst, eth_dst := container MAC, output container ofport
//
// The ct_label of the DNAT connection remembers where the request came from
// (source MAC, destination MAC, ingress port), so replies are sent straight
// back to the client without SNAT: the container sees the client's real
// address, whether the client is outside, another container or itself.
//
// What the real userspace datapath (OVS 3.1, netdev) required:
//   - Reply ct_state flags are inverted (un-DNAT of a reply sets +snat), so
//     table 43 matches +trk+rpl only, never +dnat/+snat.
//   - ct(...nat...) needs an ip or ipv6 match in the same flow, so table 42
//     has one flow per family; table 43 needs none and has one flow.
//   - The reply classifier (210) is above the request classifier (200): a
//     reply to a hairpin or masqAll request goes to hairpin IP:port where port
//     is the client's source port, kept by SNAT; when that port is also a
//     published host port both flows match and the packet must be a reply
//     (seen failing with a client source port 8080 to host port 8080 when
//     the reply flow was lower). The price: the container cannot reach its
//     own host port from its service port as client source port.
//   - Output to the ingress port (hairpin) needs in_port cleared first.
//   - Hairpin needs the second (SNAT) zone: without it the container answers
//     itself directly and the handshake never completes.
package flows

// Tables. Table 0 is shared with everything else on the bridge; the others
// belong to this pipeline.
const (
	// TableClassifier holds the exact-match request and reply classifiers
	// next to the bridge's own "priority=0 actions=NORMAL".
	TableClassifier uint8 = 0
	// TablePortmapDNAT receives requests after DNAT and decides on SNAT.
	TablePortmapDNAT uint8 = 40
	// TablePortmapOutput rewrites MACs and outputs to the container port.
	TablePortmapOutput uint8 = 41
	// TablePortmapReplySNAT receives replies after un-SNAT and un-DNATs them.
	TablePortmapReplySNAT uint8 = 42
	// TablePortmapReplyRestore sends un-DNATed replies back where the request
	// came from, using the ct_label of the DNAT connection.
	TablePortmapReplyRestore uint8 = 43
)

// Priorities.
const (
	// PriorityRequest classifies node IP:hostPort → DNAT, in table 0.
	PriorityRequest uint16 = 200
	// PriorityReply classifies container IP:containerPort from the
	// container's port → reply path, in table 0. Above PriorityRequest: the
	// reply to a SNATed request (hairpin, masqAll) is addressed to a node IP
	// and the SNATed source port, which may be a published host port.
	PriorityReply uint16 = 210
	// PriorityHairpin SNATs container → its own host port, in table 40.
	PriorityHairpin uint16 = 300
	// PriorityMasquerade SNATs every request to the container, in table 40.
	PriorityMasquerade uint16 = 200
	// PriorityPass forwards unSNATed requests, in table 40.
	PriorityPass uint16 = 100
	// PriorityOutput delivers to the container, in table 41.
	PriorityOutput uint16 = 100
	// PriorityReplyNAT un-DNATs replies (table 42) and restores them (table 43).
	PriorityReplyNAT uint16 = 100
	// PriorityMiss is the NORMAL fallback in tables 42 and 43.
	PriorityMiss uint16 = 0
)

// Conntrack zones. Zone 0 is the default zone of every other ct() user and is
// never used here.
const (
	// DefaultDNATZone tracks node IP:hostPort → container connections; its
	// ct_label holds the request's origin (see the Label fields).
	DefaultDNATZone uint16 = 64000
	// DefaultSNATZone tracks the hairpin/masquerade source translation.
	DefaultSNATZone uint16 = 64001
)

// Registers and ct_label fields, as NXM field references.
const (
	// LabelOrigEthSrc keeps the request's source MAC: the reply's eth_dst.
	LabelOrigEthSrc = "NXM_NX_CT_LABEL[0..47]"
	// LabelOrigEthDst keeps the request's destination MAC (the node's): the
	// reply's eth_src.
	LabelOrigEthDst = "NXM_NX_CT_LABEL[48..95]"
	// LabelOrigInPort keeps the request's ingress port: the reply's output.
	LabelOrigInPort = "NXM_NX_CT_LABEL[96..111]"
	// RegOutPort carries LabelOrigInPort to output:, which cannot read
	// ct_label directly. Only used within table 43.
	RegOutPort = "NXM_NX_REG0[0..15]"
)

// Cookie layout: suite tag | kind | attachment hash.
const (
	// CookieSuite tags every flow of this pipeline (bits 48-63).
	CookieSuite Cookie = 0x0FC5 << 48
	// SuiteMask selects the suite tag: cookie & SuiteMask == CookieSuite.
	SuiteMask Cookie = 0xFFFF << 48
	// CookieKindShift places the kind (bits 40-47).
	CookieKindShift = 40
	// CookieKindShared marks the shared flows of tables 42 and 43.
	CookieKindShared uint8 = 0
	// CookieKindAttachment marks the flows of one attachment.
	CookieKindAttachment uint8 = 1
	// CookieHashMask selects the low 40 bits of FNV-1a 64 of
	// containerID + "/" + ifname.
	CookieHashMask Cookie = 1<<CookieKindShift - 1
)

// Pipeline holds the deployment choices of the pipeline: its two conntrack
// zones. Tables and priorities are fixed.
type Pipeline struct {
	DNATZone, SNATZone uint16
}

// DefaultPipeline returns the pipeline with the default zones.
func DefaultPipeline() Pipeline {
	return Pipeline{DNATZone: DefaultDNATZone, SNATZone: DefaultSNATZone}
}
