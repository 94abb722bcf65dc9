package flows

import (
	"hash/fnv"
	"net/netip"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// Service replies through the gateway. A pod C that calls a Service
// address S sends to its default gateway, the bridge's internal interface
// (LOCAL, isGateway); the node DNATs S to a backend B (kube-proxy) and,
// when B is a pod of the same subnet on this node, routes the request back
// out of LOCAL with C's source address. B answers C directly, and NORMAL
// would switch the answer straight to C: the node's conntrack never sees
// it, never un-DNATs it, and C drops an answer from B where it expects one
// from S. A Linux bridge avoids this through br_netfilter; Open vSwitch
// has no such hook. So (as Antrea does):
//
//	LOCAL -> pod, ip, source and destination in the gateway's subnet, source not the gateway:
//	  table 0 prio 310 (per gateway, CookieKindGateway)
//	    ct(commit, zone 64004, exec(ct_mark[0] := 1, ct_label[0..47] := eth_src)), resubmit(,0)
//	container port -> the gateway's subnet, untagged ip, not to the gateway's own address, not ND:
//	  table 0 prio 310 (per port, with its port flows) ct(zone 64004, table 0): a lookup
//	  table 0 prio 320 (per port) +trk+rpl, ct_zone=64004, ct_mark[0]:
//	    eth_dst := ct_label[0..47] (the gateway's MAC), output:LOCAL
//	  otherwise the rest of table 0, as before (host port replies, NORMAL)
//
// The node then un-DNATs the reply and sends it to C from S. Prio 315
// (PriorityGatewaySkip) lets what needs no lookup pass without one: from
// LOCAL, the node's own connections (source: the gateway address), whose
// replies are addressed to the gateway anyway; from a container port, its
// packets to the gateway address and its neighbour discovery. Every flow
// sets RegGatewayTracked and resubmits, so table 0 sees the packet once
// more, as it was, below them: the flows are transparent to port security
// (above them: a container's frames meet these only once allowed, with
// RegPortSecurityChecked), to the egress meter and to host ports.
//
// What it costs: an IP packet from a container port to another address of
// its subnet (pod to pod on the node, replies included) takes one
// conntrack lookup in zone 64004 (no entry is created) and one
// recirculation; a packet the node forwards to a pod with a pod's source
// takes one ct(commit) (one entry per connection, for as long as the
// node's conntrack keeps its own); nothing else pays: ARP, neighbour
// discovery, traffic to or from the gateway address, to or from outside
// the subnet, on another VLAN, or of a port without isGateway.

// GatewayCookie returns the cookie of the flows of gateway g (an address
// of the bridge's internal interface with its subnet's prefix length, as
// ovs-bridge puts it there): shared by every attachment of its network,
// removed with the gateway.
func GatewayCookie(g netip.Prefix) Cookie {
	h := fnv.New64a()
	h.Write([]byte(g.String()))
	return CookieSuite | Cookie(CookieKindGateway)<<CookieKindShift | Cookie(h.Sum64())&CookieHashMask
}

// gatewayOK reports whether g is a gateway the flows can be built for: an
// address within a subnet that holds more than it.
func gatewayOK(g netip.Prefix) bool {
	return g.IsValid() && !g.IsSingleIP() && g.Bits() > 0 && !g.Addr().IsUnspecified() && !g.Addr().IsMulticast()
}

// GatewayFlows returns the flows of gateway g on its bridge's internal
// interface (LOCAL): the commit, in GatewayZone, of the connections the
// node forwards to a pod with a pod's source address. None for a g that
// gatewayOK refuses.
func GatewayFlows(g netip.Prefix) []Flow {
	if !gatewayOK(g) {
		return nil
	}
	c := GatewayCookie(g)
	g = netip.PrefixFrom(g.Addr().Unmap(), g.Bits())
	from := openflow.Match{}.InPort(openflow.PortLocal).RegBits(RegGatewayTracked, 0).EthType(ethOf(g.Addr()))
	tracked := openflow.Load{Value: 1, Dst: RegGatewayTracked}
	again := openflow.Resubmit{Table: TableClassifier}
	return []Flow{
		flow(c, TableClassifier, PriorityGatewaySkip, from.IPSrc(openflow.Host(g.Addr())), tracked, again),
		flow(c, TableClassifier, PriorityGatewayTrack, from.IPSrc(g.Masked()).IPDst(g.Masked()), tracked,
			openflow.CT{Commit: true, Zone: GatewayZone, Exec: openflow.Actions{
				openflow.Load{Value: 1, Dst: CTMarkFromGateway},
				openflow.Move{Src: openflow.FieldEthSrc.All(), Dst: LabelGatewayMAC},
			}},
			again),
	}
}

// GatewayBundle returns the bundle that replaces the flows of gateways
// gws.
func GatewayBundle(gws ...netip.Prefix) openflow.Bundle {
	var b openflow.Bundle
	for _, g := range gws {
		if fl := GatewayFlows(g); len(fl) > 0 {
			b = append(b, GatewayCookie(g).Delete())
			for _, f := range fl {
				b = append(b, f)
			}
		}
	}
	return b
}

// GatewayDelete returns the bundle that removes the flows of gateways
// gws.
func GatewayDelete(gws ...netip.Prefix) openflow.Bundle {
	var b openflow.Bundle
	for _, g := range gws {
		b = append(b, GatewayCookie(g).Delete())
	}
	return b
}

// gatewayPortFlows returns the flows of a container port that send its
// replies to connections the gateway opened back to the gateway (see
// above), with cookie c: none on a port off VLAN 0, which has no path to
// the node, nor without a gateway.
func gatewayPortFlows(c Cookie, ps PortSecurity) []Flow {
	var gws []netip.Prefix
	for _, g := range ps.Gateways {
		if gatewayOK(g) {
			gws = append(gws, netip.PrefixFrom(g.Addr().Unmap(), g.Bits()))
		}
	}
	if ps.VLAN != Untagged || len(gws) == 0 {
		return nil
	}
	port := openflow.Match{}.InPort(ps.OFPort)
	mark := uint32(1) << CTMarkFromGateway.Offset
	reply := openflow.CTTrk | openflow.CTRpl
	out := []Flow{flow(c, TableClassifier, PriorityGatewayReply,
		port.RegBits(RegGatewayTracked, 1).CTState(reply, reply).CTZone(GatewayZone).CTMark(mark, mark),
		openflow.Move{Src: LabelGatewayMAC, Dst: openflow.FieldEthDst.All()},
		openflow.Output{Port: openflow.PortLocal})}
	untracked := port.RegBits(RegGatewayTracked, 0)
	tracked := openflow.Load{Value: 1, Dst: RegGatewayTracked}
	again := openflow.Resubmit{Table: TableClassifier}
	nd := false
	for _, g := range gws {
		ip := untracked.EthType(ethOf(g.Addr()))
		out = append(out,
			flow(c, TableClassifier, PriorityGatewaySkip, ip.IPDst(openflow.Host(g.Addr())), tracked, again),
			// Untagged only, as the port takes them: the reply flow's
			// output:LOCAL skips NORMAL's VLAN checks.
			flow(c, TableClassifier, PriorityGatewayTrack, ip.VLANTCI(0, 0x1000).IPDst(g.Masked()), tracked,
				openflow.CT{Zone: GatewayZone, Table: openflow.Table(TableClassifier)}))
		if g.Addr().Is6() && !nd {
			nd = true
			for _, typ := range []uint8{135, 136} {
				out = append(out, flow(c, TableClassifier, PriorityGatewaySkip,
					untracked.Proto(openflow.EthIPv6, openflow.ProtoICMPv6).ICMPType(typ), tracked, again))
			}
		}
	}
	return out
}
