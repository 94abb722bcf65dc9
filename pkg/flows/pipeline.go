// Package flows turns the facts of one container attachment (ofport, MAC,
// addresses, resolved port mappings, cookie) into the OpenFlow flows that
// publish its host ports with conntrack NAT on an Open vSwitch bridge. It is
// pure: no I/O, no logging, deterministic output (typed flows that render
// ovs-ofctl syntax).
//
// The whole pipeline is declared in this file:
//
//	request: client -> node IP:hostPort           reply: container IP:containerPort -> client
//	     |                                             |
//	table 0  prio 200 (per rule)                 table 0  prio 210 (per container port)
//	  ct(commit, DNAT zone, nat(dst=C:P),          ct(SNAT zone, nat)     undo hairpin/masq SNAT
//	     ct_label := eth_src,eth_dst,in_port)          |
//	     |                                        table 42
//	table 40                                       ct(DNAT zone, nat)     undo DNAT
//	  300 container -> itself: ct(commit,              |
//	      SNAT zone, nat(src=hairpin IP))         table 43
//	  200 masqAll: same for every client           +trk+rpl: eth_dst, eth_src, out port
//	  100 otherwise: goto table 41                 := ct_label; output
//	     |                                         otherwise: NORMAL
//	table 41
//	  eth_src := eth_dst, eth_dst := container MAC, output container port
//
//	fragments, any protocol (nw_frag=yes; later fragments carry no ports):
//	request: client -> node IP, any fragment      reply: container IP -> client, any fragment
//	table 0  prio 202 (shared, per node IP)       table 0  prio 211 (per attachment and family)
//	  ct(DNAT zone, nat): conntrack reassembles     ct(SNAT zone, nat), then tables 42, 43
//	  the datagram (userspace: ipf; kernel:         as any reply: each ct reassembles, and
//	  nf_defrag) and applies the binding of its     the fragments leave translated
//	  connection to every fragment
//	     |
//	table 40 prio 250 (per rule): a new datagram (+new-dnat), by its original
//	  tuple (ct_nw_proto, ct_tp_dst = hostPort): ct(commit, same zone, nat(dst=C:P)),
//	  then table 40 as above; otherwise (established) as above
//	table 40 prio 240 (shared, per node IP and zone): any other fragment of a new
//	  datagram: ct(same zone, table 44), which completes the reassembly
//	table 44 prio 100 (per rule): the first fragment of a host-port datagram that
//	  prio 250 could not take whole (see below): drop; prio 0: NORMAL, to the node
//
//	ICMP errors about a host-port connection (+rel; path MTU discovery: fragmentation
//	needed, packet too big) take the same two ways: to a node IP, table 0 prio 204
//	(shared, per node IP) ct(DNAT zone, nat) -> table 40; from a container, prio 212
//	(per attachment) ct(SNAT zone, nat) -> tables 42, 43.
//
//	overlay (pkg/overlay; tables 50, 51, CookieKindOverlay):
//	node -> a tunnelled peer's pod range: the node routes it via a next hop whose neighbour is OverlayMAC
//	table 0  prio 340  in_port=LOCAL, dl_dst=OverlayMAC: table 50
//	table 50 prio 100 (per peer range) tun_dst := peer's InternalIP, tun_id := OverlayVNI, output:tunnel; prio 0: drop
//	tunnel -> node:
//	table 0  prio 340  in_port=tunnel: table 51
//	table 51 prio 100 (per known node and local range) tun_src=node, tun_id=OverlayVNI, nw_dst=range: eth_dst := bridge MAC, output:LOCAL; prio 0: drop
//
// Tables and priorities are declared once, in the order packets meet them,
// in tables (below): each table with its priorities, highest first, each
// priority with what its flows are for under each cookie kind it is
// installed with. Name and DropReason read it. The rest of the layout
// (zones and their limits, ct_label, ct_mark and register bits, cookie
// fields, meter ids) is declared next to it, in layout. The design doc's
// Tables, Priorities, Zones and Cookies tables are rendered from both
// (TestDesignDoc).
//
// The ct_label of the DNAT connection remembers where the request came from,
// so replies go straight back to the client without SNAT: the container sees
// the client's real address, be it outside, another container or itself.
//
// Flows are pkg/openflow values: they render the ovs-ofctl text of the
// golden files and encode themselves for the wire; nothing here writes text
// for a machine to read back. docs/design.md ("The pipeline") explains the
// pipeline, what its flows rely on in the datapath (found against the
// userspace datapath: inverted reply ct_state flags, ct(nat) and its ip
// match, hairpin output, fragments through ct) and names the test that
// proves each behaviour; it follows the declarations here.
package flows

import "github.com/ovsflow/ovs-cni/pkg/openflow"

// Tables, in the order packets meet them. Table 0 is shared with everything
// else on the bridge; the others belong to this pipeline.
const (
	// TableClassifier holds the exact-match request and reply classifiers
	// next to the bridge's own "priority=0 actions=NORMAL".
	TableClassifier uint8 = 0
	// TablePortmapNew receives, after a ct lookup without commit, the
	// requests of an attachment with a new-connection rate: a new
	// connection goes through its mapping's meter before it is committed
	// with its DNAT, the packets of known connections (translated by the
	// lookup) go on to TablePortmapDNAT.
	TablePortmapNew uint8 = 39
	// TablePortmapDNAT receives requests after DNAT and decides on SNAT.
	TablePortmapDNAT uint8 = 40
	// TablePortmapOutput rewrites MACs and outputs to the container port.
	TablePortmapOutput uint8 = 41
	// TablePortmapReplySNAT receives replies after un-SNAT and un-DNATs them.
	TablePortmapReplySNAT uint8 = 42
	// TablePortmapReplyRestore sends un-DNATed replies back where the request
	// came from, using the ct_label of the DNAT connection.
	TablePortmapReplyRestore uint8 = 43
	// TablePortmapFragmentMiss receives the fragments of a new datagram to
	// a node IP that no rule's PriorityFragmentCommit took, reassembled
	// again by PriorityFragmentMiss's ct: to the node, a host port's never.
	TablePortmapFragmentMiss uint8 = 44
	// TableOverlaySend receives what the node routed to the overlay
	// (OverlayMAC, from LOCAL): to the node of the peer range its
	// destination is in, through the tunnel port (overlay.go).
	TableOverlaySend uint8 = 50
	// TableOverlayReceive receives what came in through the tunnel port:
	// to the node's own stack when it comes from a known node and is for
	// one of this node's pod ranges.
	TableOverlayReceive uint8 = 51
)

// Priorities of table 0 (TableClassifier), highest first: a container
// port's own flows (tombstone, egress meter, port security, its Service
// replies) above the host port classifiers, which see its frames once port
// security has passed them.
const (
	// PriorityTombstone drops every frame of a port that DEL is removing,
	// from before its flows go until ovs-vswitchd has removed the port, so
	// that DEL need not wait for that: TombstoneTimeout removes the flow,
	// and Open vSwitch does not give a freed ofport to a new port for an
	// hour (ofproto's alloc_ofp_port).
	PriorityTombstone uint16 = 65000
	TombstoneTimeout         = 10 // seconds
	// PriorityBandwidth sends every frame from a container port with an
	// egress limit (ovs-bandwidth) through the port's meter once
	// (RegBandwidthMetered), then back to table 0, where port security and
	// the rest of the pipeline see it as before: above every other flow of
	// a container port but the tombstone.
	PriorityBandwidth uint16 = 430

	// Port security (ovs-bridge's portSecurity): in table 0, a frame from a
	// container port that has not been checked yet (RegPortSecurityChecked = 0)
	// either matches one of the attachment's allow flows, which set the bit and
	// resubmit it to table 0 where the rest of the pipeline (and NORMAL) sees it
	// as before, or is dropped. So a container can send only from its own MAC and
	// IPs, ARP and neighbour discovery included.
	//
	// IP fragments. Open vSwitch's default fragment handling ("normal", see
	// ovs-ofctl set-frags) shows every fragment, the first included, with
	// tp_src, tp_dst, icmp_type and icmp_code 0: no guard, ND or DHCP flow could
	// tell a fragmented DHCP OFFER or router advertisement from any other
	// datagram. So the rule is: a fragment from a container port
	// (nw_frag=yes, RegPortSecurityDefragged 0) goes once through
	// ct(zone=PortSecDefragZone, table=0), without commit, and is classified
	// after that by what conntrack made of the whole datagram:
	//   - +trk+inv (a datagram that does not reassemble: fragments that are
	//     too small for the userspace reassembler, overlapping ones; or one
	//     conntrack does not track: ND, RA, redirects, which RFC 6980 forbids
	//     fragmenting anyway) is dropped;
	//   - the guards match ct_nw_proto/ct_tp_src/ct_tp_dst, the reassembled
	//     datagram's ports;
	//   - the rest passes the allow flows by address, as any frame.
	//
	// The userspace datapath (ipf) passes the original fragments on with the
	// reassembled datagram's ct_state, not its L4 fields, and (seen with OVS
	// 3.1) only the first fragment matches the original tuple (ct_nw_proto,
	// ct_tp_*): a forbidden datagram loses its first fragment, the one with the
	// headers, and its later ones, which pass, can never be reassembled without
	// it (TestAttackFragments counts the victim's reassemblies). The kernel
	// datapath (nf_defrag) passes the reassembled datagram, whose tp_* and
	// icmp_* the ordinary guard and ND flows see as well, and refragments it on
	// output. Flows after port security that classify a container's fragments by
	// port (host port replies and requests) must therefore not rely on tp_* nor
	// on zone PortSecDefragZone's tuple beyond the first fragment: they send the
	// packet through ct() of their own zone, which reassembles again. The packet
	// arrives there with RegPortSecurityDefragged and RegPortSecurityChecked set
	// and the ct_state of zone PortSecDefragZone. The userspace reassembler drops non-last
	// fragments under 1200 (IPv4) or 1280 (IPv6) bytes (dpctl/ipf-get-status):
	// fragmented traffic from a container needs an MTU above those.

	// PriorityPortSecVRRP passes a VRRP advert (IP protocol 112) to its
	// group (224.0.0.18, ff02::12) from the container's MAC and own or
	// allowed addresses, with allowVRRP; above the guard that drops every
	// other VRRP frame.
	PriorityPortSecVRRP   uint16 = 425
	PriorityPortSecGuard  uint16 = 420
	PriorityPortSecFrag   uint16 = 415
	PriorityPortSecND     uint16 = 410
	PriorityPortSecNDDrop uint16 = 405
	PriorityPortSecAllow  uint16 = 400
	PriorityPortSecDrop   uint16 = 390
	// PriorityOverlay sends the frames of the overlay to its tables: from
	// LOCAL to OverlayMAC (the node routed them to a tunnelled peer's pod
	// range) to TableOverlaySend, from the tunnel port to
	// TableOverlayReceive. Above every other flow that matches LOCAL's
	// frames (the node's redirects, the gateway's): these leave the node.
	PriorityOverlay uint16 = 340
	// PriorityNodeRedirect drops the ICMPv6 redirects the node sends into
	// the bridge (from LOCAL), with the base flow: the bridge's interface
	// is both the pods' gateway and the way to the other hosts on the
	// uplink's link, so the node's kernel, forwarding a pod's packet for
	// such a host back out of the bridge, tells the pod (or the host) to
	// go direct. The traffic then bypasses the node one way and not the
	// other, and the node's conntrack drops the half it sees (INVALID).
	// IPv4's redirects are off by sysctl (node-prep.sh's send_redirects);
	// IPv6 has no such sysctl. Above the gateway flows, which also match
	// LOCAL's frames.
	PriorityNodeRedirect uint16 = 330
	// PriorityGatewayReply, PriorityGatewaySkip and PriorityGatewayTrack
	// send a Service's replies from a backend in a container back through
	// the node (see gateway.go): below port security, whose allow flows
	// resubmit what they pass, above the host port classifiers, so that a
	// backend that also publishes its port (PriorityReply) is steered
	// too.
	PriorityGatewayReply uint16 = 320
	PriorityGatewaySkip  uint16 = 315
	PriorityGatewayTrack uint16 = 310
	// PriorityReplyRelated sends an ICMP error from a container port with
	// host ports down the reply path, above every other reply classifier.
	PriorityReplyRelated uint16 = 212
	// PriorityReplyFragment sends every fragment from a container port with
	// host ports down the reply path: above PriorityReply, for
	// the same reason.
	PriorityReplyFragment uint16 = 211
	// PriorityReply classifies container IP:containerPort from the
	// container's port → reply path, in table 0. Above PriorityRequest: the
	// reply to a SNATed request (hairpin, masqAll) is addressed to a node IP
	// and the SNATed source port, which may be a published host port.
	PriorityReply uint16 = 210
	// PriorityVLANIsolation: a port whose untagged frames are not on VLAN 0
	// (an access port of another VLAN, a trunk) has no path to the node's
	// addresses: its frames skip the host port classifiers, and tagged
	// frames never match them (they match vlan_tci=0x0000/0x1000). Such a
	// port has no host ports either (pkg/hostport refuses them): tables 40
	// and 41 know a container by its address alone, which networks on
	// different VLANs may share.
	PriorityVLANIsolation uint16 = 205
	// PriorityRelated sends an ICMP error to a node IP with host ports
	// through ct(nat) in the DNAT zone (table 0, shared flows): when it is
	// about a host-port connection (+rel), it reaches the container
	// translated, inner header included. Below PriorityVLANIsolation.
	PriorityRelated uint16 = 204
	// PriorityFragment sends a fragment to a node IP with host ports (any
	// protocol) through conntrack NAT in the DNAT zone (table
	// 0, shared flows), PriorityFragmentContainer the same from a container
	// port through the container zone: above PriorityRequest and
	// PriorityRequestContainer, so that the first fragment, which has ports,
	// is reassembled with the others.
	PriorityFragmentContainer uint16 = 203
	PriorityFragment          uint16 = 202
	// PriorityRequestContainer classifies the same requests as
	// PriorityRequest when they come from a container port that passed
	// port security (RegPortSecurityChecked): they are tracked in the
	// container zone, so that containers cannot use up the entries of
	// clients outside.
	PriorityRequestContainer uint16 = 201
	// PriorityRequest classifies node IP:hostPort → DNAT, in table 0.
	PriorityRequest uint16 = 200
	// PriorityBase is the NORMAL flow of table 0 that the suite owns on a
	// bridge with fail_mode=secure, where ovs-vswitchd installs none: so
	// that after a restart nothing is forwarded until reconcile has put
	// every port's security flows back.
	PriorityBase uint16 = 0
)

// Priorities of table 39 (TablePortmapNew). It has no miss flow: an
// invalid packet, or a new one of no rule, is dropped.
const (
	// PriorityNewConnection meters and commits a rule's new connection.
	PriorityNewConnection uint16 = 100
	// PriorityTracked passes the packets of known connections to the
	// container on to table 40.
	PriorityTracked uint16 = 50
)

// Priorities of table 40 (TablePortmapDNAT), highest first; its miss flow
// is PriorityMiss.
const (
	// PriorityHairpin SNATs container → its own host port.
	PriorityHairpin uint16 = 300
	// PriorityFragmentCommit DNATs the fragments of the first datagram of
	// a connection to a host port (+new-dnat after PriorityFragment or
	// PriorityFragmentContainer, in that flow's zone), as PriorityRequest
	// does an unfragmented one, by the datagram's original tuple: above
	// every other flow of table 40, which match translated requests.
	PriorityFragmentCommit uint16 = 250
	// PriorityFragmentMiss sends every other fragment of a new datagram
	// to a node IP (+new-dnat, nw_frag) through a ct of its zone to
	// TablePortmapFragmentMiss, so that the reassembly a first fragment
	// began at PriorityFragmentCommit completes (shared, per node IP and
	// zone). Only fragments of the userspace datapath come here: the kernel
	// datapath recirculates reassembled datagrams.
	PriorityFragmentMiss uint16 = 240
	// PriorityMasquerade SNATs every request to the container.
	PriorityMasquerade uint16 = 200
	// PriorityPass forwards unSNATed requests.
	PriorityPass uint16 = 100
)

// Priorities of tables 41 to 44, and the miss flow of tables 40, 42, 43
// and 44.
const (
	// PriorityOutput delivers to the container, in table 41.
	PriorityOutput uint16 = 100
	// PriorityReplyNAT un-DNATs replies (table 42) and restores them (table 43).
	PriorityReplyNAT uint16 = 100
	// PriorityReplyContainer sends a reply that the DNAT zone does not know
	// to the container zone, in table 43.
	PriorityReplyContainer uint16 = 50
	// PriorityFragmentHeld drops, in TablePortmapFragmentMiss, the first
	// fragment of a datagram to a host port (its ct_tp_dst) that arrives
	// there: PriorityFragmentCommit did not take the datagram whole.
	PriorityFragmentHeld uint16 = 100
	// PriorityMiss is the NORMAL fallback in tables 40 (fragments that no
	// connection translates), 42, 43 and 44.
	PriorityMiss uint16 = 0
)

// Priorities of tables 50 and 51 (the overlay, overlay.go).
const (
	// PriorityOverlayPeer: in TableOverlaySend, one flow per pod range of
	// a tunnelled peer; in TableOverlayReceive, one per known node and pod
	// range of this node.
	PriorityOverlayPeer uint16 = 100
	// PriorityOverlayDrop is the miss flow of both: what matches no peer
	// is dropped, and counted by its reason.
	PriorityOverlayDrop uint16 = 0
	// PriorityOverlayReply, in TablePortmapReplyRestore (above
	// PriorityReplyNAT): a host port's reply to a client in a tunnelled
	// peer's pod range goes through the tunnel, as the node would route
	// it, not back to the hop its request came from (a router between
	// the subnets, which has no route to pods).
	PriorityOverlayReply uint16 = 110
)

// OverlayMAC is the next hop of every route of the node to a tunnelled
// peer's pod range: a static neighbour of the bridge interface with this
// MAC (pkg/overlay), which no NIC has (locally administered, the suite's
// tag in it), so that PriorityOverlay tells the node's overlay traffic by
// its destination MAC alone.
var OverlayMAC = openflow.MAC{0x02, 0x0f, 0xc5, 0x00, 0x00, 0x01}

// OverlayVNI is the tunnel key (Geneve or VXLAN VNI) the overlay's packets
// carry: one overlay per cluster. The receiving side takes only this key.
const OverlayVNI = 0x0FC5

// A tableDecl declares a table of the pipeline: its number and constant,
// what it holds (the design doc's Tables table) and its priorities,
// highest first.
type tableDecl struct {
	ID    uint8
	Const string // the constant's name, for the docs
	Doc   string
	Prios []prioDecl
}

// A prioDecl declares the flows of one priority of its table under one
// cookie kind: a priority installed under two kinds (PriorityGatewaySkip
// and PriorityGatewayTrack: a container port's and a gateway's) has an
// entry for each.
type prioDecl struct {
	Value uint16
	Const string // the constant's name, for the docs
	Group Group
	// Name is what Name says of the flows; none for drops, which are named
	// by their reason.
	Name string
	// Drops are the reasons (DropReason) and names of the flows, which
	// drop what they match. With several, Which tells them apart by their
	// match.
	Drops []dropDecl
	Which func(openflow.Match) string
	// Doc is what the design doc's Priorities table says of the priority.
	// An entry without one shares the row of the last entry of its
	// constant (another table, another kind).
	Doc string
}

// A dropDecl is one reason of a drop flow and what it is for, in a verdict.
type dropDecl struct{ Reason, Name string }

// tables is the pipeline, in the order packets meet its tables. Name,
// DropReason and the design doc's Tables and Priorities tables follow from
// it.
var tables = []tableDecl{
	{ID: TableClassifier, Const: "TableClassifier",
		Doc: "the tombstones, ovs-bandwidth's meter flow, port security, the Service replies through the gateway, the exact-match request and reply classifiers, the base flow",
		Prios: []prioDecl{
			{Value: PriorityTombstone, Const: "PriorityTombstone", Group: GroupTombstone,
				Drops: []dropDecl{{ReasonTombstone, "the tombstone of a port being deleted"}},
				Doc:   "a port being deleted drops everything (`hard_timeout=10`)"},
			{Value: PriorityBandwidth, Const: "PriorityBandwidth", Group: GroupBandwidth,
				Name: "the egress limit's meter (ovs-bandwidth)",
				Doc:  "a frame from a container port with an egress limit (ovs-bandwidth): its meter, once (`reg1[2]`), then table 0 again"},
			{Value: PriorityPortSecVRRP, Const: "PriorityPortSecVRRP", Group: GroupPortSecurity,
				Name: "the port-security allow of VRRP adverts from its own and allowed addresses",
				Doc:  "with `allowVRRP`, a VRRP advert to its group (224.0.0.18, ff02::12) from the container's MAC and its own or allowed addresses: `reg1[0]` set, resubmitted to table 0"},
			{Value: PriorityPortSecGuard, Const: "PriorityPortSecGuard", Group: GroupPortSecurity,
				Drops: []dropDecl{
					{ReasonRouterAdvertisement, "the port-security guard for router advertisements"},
					{ReasonRedirect, "the port-security guard for ICMP redirects"},
					{ReasonDHCPServer, "the port-security guard for DHCP server frames"},
					{ReasonDoubleTag, "the port-security guard for double-tagged frames"},
					{ReasonVRRP, "the port-security guard for VRRP adverts (without allowVRRP, or not to their group from the container's addresses)"},
					{ReasonFragment, "the port-security guard for fragments that do not reassemble"},
				},
				Which: guardReason,
				Doc:   "what a container never sends: RA, redirects, DHCP server frames, VRRP adverts (but as priority 425 allows), double tags; invalid fragments"},
			{Value: PriorityPortSecFrag, Const: "PriorityPortSecFrag", Group: GroupPortSecurity,
				Name: "the port-security reassembly of fragments (zone 64003)",
				Doc:  "an IP fragment from a container: `ct(zone=64003, table=0)` first, to classify the datagram"},
			{Value: PriorityPortSecND, Const: "PriorityPortSecND", Group: GroupPortSecurity,
				Name: "the port-security allow of neighbour discovery for its own addresses",
				Doc:  "a container's neighbour discovery for its own addresses and MAC"},
			{Value: PriorityPortSecNDDrop, Const: "PriorityPortSecNDDrop", Group: GroupPortSecurity,
				Drops: []dropDecl{{ReasonNeighbourDiscovery, "the port-security drop of neighbour discovery for other addresses"}},
				Doc:   "any other neighbour solicitation or advertisement from a container"},
			{Value: PriorityPortSecAllow, Const: "PriorityPortSecAllow", Group: GroupPortSecurity,
				Name: "the port-security allow of its own MAC and addresses",
				Doc:  "a frame from the container's own MAC and addresses: `reg1[0]` set, resubmitted to table 0"},
			{Value: PriorityPortSecDrop, Const: "PriorityPortSecDrop", Group: GroupPortSecurity,
				Drops: []dropDecl{{ReasonSpoofed, "the port-security drop of any other frame (another source MAC or address, a VLAN tag)"}},
				Doc:   "any other frame from a container port"},
			{Value: PriorityOverlay, Const: "PriorityOverlay", Group: GroupOverlay,
				Name: "the overlay's classifier (to table 50 or 51)",
				Doc:  "from LOCAL to the overlay's virtual MAC (`02:0f:c5:00:00:01`, the next hop of the node's routes to tunnelled peers): table 50; from the tunnel port: table 51"},
			{Value: PriorityNodeRedirect, Const: "PriorityNodeRedirect", Group: GroupShared,
				Drops: []dropDecl{{ReasonNodeRedirect, "the drop of the node's own ICMPv6 redirects into the bridge (a secure bridge's, with its base flow)"}},
				Doc:   "an ICMPv6 redirect from LOCAL (the node's own, which IPv6 has no sysctl to stop): drop; a base flow, with priority 0's NORMAL"},
			{Value: PriorityGatewayReply, Const: "PriorityGatewayReply", Group: GroupPortSecurity,
				Name: "the Service reply to the gateway (zone 64004)",
				Doc:  "a container's reply (`+trk+rpl`, zone 64004, `ct_mark[0]`) to a connection the gateway forwarded to it: eth_dst := the gateway's MAC (`ct_label[0..47]`), `output:LOCAL`"},
			{Value: PriorityGatewaySkip, Const: "PriorityGatewaySkip", Group: GroupGateway,
				Name: "the pass of the node's own connections from the gateway",
				Doc:  "what needs no lookup: from LOCAL, the gateway's own address as source; from a container port, to the gateway address, and neighbour discovery: `reg1[3]` set, table 0 again"},
			{Value: PriorityGatewaySkip, Const: "PriorityGatewaySkip", Group: GroupPortSecurity,
				Name: "the pass of what needs no Service reply lookup"},
			{Value: PriorityGatewayTrack, Const: "PriorityGatewayTrack", Group: GroupGateway,
				Name: "the commit of a connection the gateway forwards to a pod (zone 64004)",
				Doc:  "from LOCAL, subnet to subnet: `ct(commit, zone 64004, exec(ct_mark[0], ct_label[0..47] := eth_src))`; from a container port to its subnet: `ct(zone 64004, table 0)`; both set `reg1[3]`"},
			{Value: PriorityGatewayTrack, Const: "PriorityGatewayTrack", Group: GroupPortSecurity,
				Name: "the Service reply lookup (zone 64004)"},
			{Value: PriorityReplyRelated, Const: "PriorityReplyRelated", Group: GroupHostPorts,
				Name: "the host-port reply classifier for ICMP errors",
				Doc:  "an ICMP error from a container port with host ports: reply path"},
			{Value: PriorityReplyFragment, Const: "PriorityReplyFragment", Group: GroupHostPorts,
				Name: "the host-port reply classifier for fragments",
				Doc:  "a fragment (any protocol) from a container port with host ports: reply path"},
			{Value: PriorityReply, Const: "PriorityReply", Group: GroupHostPorts,
				Name: "the host-port reply classifier",
				Doc:  "a reply from a published container port (above the requests: a SNATed reply may be addressed to a published port)"},
			{Value: PriorityVLANIsolation, Const: "PriorityVLANIsolation", Group: GroupPortSecurity,
				Name: "the VLAN isolation of a port off VLAN 0",
				Doc:  "a port off VLAN 0 has no path to the node: NORMAL, not the host-port classifiers"},
			{Value: PriorityRelated, Const: "PriorityRelated", Group: GroupShared,
				Name: "the ICMP error classifier of a node IP",
				Doc:  "an ICMP error to a node IP with host ports: `ct(commit, zone 64000, nat)`, table 40"},
			{Value: PriorityFragmentContainer, Const: "PriorityFragmentContainer", Group: GroupShared,
				Name: "the fragment classifier of a node IP for clients in containers",
				Doc:  "`PriorityFragment` from a container port (port security passed): zone 64002"},
			{Value: PriorityFragment, Const: "PriorityFragment", Group: GroupShared,
				Name: "the fragment classifier of a node IP",
				Doc:  "a fragment (any protocol, TCP included) to a node IP with host ports: `ct(zone 64000, nat)`, table 40"},
			{Value: PriorityRequestContainer, Const: "PriorityRequestContainer", Group: GroupHostPorts,
				Name: "the host-port request classifier for clients in containers (container zone)",
				Doc:  "a request from a container port (port security passed): container zone"},
			{Value: PriorityRequest, Const: "PriorityRequest", Group: GroupHostPorts,
				Name: "the host-port request classifier (DNAT zone)",
				Doc:  "an untagged request to a published node IP:hostPort and the node's MAC (with `newConnectionRate`: a `ct(zone, nat)` lookup only, then table 39)"},
			{Value: PriorityBase, Const: "PriorityBase", Group: GroupShared,
				Name: "the base NORMAL flow of a secure bridge",
				Doc:  "NORMAL, the suite's on a `fail_mode=secure` bridge only (`BaseFlows`)"},
		}},
	{ID: TablePortmapNew, Const: "TablePortmapNew",
		Doc: "requests of an attachment with `newConnectionRate`, after a ct lookup: a new connection through its mapping's meter, then committed with its DNAT",
		Prios: []prioDecl{
			{Value: PriorityNewConnection, Const: "PriorityNewConnection", Group: GroupHostPorts,
				Name: "the host-port new-connection meter and DNAT (newConnectionRate)",
				Doc:  "a new connection of a rule: its mapping's meter, then the `ct(commit, nat(dst))` of priority 200/201"},
			{Value: PriorityTracked, Const: "PriorityTracked", Group: GroupHostPorts,
				Name: "the host-port pass of a known connection (newConnectionRate)",
				Doc:  "a packet of a known connection (already translated): table 40; table 39 has no miss flow, anything else is dropped"},
		}},
	{ID: TablePortmapDNAT, Const: "TablePortmapDNAT",
		Doc: "requests after DNAT: SNAT (hairpin, `masqAll`) or not; the fragments of a new datagram",
		Prios: []prioDecl{
			{Value: PriorityHairpin, Const: "PriorityHairpin", Group: GroupHostPorts,
				Name: "the hairpin SNAT",
				Doc:  "container to its own host port: SNAT (zone 64001)"},
			{Value: PriorityFragmentCommit, Const: "PriorityFragmentCommit", Group: GroupHostPorts,
				Name: "the host-port DNAT of a new datagram's fragments",
				Doc:  "the fragments of a connection's first datagram (`+new-dnat`), by its original tuple (`ct_nw_proto`, `ct_tp_dst` = hostPort): `ct(commit, nat(dst))` as priority 200, in the zone of its fragment flow"},
			{Value: PriorityFragmentMiss, Const: "PriorityFragmentMiss", Group: GroupShared,
				Name: "the reassembly of a new datagram's other fragments (to table 44)",
				Doc:  "any other fragment of a new datagram to a node IP: `ct` of its zone, table 44 (shared, per node IP and zone)"},
			{Value: PriorityMasquerade, Const: "PriorityMasquerade", Group: GroupHostPorts,
				Name: "the masquerade SNAT (masqAll)",
				Doc:  "every request SNATed (`masqAll`)"},
			{Value: PriorityPass, Const: "PriorityPass", Group: GroupHostPorts,
				Name: "the host-port request without SNAT",
				Doc:  "a request not SNATed: table 41"},
			{Value: PriorityMiss, Const: "PriorityMiss", Group: GroupShared,
				Name: "the untranslated-request fallback (NORMAL)",
				Doc:  "not ours after all (40, 44: an untranslated fragment): NORMAL"},
		}},
	{ID: TablePortmapOutput, Const: "TablePortmapOutput",
		Doc: "requests: rewrite the MACs, output to the container port",
		Prios: []prioDecl{
			{Value: PriorityOutput, Const: "PriorityOutput", Group: GroupHostPorts,
				Name: "the host-port output to the container",
				Doc:  "deliver to the container"},
		}},
	{ID: TablePortmapReplySNAT, Const: "TablePortmapReplySNAT",
		Doc: "replies after un-SNAT: un-DNAT them (a flow per family)",
		Prios: []prioDecl{
			{Value: PriorityReplyNAT, Const: "PriorityReplyNAT", Group: GroupShared,
				Name: "the host-port reply un-DNAT",
				Doc:  "reply handling"},
			{Value: PriorityMiss, Const: "PriorityMiss", Group: GroupShared,
				Name: "the reply fallback (NORMAL)"},
		}},
	{ID: TablePortmapReplyRestore, Const: "TablePortmapReplyRestore",
		Doc: "replies after un-DNAT: back to where the request came from, by ct_label",
		Prios: []prioDecl{
			{Value: PriorityOverlayReply, Const: "PriorityOverlayReply", Group: GroupOverlay,
				Name: "the overlay's host-port reply to a tunnelled peer's pod",
				Doc:  "a reply to a tunnelled peer's pod range: through the tunnel port to that peer's node, as table 50 sends"},
			{Value: PriorityReplyNAT, Const: "PriorityReplyNAT", Group: GroupShared,
				Name: "the host-port reply restore (back where the request came from)"},
			{Value: PriorityReplyContainer, Const: "PriorityReplyContainer", Group: GroupShared,
				Name: "the host-port reply lookup in the container zone",
				Doc:  "not a reply in the DNAT zone: look in the container zone"},
			{Value: PriorityMiss, Const: "PriorityMiss", Group: GroupShared,
				Name: "the reply fallback (NORMAL)"},
		}},
	{ID: TablePortmapFragmentMiss, Const: "TablePortmapFragmentMiss",
		Doc: "fragments of a new datagram no rule took: to the node, a host port's never",
		Prios: []prioDecl{
			{Value: PriorityFragmentHeld, Const: "PriorityFragmentHeld", Group: GroupHostPorts,
				Drops: []dropDecl{{ReasonHostPortFragment, "the drop of a host port's new fragmented datagram that its fragments' DNAT did not take (userspace datapath before OVS 3.1.7)"}},
				Doc:   "a host port's first fragment that priority 250 did not take whole: drop"},
			{Value: PriorityMiss, Const: "PriorityMiss", Group: GroupShared,
				Name: "the fragment fallback to the node (NORMAL)"},
		}},
	{ID: TableOverlaySend, Const: "TableOverlaySend",
		Doc: "what the node routed to a tunnelled peer's pod range: through the tunnel port to that peer's node",
		Prios: []prioDecl{
			{Value: PriorityOverlayPeer, Const: "PriorityOverlayPeer", Group: GroupOverlay,
				Name: "the overlay's send to a peer's node",
				Doc:  "table 50: a peer's pod range: `tun_dst` := the peer's InternalIP, `tun_id` := 0xfc5, output to the tunnel port; table 51: from a known node (`tun_src`) with the overlay's key (`tun_id`) to a pod range of this node: `eth_dst` := the bridge interface's MAC, `output:LOCAL` (the node routes it as host-gw traffic)"},
			{Value: PriorityOverlayDrop, Const: "PriorityOverlayDrop", Group: GroupOverlay,
				Drops: []dropDecl{{ReasonOverlayNoPeer, "the overlay's drop of what no tunnelled peer's range holds"}},
				Doc:   "anything else: drop (50: no peer's range holds it; 51: an unknown node's, or not for this node's pods)"},
		}},
	{ID: TableOverlayReceive, Const: "TableOverlayReceive",
		Doc: "what came in through the tunnel port: from a known node to this node's pod ranges, to the node's stack",
		Prios: []prioDecl{
			{Value: PriorityOverlayPeer, Const: "PriorityOverlayPeer", Group: GroupOverlay,
				Name: "the overlay's delivery to the node from a known node"},
			{Value: PriorityOverlayDrop, Const: "PriorityOverlayDrop", Group: GroupOverlay,
				Drops: []dropDecl{{ReasonOverlayRefused, "the overlay's drop of a tunnelled packet from an unknown node or not for this node's pods"}}},
		}},
}

// A layoutKind is what a layoutDecl lays out.
type layoutKind uint8

const (
	layoutZone   layoutKind = iota + 1 // a conntrack zone: Value
	layoutLimit                        // a conntrack limit: Value
	layoutField                        // bits of ct_label, ct_mark or a register: Field
	layoutCookie                       // a cookie field: bits Lo..Hi, which hold Value if Fixed
	layoutMeter                        // meter ids: bits Lo..Hi = Value (Fixed), or Form
)

// A layoutDecl declares one part of the layout besides tables and
// priorities, by the values of the constants and variables it names.
type layoutDecl struct {
	Kind   layoutKind
	Value  uint64
	Field  openflow.Subfield
	Lo, Hi uint8
	Fixed  bool
	// Form is a meter id made of its port's number.
	Form string
	// Names are the constants, variables or functions it stands for; a
	// range of meter ids names its first and last.
	Names []string
	// Key is the setting (Pipeline's and the plugin config's JSON key)
	// that can replace the default.
	Key string
	Doc string
}

// layout is the rest of the pipeline's layout: zones and their limits,
// ct_label, ct_mark and register bits, cookie fields, meter ids. The
// design doc's Zones and Cookies tables follow from it.
var layout = []layoutDecl{
	{Kind: layoutZone, Value: uint64(DefaultDNATZone), Names: []string{"DefaultDNATZone"}, Key: "dnatZone",
		Doc: "node IP:hostPort → container; its ct_label holds the origin"},
	{Kind: layoutZone, Value: uint64(DefaultSNATZone), Names: []string{"DefaultSNATZone"}, Key: "snatZone",
		Doc: "hairpin and `masqAll` source translation"},
	{Kind: layoutZone, Value: uint64(DefaultContainerZone), Names: []string{"DefaultContainerZone"}, Key: "containerZone",
		Doc: "as 64000, for clients in containers: a flood from one cannot fill 64000"},
	{Kind: layoutZone, Value: uint64(PortSecDefragZone), Names: []string{"PortSecDefragZone"},
		Doc: "reassembly of a container's fragments for port security; nothing is committed, no limit needed"},
	{Kind: layoutZone, Value: uint64(GatewayZone), Names: []string{"GatewayZone"},
		Doc: "connections the node forwards from the gateway (LOCAL) to a pod with a pod's source in the gateway's subnet (a Service's DNAT to a local backend); one entry per such connection of the node's own conntrack, no limit of its own"},
	{Kind: layoutLimit, Value: uint64(DefaultLimit), Names: []string{"DefaultLimit"}, Key: "conntrackLimit",
		Doc: "conntrack entries of zones 64000 and 64001, each, per datapath"},
	{Kind: layoutLimit, Value: uint64(DefaultContainerLimit), Names: []string{"DefaultContainerLimit"}, Key: "containerConntrackLimit",
		Doc: "conntrack entries of zone 64002"},
	{Kind: layoutField, Field: LabelOrigEthSrc, Names: []string{"LabelOrigEthSrc"},
		Doc: "the request's source MAC = the reply's eth_dst"},
	{Kind: layoutField, Field: LabelOrigEthDst, Names: []string{"LabelOrigEthDst"},
		Doc: "the request's destination MAC (the node's, which requests match) = the reply's eth_src"},
	{Kind: layoutField, Field: LabelOrigInPort, Names: []string{"LabelOrigInPort"},
		Doc: "the request's ingress port = the reply's output port"},
	{Kind: layoutField, Field: CTMarkFromGateway, Names: []string{"CTMarkFromGateway"},
		Doc: "zone 64004: the connection entered its pod from the gateway"},
	{Kind: layoutField, Field: LabelGatewayMAC, Names: []string{"LabelGatewayMAC"},
		Doc: "zone 64004: the gateway's MAC (the forwarded request's eth_src) = the steered reply's eth_dst"},
	{Kind: layoutField, Field: RegOutPort, Names: []string{"RegOutPort"},
		Doc: "`LabelOrigInPort` copied for `output:`, within table 43"},
	{Kind: layoutField, Field: RegPortSecurityChecked, Names: []string{"RegPortSecurityChecked"},
		Doc: "table 0: the frame passed port security and was resubmitted"},
	{Kind: layoutField, Field: RegPortSecurityDefragged, Names: []string{"RegPortSecurityDefragged"},
		Doc: "table 0: the fragment went through `ct(zone 64003)` once"},
	{Kind: layoutField, Field: RegBandwidthMetered, Names: []string{"RegBandwidthMetered"},
		Doc: "table 0: the frame went through its port's meter (ovs-bandwidth)"},
	{Kind: layoutField, Field: RegGatewayTracked, Names: []string{"RegGatewayTracked"},
		Doc: "table 0: the frame went through `PriorityGatewaySkip` or `PriorityGatewayTrack` (315, 310) once"},
	{Kind: layoutCookie, Lo: 48, Hi: 63, Fixed: true, Value: uint64(CookieSuite >> 48), Names: []string{"CookieSuite"},
		Doc: "the suite's tag, on every flow of this pipeline"},
	{Kind: layoutCookie, Lo: CookieKindShift, Hi: CookieKindShift + 7, Fixed: true, Value: uint64(CookieKindShared), Names: []string{"CookieKindShared"},
		Doc: "kind: the flows shared by all attachments (`SharedCookie`)"},
	{Kind: layoutCookie, Lo: CookieKindShift, Hi: CookieKindShift + 7, Fixed: true, Value: uint64(CookieKindAttachment), Names: []string{"CookieKindAttachment"},
		Doc: "kind: an attachment's host ports (`AttachmentCookie`)"},
	{Kind: layoutCookie, Lo: CookieKindShift, Hi: CookieKindShift + 7, Fixed: true, Value: uint64(CookieKindPortSecurity), Names: []string{"CookieKindPortSecurity"},
		Doc: "kind: an attachment's port security (ovs-bridge; the hash of its host ports)"},
	{Kind: layoutCookie, Lo: CookieKindShift, Hi: CookieKindShift + 7, Fixed: true, Value: uint64(CookieKindTombstone), Names: []string{"CookieKindTombstone"},
		Doc: "kind: the tombstones of ports being deleted (hash 0)"},
	{Kind: layoutCookie, Lo: CookieKindShift, Hi: CookieKindShift + 7, Fixed: true, Value: uint64(CookieKindBandwidth), Names: []string{"CookieKindBandwidth"},
		Doc: "kind: an attachment's egress limit (ovs-bandwidth; the same hash)"},
	{Kind: layoutCookie, Lo: CookieKindShift, Hi: CookieKindShift + 7, Fixed: true, Value: uint64(CookieKindGateway), Names: []string{"CookieKindGateway"},
		Doc: "kind: a gateway of the bridge (`isGateway`, `GatewayCookie`)"},
	{Kind: layoutCookie, Lo: CookieKindShift, Hi: CookieKindShift + 7, Fixed: true, Value: uint64(CookieKindOverlay), Names: []string{"CookieKindOverlay"},
		Doc: "kind: the overlay's flows of a bridge (hash 0)"},
	{Kind: layoutCookie, Lo: 0, Hi: CookieKindShift - 1, Names: []string{"CookieHashMask"},
		Doc: "hash: FNV-1a 64 of `containerID + \"/\" + ifname`, low 40 bits (`CookieKindGateway`: of the gateway prefix, `192.0.2.1/24`; `CookieKindOverlay`: 0)"},
	{Kind: layoutMeter, Lo: 28, Hi: 31, Fixed: true, Value: uint64(MeterSuiteFirst >> 28), Names: []string{"MeterSuiteFirst", "MeterSuiteLast"},
		Doc: "every meter of the suite, and no other: uninstall and the sweeps delete meters of this range only, and a meter outside it is someone else's"},
	{Kind: layoutMeter, Form: "0x1ff00000 | ofport", Names: []string{"MeterOf"},
		Doc: "the egress meter of a container port (ovs-bandwidth): one per port, numbered after the port"},
	{Kind: layoutMeter, Form: "0x10000000 | ofport<<12 | i", Names: []string{"ConnMeterOf"},
		Doc: "the new connections of the i-th mapping (protocol, host port) of an attachment (ovs-portmap's `newConnectionRate`; at most 4096 per attachment, `MaxConnMeters`)"},
}

// The suite's meters. OpenFlow meters carry no cookie, so their IDs say
// whose they are: every meter the suite installs is in
// [MeterSuiteFirst, MeterSuiteLast] (meter[28..31] = 1), and a meter
// outside it is someone else's, which nothing of the suite deletes or
// modifies. Each meter is named after the ofport of its attachment, which
// is unique on the bridge and in the attachment's Port row: whoever removes
// the attachment (DEL, GC, a replacing ADD) finds its meters through the
// row, without the flows that use them.
const (
	MeterSuiteFirst uint32 = 0x10000000
	MeterSuiteLast  uint32 = 0x1fffffff
	// meterEgress starts the egress meters (MeterOf), above every
	// new-connection meter (ConnMeterOf < 0x10000000 | 0xff00<<12).
	meterEgress uint32 = 0x1ff00000
)

// IsSuiteMeter reports whether meter id is in the suite's range.
func IsSuiteMeter(id uint32) bool { return id >= MeterSuiteFirst && id <= MeterSuiteLast }

// ConnMeterOf is the meter of the new connections of the i-th mapping
// (distinct protocol and host port, in rule order) of the attachment on
// ofport: unique on the bridge as the ofport is, below the egress meters
// (MeterOf), and in the suite's range for every ofport below 0xff00 and i
// below MaxConnMeters.
func ConnMeterOf(ofport uint32, i int) uint32 { return MeterSuiteFirst | ofport<<12 | uint32(i) }

// MaxConnMeters is how many mappings of one attachment can have a
// new-connection meter.
const MaxConnMeters = 1 << 12

// MeterOf is the OpenFlow meter of the egress limit of the container port
// with ofport (below 0xff00): the ofport is unique on its bridge and
// claimed in OVSDB by ovs-bridge, so two attachments never share a meter.
func MeterOf(ofport uint32) uint32 { return meterEgress | ofport }

// EgressMeterPort is the ofport whose egress meter (MeterOf) id is, if it
// is one.
func EgressMeterPort(id uint32) (ofport uint32, ok bool) {
	if id&^0xfffff != meterEgress {
		return 0, false
	}
	return id & 0xfffff, true
}

// Conntrack zones. Zone 0 is the default zone of every other ct() user and is
// never used here.
const (
	// DefaultDNATZone tracks node IP:hostPort → container connections; its
	// ct_label holds the request's origin (see the Label fields).
	DefaultDNATZone uint16 = 64000
	// DefaultSNATZone tracks the hairpin/masquerade source translation.
	DefaultSNATZone uint16 = 64001
	// DefaultContainerZone tracks node IP:hostPort → container connections
	// whose client is a container behind port security.
	DefaultContainerZone uint16 = 64002
	// PortSecDefragZone reassembles the fragments of container ports for
	// port security (PriorityPortSecFrag). Nothing is committed in it, so
	// it holds no entries and needs no limit; it is fixed, not one of
	// Pipeline's zones, and must differ from them.
	PortSecDefragZone uint16 = 64003
	// GatewayZone tracks the connections that the node forwards from the
	// gateway (LOCAL) to a pod with the source address of a pod of the
	// gateway's subnet: those of a Service whose backend is on this node,
	// DNATed by the node (kube-proxy). Fixed, like PortSecDefragZone, and
	// without a limit of its own: it holds one entry per such connection
	// of the node's own conntrack.
	GatewayZone uint16 = 64004
)

// Registers and ct_label fields, as typed subfields (rendered
// NXM_NX_CT_LABEL[0..47] and so on).
var (
	// LabelOrigEthSrc keeps the request's source MAC: the reply's eth_dst.
	LabelOrigEthSrc = openflow.FieldCTLabel.Bits(0, 47)
	// LabelOrigEthDst keeps the request's destination MAC (the node's): the
	// reply's eth_src.
	LabelOrigEthDst = openflow.FieldCTLabel.Bits(48, 95)
	// LabelOrigInPort keeps the request's ingress port: the reply's output.
	LabelOrigInPort = openflow.FieldCTLabel.Bits(96, 111)
	// RegOutPort carries LabelOrigInPort to output:, which cannot read
	// ct_label directly. Only used within table 43.
	RegOutPort = openflow.Reg(0).Bits(0, 15)
	// RegPortSecurityChecked is set once a frame passed port security.
	RegPortSecurityChecked = openflow.Reg(1).Bit(0)
	// RegPortSecurityDefragged is set on a fragment before it goes through
	// ct(zone=PortSecDefragZone), so that it does so once.
	RegPortSecurityDefragged = openflow.Reg(1).Bit(1)
	// RegBandwidthMetered is set once a frame went through its port's
	// meter (PriorityBandwidth), so that the resubmit and a recirculation
	// after ct() do not meter it again.
	RegBandwidthMetered = openflow.Reg(1).Bit(2)
	// RegGatewayTracked is set once a frame went through
	// PriorityGatewaySkip or PriorityGatewayTrack, so that it does so
	// once.
	RegGatewayTracked = openflow.Reg(1).Bit(3)
	// CTMarkFromGateway marks, in GatewayZone, a connection that entered
	// its pod from the gateway.
	CTMarkFromGateway = openflow.FieldCTMark.Bit(0)
	// LabelGatewayMAC keeps, in GatewayZone, the MAC of the gateway (the
	// source of the request it forwarded): the steered reply's eth_dst.
	LabelGatewayMAC = openflow.FieldCTLabel.Bits(0, 47)
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
	// CookieKindAttachment marks the host port flows of one attachment.
	CookieKindAttachment uint8 = 1
	// CookieKindPortSecurity marks the port security flows of one
	// attachment (written by ovs-bridge, same hash as its host port flows).
	CookieKindPortSecurity uint8 = 2
	// CookieKindTombstone marks the tombstone flows of ports being deleted
	// (hash 0: no attachment delete touches them).
	CookieKindTombstone uint8 = 3
	// CookieKindBandwidth marks the egress limit flows of one attachment
	// (written by ovs-bandwidth, same hash).
	CookieKindBandwidth uint8 = 4
	// CookieKindGateway marks the flows of one gateway of a bridge
	// (isGateway): its hash is that of the gateway prefix (GatewayCookie),
	// not of an attachment.
	CookieKindGateway uint8 = 5
	// CookieKindOverlay marks the overlay's flows of a bridge (hash 0:
	// one set per bridge, which the agent and reconcile replace whole).
	CookieKindOverlay uint8 = 6
	// AttachmentMask selects suite tag and hash, any kind: every flow of one
	// attachment, for the single masked delete of ovs-bridge's DEL.
	AttachmentMask Cookie = SuiteMask | CookieHashMask
	// CookieHashMask selects the low 40 bits of FNV-1a 64 of
	// containerID + "/" + ifname.
	CookieHashMask Cookie = 1<<CookieKindShift - 1
)

// Pipeline holds the deployment choices of the pipeline: its conntrack
// zones. Tables and priorities are fixed. ContainerZone 0 (records written
// before it existed) tracks container clients in the DNAT zone too.
type Pipeline struct {
	DNATZone uint16 `json:"dnatZone"`
	SNATZone uint16 `json:"snatZone"`
	// ContainerZone and the limits: 0 in host port records written before
	// they existed.
	ContainerZone uint16 `json:"containerZone,omitempty"`
	// Limit bounds the conntrack entries of the DNAT and SNAT zones, and
	// ContainerLimit those of the container zone (0: no limit), so that a
	// flood from containers cannot use up what clients outside and the
	// node rely on.
	Limit          uint32 `json:"conntrackLimit,omitempty"`
	ContainerLimit uint32 `json:"containerConntrackLimit,omitempty"`
}

// Default conntrack limits of the pipeline's zones.
const (
	DefaultLimit          uint32 = 65536
	DefaultContainerLimit uint32 = 16384
)

// DefaultPipeline returns the pipeline with the default zones and limits.
func DefaultPipeline() Pipeline {
	return Pipeline{DNATZone: DefaultDNATZone, SNATZone: DefaultSNATZone, ContainerZone: DefaultContainerZone,
		Limit: DefaultLimit, ContainerLimit: DefaultContainerLimit}
}

// ZoneLimits returns the conntrack limit of each zone of the pipeline.
func (p Pipeline) ZoneLimits() map[uint16]uint32 {
	m := map[uint16]uint32{p.DNATZone: p.Limit, p.SNATZone: p.Limit}
	if p.ContainerZone != 0 {
		m[p.ContainerZone] = p.ContainerLimit
	}
	return m
}

// Zones returns the pipeline's conntrack zones that track connections to
// host ports (the DNAT zones), for conntrack flushes.
func (p Pipeline) Zones() []uint16 {
	if p.ContainerZone == 0 {
		return []uint16{p.DNATZone}
	}
	return []uint16{p.DNATZone, p.ContainerZone}
}
