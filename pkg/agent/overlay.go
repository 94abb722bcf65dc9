package agent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/overlay"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// overlayTimeout bounds what a route pass does with OVSDB and the bridge
// for the overlay.
const overlayTimeout = 30 * time.Second

// syncOverlay is the route pass of a Node with the overlay (overlay.Sync):
// install (the routes' sync) is called with the routes want less those
// that go through the tunnel and with the routes into it. Without OVSDB it
// is install(want) with overlay.None and overlay.Hybrid (host-gw, as
// without the overlay), and an error with an explicit tunnel type: the
// routes are kept as they are. So it is when OVSDB does not answer while
// something is tunnelled.
func (a *Agent) syncOverlay(me podroutes.Peer, want []podroutes.Route, peers []podroutes.Peer, install func([]podroutes.Route) error) error {
	mode := a.cfg.Overlay
	if mode == "" {
		mode = overlay.Hybrid
	}
	explicit := mode == overlay.Geneve || mode == overlay.VXLAN
	fail := func(err error) error {
		err = fmt.Errorf("%w: the routes are kept as they are", err)
		a.say("overlay", "error: "+err.Error())
		return err
	}
	if a.cfg.OVSDB.IsZero() {
		if explicit {
			return fail(fmt.Errorf("overlay %s needs the node's OVSDB (-ovsdb)", mode))
		}
		a.setMTU(0)
		return install(want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), overlayTimeout)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, a.cfg.OVSDB)
	if err != nil {
		if explicit || a.tunnelled.Load() {
			return fail(fmt.Errorf("overlay %s: %w", mode, err))
		}
		a.say("overlay", fmt.Sprintf("%s: cannot tell which Nodes are on other subnets (%v): host-gw to every Node", mode, err))
		return install(want)
	}
	defer cli.Close()
	installed := false
	res, err := overlay.Sync(ctx, cli, a.cfg.OVSDB, overlay.Config{Mode: mode, Underlay: a.cfg.Underlay}, me, want, peers, func(routes []podroutes.Route) error {
		installed = true
		return install(routes)
	})
	if res.Withdrawn && err == nil {
		a.logf("overlay: tunnel withdrawn")
	}
	if err != nil && installed {
		a.say("overlay", "error: "+err.Error())
		return err
	}
	if err != nil {
		return fail(err)
	}
	a.tunnelled.Store(res.Active)
	a.setMTU(res.MTU)
	f := res.Facts
	if res.Active {
		a.warmTunnel(ctx, f, res.Plan)
	}
	switch {
	case mode == overlay.None:
	case !f.CanTell() && !res.Active:
		a.say("overlay", fmt.Sprintf("%s: cannot tell which Nodes are on other subnets (no InternalIP with its subnet on an Open vSwitch bridge's interface): host-gw to every Node", mode))
	case res.Active:
		a.say("overlay", fmt.Sprintf("%s: %d pod range(s) through the tunnel from %s on bridge %s, %d by host-gw", mode, len(res.Plan.Tunnel), f.Local.Addr(), f.Bridge, len(res.Plan.HostGW)))
	default:
		a.say("overlay", fmt.Sprintf("%s: every Node on this node's subnet %s: host-gw", mode, f.Local.Masked()))
	}
	return nil
}

// setMTU records the pods' MTU of the overlay; a change asks for a pass,
// which writes the conflist with it.
func (a *Agent) setMTU(mtu int) {
	if a.mtu.Swap(int64(mtu)) != int64(mtu) {
		a.trigger()
	}
}

// warmTunnel puts the next hops towards the tunnelled peers into the
// userspace datapath's tunnel neighbour cache (overlay.WarmNeighbours),
// so that the first packet to a peer is not the one that resolves it. The
// kernel datapath resolves them in the kernel; nothing to do there.
// The bridge's datapath is the one Discover read (no OVSDB round trip more).
func (a *Agent) warmTunnel(ctx context.Context, f overlay.Facts, p overlay.Plan) {
	if f.Datapath != "netdev" {
		return
	}
	var remotes []netip.Addr
	for _, peer := range p.Peers {
		if !slices.Contains(remotes, peer.Remote) {
			remotes = append(remotes, peer.Remote)
		}
	}
	sock, err := unixctl.Find(a.cfg.OVSDB, a.cfg.VswitchdControl)
	if err == nil {
		var n int
		if n, err = overlay.WarmNeighbours(ctx, sock, f.Bridge, remotes); n > 0 {
			a.logf("overlay: %d next hop(s) put into the tunnels' neighbour cache", n)
		}
	}
	if err != nil {
		a.say("overlay neighbours", "the tunnels' next hops: "+err.Error()+" (the first packet to such a peer resolves it, and is lost)")
		return
	}
	a.say("overlay neighbours", fmt.Sprintf("the next hops towards %d tunnelled node(s) are in the tunnels' neighbour cache", len(remotes)))
}
