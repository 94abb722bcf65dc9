package agent

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/overlay"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
)

// overlayTimeout bounds what a route pass does with OVSDB and the bridge
// for the overlay.
const overlayTimeout = 30 * time.Second

// overlayPass is what one route pass does with the tunnel: apply it before
// the routes into it are put in (active), or withdraw it after they went.
type overlayPass struct {
	active bool
	cli    *ovsdb.Client
	apply  func() error
	undo   func() error
	close  func()
}

func (p *overlayPass) withdraw() error { return p.undo() }

// planOverlay sorts the host-gw routes want (podroutes.Plan's, to the
// peers peers) into those that stay and those through the tunnel
// (overlay.Split), by Config.Overlay and this node's facts me. Without
// OVSDB, or with overlay.None, the routes are want as they are (the
// overlay of an earlier configuration is withdrawn, where OVSDB shows
// one). An explicit geneve or vxlan that this node cannot have is an
// error: the routes are kept as they are.
func (a *Agent) planOverlay(me podroutes.Peer, want []podroutes.Route, peers []podroutes.Peer) ([]podroutes.Route, *overlayPass, error) {
	mode := a.cfg.Overlay
	if mode == "" {
		mode = overlay.Hybrid
	}
	explicit := mode == overlay.Geneve || mode == overlay.VXLAN
	if a.cfg.OVSDB.IsZero() {
		if explicit {
			return nil, nil, fmt.Errorf("overlay %s needs the node's OVSDB (-ovsdb): the routes are kept as they are", mode)
		}
		a.mtu.Store(0)
		return want, nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), overlayTimeout)
	cli, err := ovsdb.Dial(ctx, a.cfg.OVSDB)
	if err != nil {
		cancel()
		if explicit || a.tunnelled.Load() {
			return nil, nil, fmt.Errorf("overlay %s: %w: the routes are kept as they are", mode, err)
		}
		// Nothing tunnelled so far: host-gw, as without the overlay.
		a.say("overlay", fmt.Sprintf("%s: cannot tell which Nodes are on other subnets (%v): host-gw to every Node", mode, err))
		return want, nil, nil
	}
	pass := &overlayPass{cli: cli, close: func() { cli.Close(); cancel() }}
	pass.undo = func() error {
		had, err := overlay.Withdraw(ctx, cli, a.cfg.OVSDB)
		if had && err == nil {
			a.logf("overlay: tunnel withdrawn")
		}
		return err
	}
	facts, err := overlay.Discover(ctx, cli, mode, me.Addrs, me.PodCIDRs)
	if err != nil {
		pass.close()
		return nil, nil, fmt.Errorf("overlay %s: this node's facts: %w: the routes are kept as they are", mode, err)
	}
	plan := overlay.Split(facts, want, peers)
	pass.active = facts.Active(plan)
	if explicit && !pass.active {
		pass.close()
		return nil, nil, fmt.Errorf("overlay %s: this node's InternalIPs %v are not on an Open vSwitch bridge's interface: the routes are kept as they are", mode, me.Addrs)
	}
	switch {
	case mode == overlay.None:
	case !facts.CanTell():
		a.say("overlay", fmt.Sprintf("%s: cannot tell which Nodes are on other subnets (no InternalIP with its subnet on an Open vSwitch bridge's interface): host-gw to every Node", mode))
	case pass.active:
		a.say("overlay", fmt.Sprintf("%s: %d pod range(s) through the tunnel from %s on bridge %s, %d by host-gw", mode, len(plan.Tunnel), facts.Local, facts.Bridge, len(plan.HostGW)))
	default:
		a.say("overlay", fmt.Sprintf("%s: every Node on this node's subnet %s: host-gw", mode, facts.Local.Masked()))
	}
	pass.apply = func() error {
		if err := overlay.Apply(ctx, cli, a.cfg.OVSDB, facts, plan); err != nil {
			return err
		}
		a.tunnelled.Store(true)
		return nil
	}
	if mtu := int64(overlay.ConflistMTU(facts, plan)); a.mtu.Swap(mtu) != mtu {
		a.trigger() // the conflist follows on the next pass
	}
	routes := append(slices.Clone(plan.HostGW), plan.Tunnel...)
	slices.SortFunc(routes, func(a, b podroutes.Route) int {
		return cmp.Or(cmp.Compare(a.Dst.Addr().BitLen(), b.Dst.Addr().BitLen()), a.Dst.Addr().Compare(b.Dst.Addr()), cmp.Compare(a.Dst.Bits(), b.Dst.Bits()))
	})
	return routes, pass, nil
}
