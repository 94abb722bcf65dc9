package overlay

import (
	"context"
	"fmt"
	"slices"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
)

// Result is what Sync found and did.
type Result struct {
	Facts  Facts
	Plan   Plan
	Active bool // the tunnel is in (Facts.Active)
	// MTU is the pods' MTU the conflist gives them (ConflistMTU; 0: the
	// template's).
	MTU       int
	Withdrawn bool // a tunnel port was there and went
}

// Sync is one route pass of a node with the overlay. Of podroutes.Plan's
// host-gw routes to peers, it tunnels those Split says, for c and this
// node's InternalIPs and pod ranges me (Discover reads the rest from the
// node and OVSDB cli), and calls install with every route of the pass
// (the caller's podroutes.Table.Sync, with its links): after the tunnel
// port, its record, its flows and the next hops' neighbours are in
// (Apply), and before they go (Withdraw) when nothing is tunnelled any
// more. Where an explicit Geneve or VXLAN cannot be had, or the tunnel
// cannot be put in, it returns an error without calling install: the
// routes are kept as they are.
func Sync(ctx context.Context, cli *ovsdb.Client, ovsdbEndpoint endpoint.Endpoint, c Config, me podroutes.Peer,
	routes []podroutes.Route, peers []podroutes.Peer, install func([]podroutes.Route) error) (Result, error) {
	var res Result
	mode := c.Mode
	f, err := Discover(ctx, cli, c, me.Addrs, me.PodCIDRs)
	if err != nil {
		return res, fmt.Errorf("overlay %s: this node's facts: %w", mode, err)
	}
	p := Split(f, routes, peers)
	res.Facts, res.Plan, res.Active, res.MTU = f, p, f.Active(p), ConflistMTU(f, p)
	if (mode == Geneve || mode == VXLAN) && !res.Active {
		return res, fmt.Errorf("overlay %s: no InternalIP of this node's %v of the underlay's family (%s) is on an Open vSwitch bridge's interface", mode, me.Addrs, c.Underlay)
	}
	if res.Active {
		if err := Apply(ctx, cli, ovsdbEndpoint, f, p); err != nil {
			return res, err
		}
	}
	all := append(slices.Clone(p.HostGW), p.Tunnel...)
	slices.SortFunc(all, func(a, b podroutes.Route) int { return comparePrefix(a.Dst, b.Dst) })
	if err := install(all); err != nil {
		return res, err
	}
	if !res.Active {
		res.Withdrawn, err = Withdraw(ctx, cli, ovsdbEndpoint)
	}
	return res, err
}
