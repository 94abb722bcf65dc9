package flows

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// The overlay: pods of nodes on different subnets reach each other through
// one flow-based tunnel port per bridge (Geneve or VXLAN, remote_ip=flow,
// key=flow; pkg/overlay keeps it). Traffic between nodes goes through
// each node's own stack, as with host-gw routes, so that what the node
// does to it (kube-proxy's Services, its conntrack, its firewall) is the
// same either way:
//
//	sending: the node routes a tunnelled peer's pod range via a next hop on
//	the bridge interface whose neighbour is OverlayMAC (pkg/overlay)
//	  table 0  PriorityOverlay  in_port=LOCAL, dl_dst=OverlayMAC: table 50
//	  table 50 PriorityOverlayPeer  ip, nw_dst=the peer's range:
//	    tun_dst := the peer's InternalIP, tun_id := OverlayVNI, output:tunnel
//	  table 50 PriorityOverlayDrop  anything else: drop (ReasonOverlayNoPeer)
//	  table 43 PriorityOverlayReply  a host port's reply (+rpl), nw_dst=a peer's range:
//	    the same (its request came from the peer's pod by the underlay, through
//	    a router that has no route back to pods)
//	receiving:
//	  table 0  PriorityOverlay  in_port=tunnel: table 51
//	  table 51 PriorityOverlayPeer  tun_src=a known node, tun_id=OverlayVNI, ip, nw_dst=a pod range of this node:
//	    eth_dst := the bridge interface's MAC, output:LOCAL (the node routes it to its pod)
//	  table 51 PriorityOverlayDrop  anything else: drop (ReasonOverlayRefused)
//
// The inner source is not checked against the peer's ranges: a node sends
// its own packets (its InternalIP as source, a Service's SNAT) to pods of
// other nodes as well. A known node is one of the peers this node tunnels
// to: a node this node reaches by host-gw has no business sending through
// the tunnel.

// OverlayPeer is a tunnelled peer's pod range and its node's InternalIP of
// the same family (the tunnel's outer destination).
type OverlayPeer struct {
	Dst    netip.Prefix
	Remote netip.Addr
}

// Overlay is what the overlay flows of one bridge are built from.
type Overlay struct {
	TunnelPort uint32         // the tunnel port's ofport
	BridgeMAC  openflow.MAC   // the bridge interface's MAC (LOCAL's)
	Local      []netip.Prefix // this node's pod ranges
	Peers      []OverlayPeer
}

// OverlayCookie is the cookie of every overlay flow of a bridge.
func OverlayCookie() Cookie {
	return CookieSuite | Cookie(CookieKindOverlay)<<CookieKindShift
}

// OverlayFlows returns the overlay's flows of a bridge, in a deterministic
// order (peers and ranges sorted). None without a tunnel port or bridge
// MAC.
func OverlayFlows(o Overlay) []Flow {
	if o.TunnelPort == 0 || o.TunnelPort >= openflow.PortMax || o.BridgeMAC.IsZero() {
		return nil
	}
	c := OverlayCookie()
	out := []Flow{
		flow(c, TableClassifier, PriorityOverlay, openflow.Match{}.InPort(openflow.PortLocal).EthDst(OverlayMAC),
			openflow.GotoTable{Table: TableOverlaySend}),
		flow(c, TableClassifier, PriorityOverlay, openflow.Match{}.InPort(o.TunnelPort),
			openflow.GotoTable{Table: TableOverlayReceive}),
	}
	peers := slices.Clone(o.Peers)
	for i := range peers {
		peers[i].Dst, peers[i].Remote = peers[i].Dst.Masked(), peers[i].Remote.Unmap()
	}
	slices.SortFunc(peers, func(a, b OverlayPeer) int {
		return cmp.Or(comparePrefix(a.Dst, b.Dst), a.Remote.Compare(b.Remote))
	})
	peers = slices.Compact(peers)
	var remotes []netip.Addr
	for _, p := range peers {
		if !p.Dst.IsValid() || !p.Remote.IsValid() {
			continue
		}
		as := openflow.Actions{}
		as = append(as, openflow.LoadTunDst(p.Remote)...)
		as = append(as, openflow.Load{Value: OverlayVNI, Dst: openflow.FieldTunID.All()}, openflow.Output{Port: o.TunnelPort})
		m := openflow.Match{}.EthType(ethOf(p.Dst.Addr())).IPDst(p.Dst)
		reply := openflow.CTTrk | openflow.CTRpl
		out = append(out, flow(c, TableOverlaySend, PriorityOverlayPeer, m, as...),
			flow(c, TablePortmapReplyRestore, PriorityOverlayReply, m.CTState(reply, reply), as...))
		remotes = append(remotes, p.Remote)
	}
	slices.SortFunc(remotes, netip.Addr.Compare)
	remotes = slices.Compact(remotes)
	local := slices.Clone(o.Local)
	for i := range local {
		local[i] = local[i].Masked()
	}
	slices.SortFunc(local, comparePrefix)
	local = slices.Compact(local)
	for _, r := range remotes {
		for _, l := range local {
			if !l.IsValid() {
				continue
			}
			out = append(out, flow(c, TableOverlayReceive, PriorityOverlayPeer,
				openflow.Match{}.TunSrc(r).TunID(OverlayVNI).EthType(ethOf(l.Addr())).IPDst(l),
				openflow.SetField{Field: openflow.FieldEthDst, MAC: o.BridgeMAC}, openflow.Output{Port: openflow.PortLocal}))
		}
	}
	out = append(out,
		flow(c, TableOverlaySend, PriorityOverlayDrop, openflow.Match{}),
		flow(c, TableOverlayReceive, PriorityOverlayDrop, openflow.Match{}))
	return out
}

// OverlayBundle returns the bundle that replaces the overlay's flows of a
// bridge with those of o (none: it removes them).
func OverlayBundle(o Overlay) openflow.Bundle {
	b := openflow.Bundle{OverlayCookie().Delete()}
	for _, f := range OverlayFlows(o) {
		b = append(b, f)
	}
	return b
}

// comparePrefix orders prefixes IPv4 first, then by address and length.
func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(cmp.Compare(a.Addr().BitLen(), b.Addr().BitLen()), a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}
