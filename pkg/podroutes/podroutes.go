// Package podroutes keeps the node's routes to the pod ranges of the other
// nodes of a cluster (host-gw): each pod range of a peer is routed via that
// peer's node address of the same family, as an onlink next hop on the link
// that carries this node's own address. That needs every node's uplink on
// one L2 segment (the next hop is resolved by ARP/ND on the link).
//
// Plan turns the facts (the peers) into a deterministic list of routes and
// does no I/O; Table.Sync applies a list: it replaces what differs and
// removes every route of its own (by its protocol number in its table) that
// the list does not hold, and nothing else (a destination that has a route
// of another protocol is left to it).
package podroutes

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Peer is another node: its name, its pod ranges and its node addresses
// (Kubernetes: spec.podCIDRs and the InternalIP entries of status.addresses).
type Peer struct {
	Name     string
	PodCIDRs []netip.Prefix
	Addrs    []netip.Addr
}

// Route is one route to a peer's pod range.
type Route struct {
	Dst  netip.Prefix
	Via  netip.Addr
	Node string // the peer it is for (not on the wire)
}

func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// Skipped is a pod range of a peer that Plan cannot route, and why.
type Skipped struct {
	Node   string
	Dst    netip.Prefix
	Reason string
}

func (s Skipped) String() string { return "node " + s.Node + ": " + s.Dst.String() + ": " + s.Reason }

// Plan returns the routes from node self to the pod ranges of peers,
// sorted by destination, and the ranges it cannot route: a range without a
// node address of its family (on the peer or on self), one whose next hop
// is an address of self,
// one that overlaps a pod range of self, or one that another peer's range
// overlaps (both are skipped: which node holds the pods is not known).
func Plan(self Peer, peers []Peer) ([]Route, []Skipped) {
	var routes []Route
	var skipped []Skipped
	for _, p := range peers {
		for _, dst := range p.PodCIDRs {
			dst = dst.Masked()
			if slices.ContainsFunc(self.PodCIDRs, dst.Overlaps) {
				skipped = append(skipped, Skipped{p.Name, dst, "overlaps this node's pod range"})
				continue
			}
			i := slices.IndexFunc(p.Addrs, func(a netip.Addr) bool { return a.Is4() == dst.Addr().Is4() && !a.Is4In6() })
			if i < 0 {
				skipped = append(skipped, Skipped{p.Name, dst, "the node has no InternalIP of its family"})
				continue
			}
			if !slices.ContainsFunc(self.Addrs, func(a netip.Addr) bool { return a.Is4() == dst.Addr().Is4() }) {
				skipped = append(skipped, Skipped{p.Name, dst, "this node has no InternalIP of its family"})
				continue
			}
			if slices.Contains(self.Addrs, p.Addrs[i]) {
				skipped = append(skipped, Skipped{p.Name, dst, "its InternalIP " + p.Addrs[i].String() + " is this node's"})
				continue
			}
			routes = append(routes, Route{Dst: dst, Via: p.Addrs[i], Node: p.Name})
		}
	}
	// Overlapping ranges of two peers: neither is routed.
	var out []Route
	for i, r := range routes {
		clash := ""
		for j, o := range routes {
			if i != j && r.Dst.Overlaps(o.Dst) {
				clash = o.Node
			}
		}
		if clash != "" {
			skipped = append(skipped, Skipped{r.Node, r.Dst, "overlaps a pod range of node " + clash})
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Route) int {
		return cmp.Or(cmp.Compare(a.Dst.Addr().BitLen(), b.Dst.Addr().BitLen()), a.Dst.Addr().Compare(b.Dst.Addr()), cmp.Compare(a.Dst.Bits(), b.Dst.Bits()))
	})
	return out, skipped
}

// Table is where the routes go: routing table Table (unix.RT_TABLE_MAIN
// when 0), marked with protocol number Protocol, which only this suite's
// routes carry: a route of another protocol is never touched.
type Table struct {
	Table    int
	Protocol int
}

// DefaultProtocol is the protocol number of the routes: unassigned in
// /etc/iproute2/rt_protos (`ip route show proto 157`).
const DefaultProtocol = 157

func (t Table) table() int {
	if t.Table == 0 {
		return unix.RT_TABLE_MAIN
	}
	return t.Table
}

// Installed is a route of ours found on the node.
type Installed struct {
	Route
	LinkIndex int
}

// List returns the routes of ours (both families).
func (t Table) List() ([]Installed, error) {
	if t.Protocol <= 0 || t.Protocol > 255 {
		return nil, fmt.Errorf("route protocol %d: want 1-255", t.Protocol)
	}
	filter := &netlink.Route{Table: t.table(), Protocol: netlink.RouteProtocol(t.Protocol)}
	var out []Installed
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return nil, fmt.Errorf("listing routes of protocol %d in table %d: %w", t.Protocol, t.table(), err)
		}
		for _, r := range rs {
			in := Installed{LinkIndex: r.LinkIndex}
			if r.Dst != nil {
				a, _ := netip.AddrFromSlice(r.Dst.IP)
				ones, _ := r.Dst.Mask.Size()
				in.Dst = netip.PrefixFrom(a.Unmap(), ones)
			}
			if a, ok := netip.AddrFromSlice(r.Gw); ok {
				in.Via = a.Unmap()
			}
			out = append(out, in)
		}
	}
	return out, nil
}

// Result is what Sync did.
type Result struct {
	Changed, Removed int
	// Foreign are the routes of want not installed because a route of
	// another protocol has their destination in the table: the operator's
	// (or another program's), which wins.
	Foreign []Route
}

// Sync makes the routes of ours exactly want, each on the link of index
// linkIndex[family] (true: IPv4): it adds or replaces what is missing or
// differs, then removes every other route of ours. A destination that
// holds a route of another protocol is left to it.
func (t Table) Sync(want []Route, linkIndex map[bool]int) (Result, error) {
	var res Result
	have, err := t.List()
	if err != nil {
		return res, err
	}
	var errs []error
	for _, r := range want {
		idx, ok := linkIndex[r.Dst.Addr().Is4()]
		if !ok {
			errs = append(errs, fmt.Errorf("route %s: no link for its family", r))
			continue
		}
		if slices.ContainsFunc(have, func(h Installed) bool { return h.Dst == r.Dst && h.Via == r.Via && h.LinkIndex == idx }) {
			continue
		}
		if foreign, err := t.foreign(r.Dst); err != nil {
			errs = append(errs, err)
			continue
		} else if foreign {
			res.Foreign = append(res.Foreign, r)
			continue
		}
		if err := netlink.RouteReplace(t.netlinkRoute(r, idx)); err != nil {
			errs = append(errs, fmt.Errorf("route %s (node %s): %w", r, r.Node, err))
			continue
		}
		res.Changed++
	}
	for _, h := range have {
		if slices.ContainsFunc(want, func(r Route) bool { return r.Dst == h.Dst }) {
			continue // replaced above, if it differed
		}
		if err := t.del(h); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Removed++
	}
	return res, errors.Join(errs...)
}

// foreign reports whether the table holds a route to dst of another protocol.
func (t Table) foreign(dst netip.Prefix) (bool, error) {
	fam := netlink.FAMILY_V6
	if dst.Addr().Is4() {
		fam = netlink.FAMILY_V4
	}
	ipn := &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}
	rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: t.table(), Dst: ipn}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
	if err != nil {
		return false, fmt.Errorf("listing routes to %s: %w", dst, err)
	}
	return slices.ContainsFunc(rs, func(r netlink.Route) bool { return int(r.Protocol) != t.Protocol }), nil
}

// RemoveAll removes every route of ours.
func (t Table) RemoveAll() (int, error) {
	have, err := t.List()
	if err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, h := range have {
		if err := t.del(h); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (t Table) del(h Installed) error {
	if err := netlink.RouteDel(t.netlinkRoute(h.Route, h.LinkIndex)); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("removing route %s: %w", h.Route, err)
	}
	return nil
}

func (t Table) netlinkRoute(r Route, linkIndex int) *netlink.Route {
	nr := &netlink.Route{LinkIndex: linkIndex, Table: t.table(), Protocol: netlink.RouteProtocol(t.Protocol),
		Scope: netlink.SCOPE_UNIVERSE}
	if r.Dst.IsValid() { // else a default route (of our protocol, found by List)
		nr.Dst = &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())}
	}
	if r.Via.IsValid() {
		nr.Gw = r.Via.AsSlice()
		nr.Flags = int(netlink.FLAG_ONLINK)
	}
	return nr
}

// LinkOf returns the index of the link that holds address a (the node's own
// address: the peers' next hops are on its segment).
func LinkOf(a netip.Addr) (int, error) {
	fam := netlink.FAMILY_V6
	if a.Is4() {
		fam = netlink.FAMILY_V4
	}
	addrs, err := netlink.AddrList(nil, fam)
	if err != nil {
		return 0, fmt.Errorf("listing addresses: %w", err)
	}
	for _, ad := range addrs {
		if ip, ok := netip.AddrFromSlice(ad.IP); ok && ip.Unmap() == a {
			return ad.LinkIndex, nil
		}
	}
	return 0, fmt.Errorf("no link holds the node address %s", a)
}
