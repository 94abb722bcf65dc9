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
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Peer is a node: its name, when its Node object was created, its pod
// ranges and its node addresses (Kubernetes: metadata.creationTimestamp,
// spec.podCIDRs and the InternalIP entries of status.addresses).
type Peer struct {
	Name     string
	Created  time.Time
	PodCIDRs []netip.Prefix
	Addrs    []netip.Addr
}

// older orders peers by age: the Node created first, then by name (every
// node of the cluster computes the same order from the same objects).
func older(a, b Peer) int {
	return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Name, b.Name))
}

// Route is one route to a peer's pod range.
type Route struct {
	Dst  netip.Prefix
	Via  netip.Addr
	Node string // the peer it is for (not on the wire)
	// Link, when set, is the index of the link the route goes out of
	// (else the link Sync is given for its family), and MTU its mtu
	// metric (0: none, the link's): an overlay route's (pkg/overlay).
	Link, MTU int
}

func (r Route) String() string {
	s := r.Dst.String() + " via " + r.Via.String()
	if r.MTU > 0 {
		s += fmt.Sprintf(" mtu %d", r.MTU)
	}
	return s
}

// Why a pod range is not routed (Skipped.Kind), for the metrics.
const (
	SkipFamily   = "family"   // no InternalIP of the range's family, on the peer or on this node
	SkipSelf     = "self"     // it overlaps this node's pod ranges, or its next hop is this node's
	SkipLocal    = "local"    // it overlaps a network of this node (an address's subnet, a connected route)
	SkipNodeAddr = "nodeaddr" // it holds a node's InternalIP
	SkipConflict = "conflict" // it overlaps the range of an older node
)

// Skipped is a pod range of a peer that Plan cannot route, and why.
type Skipped struct {
	Node   string
	Dst    netip.Prefix
	Kind   string // Skip*
	Reason string
}

func (s Skipped) String() string { return "node " + s.Node + ": " + s.Dst.String() + ": " + s.Reason }

// Plan returns the routes from node self to the pod ranges of peers,
// sorted by destination, and the ranges it will not route. local are this
// node's own networks (the subnets of its addresses, its connected routes:
// Local): a peer's range is a claim that a Node object makes, and a range
// that overlaps one of them, or holds a node's InternalIP, would steer
// this node's own traffic (to its segment, its API server, another node) to
// that peer. Not routed either: a range without a node address of its
// family (on the peer or on self), one whose next hop is an address of
// self, one that overlaps a pod range of self. Of two peers' ranges that
// overlap, the older Node's is routed (creationTimestamp, then name: every
// node picks the same one) and the other is skipped; a range skipped for
// another reason claims nothing.
func Plan(self Peer, local []netip.Prefix, peers []Peer) ([]Route, []Skipped) {
	var skipped []Skipped
	skip := func(p Peer, dst netip.Prefix, kind, reason string) {
		skipped = append(skipped, Skipped{p.Name, dst, kind, reason})
	}
	nodeAddrs := map[netip.Addr]string{}
	for _, a := range self.Addrs {
		nodeAddrs[a] = self.Name
	}
	for _, p := range peers {
		for _, a := range p.Addrs {
			if _, ok := nodeAddrs[a]; !ok {
				nodeAddrs[a] = p.Name
			}
		}
	}
	peers = slices.Clone(peers)
	slices.SortStableFunc(peers, older)
	var out []Route
	for _, p := range peers {
		for _, dst := range p.PodCIDRs {
			dst = dst.Masked()
			if slices.ContainsFunc(self.PodCIDRs, dst.Overlaps) {
				skip(p, dst, SkipSelf, "overlaps this node's pod range")
				continue
			}
			if i := slices.IndexFunc(local, dst.Overlaps); i >= 0 {
				skip(p, dst, SkipLocal, "overlaps "+local[i].Masked().String()+", a network of this node")
				continue
			}
			if a, ok := holdsNodeAddr(dst, nodeAddrs); ok {
				skip(p, dst, SkipNodeAddr, "holds "+a.String()+", the InternalIP of node "+nodeAddrs[a])
				continue
			}
			i := slices.IndexFunc(p.Addrs, func(a netip.Addr) bool { return a.Is4() == dst.Addr().Is4() && !a.Is4In6() })
			if i < 0 {
				skip(p, dst, SkipFamily, "the node has no InternalIP of its family")
				continue
			}
			if !slices.ContainsFunc(self.Addrs, func(a netip.Addr) bool { return a.Is4() == dst.Addr().Is4() }) {
				skip(p, dst, SkipFamily, "this node has no InternalIP of its family")
				continue
			}
			if slices.Contains(self.Addrs, p.Addrs[i]) {
				skip(p, dst, SkipSelf, "its InternalIP "+p.Addrs[i].String()+" is this node's")
				continue
			}
			if j := slices.IndexFunc(out, func(r Route) bool { return r.Dst.Overlaps(dst) }); j >= 0 {
				skip(p, dst, SkipConflict, "overlaps "+out[j].Dst.String()+" of node "+out[j].Node+", an older Node")
				continue
			}
			out = append(out, Route{Dst: dst, Via: p.Addrs[i], Node: p.Name})
		}
	}
	slices.SortFunc(out, func(a, b Route) int {
		return cmp.Or(cmp.Compare(a.Dst.Addr().BitLen(), b.Dst.Addr().BitLen()), a.Dst.Addr().Compare(b.Dst.Addr()), cmp.Compare(a.Dst.Bits(), b.Dst.Bits()))
	})
	return out, skipped
}

// holdsNodeAddr returns a node address inside dst (the smallest, for a
// message that reads the same on every pass).
func holdsNodeAddr(dst netip.Prefix, addrs map[netip.Addr]string) (netip.Addr, bool) {
	var found netip.Addr
	for a := range addrs {
		if dst.Contains(a) && (!found.IsValid() || a.Less(found)) {
			found = a
		}
	}
	return found, found.IsValid()
}

// Local returns this node's own networks: the subnet of every address of
// every link (loopback and link-local included) and the destination of
// every unicast route of the main table that has no gateway (connected,
// on a link), both families, but ours. Plan routes no peer's range into them.
func Local() ([]netip.Prefix, error) {
	var out []netip.Prefix
	addrs, err := netlinksafe.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	for _, ad := range addrs {
		if p, ok := prefixOf(ad.IPNet); ok {
			out = append(out, p.Masked())
		}
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlinksafe.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("listing routes: %w", err)
		}
		for _, r := range rs {
			if r.Type != unix.RTN_UNICAST || r.Gw != nil || len(r.MultiPath) > 0 || r.Dst == nil || int(r.Protocol) == DefaultProtocol {
				continue // via a gateway (a default route, a peer's range), or a blackhole: not a network on a link of this node
			}
			if p, ok := prefixOf(r.Dst); ok && p.Bits() > 0 {
				out = append(out, p.Masked())
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
	return slices.Compact(out), nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false
	}
	if a.Is4In6() && bits == 32 {
		a = a.Unmap()
	}
	return netip.PrefixFrom(a, ones), true
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
		rs, err := netlinksafe.RouteListFiltered(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
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
			in.MTU = r.MTU
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
		if r.Link != 0 {
			idx, ok = r.Link, true
		}
		if !ok {
			errs = append(errs, fmt.Errorf("route %s: no link for its family", r))
			continue
		}
		if slices.ContainsFunc(have, func(h Installed) bool {
			return h.Dst == r.Dst && h.Via == r.Via && h.LinkIndex == idx && h.MTU == r.MTU
		}) {
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
	rs, err := netlinksafe.RouteListFiltered(fam, &netlink.Route{Table: t.table(), Dst: ipn}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
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
		Scope: netlink.SCOPE_UNIVERSE, MTU: r.MTU}
	if r.Dst.IsValid() { // else a default route (of our protocol, found by List)
		nr.Dst = &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())}
	}
	if r.Via.IsValid() {
		nr.Gw = r.Via.AsSlice()
		nr.Flags = int(netlink.FLAG_ONLINK)
	}
	return nr
}

// HostAddrs returns this host's own addresses for a host that is not a
// node (no InternalIP to read): the global unicast addresses of the link
// of each family's default route in the main table, IPv4 first. A family
// without a default route has none.
func HostAddrs() ([]netip.Addr, error) {
	var out []netip.Addr
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlinksafe.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("listing routes: %w", err)
		}
		idx := 0
		for _, r := range rs {
			if r.Type != unix.RTN_UNICAST || (r.Dst != nil && !isDefault(r.Dst)) {
				continue
			}
			if idx = r.LinkIndex; idx == 0 && len(r.MultiPath) > 0 {
				idx = r.MultiPath[0].LinkIndex
			}
			if idx != 0 {
				break
			}
		}
		if idx == 0 {
			continue
		}
		addrs, err := netlinksafe.AddrList(nil, fam)
		if err != nil {
			return nil, fmt.Errorf("listing addresses: %w", err)
		}
		for _, ad := range addrs {
			if a, ok := netip.AddrFromSlice(ad.IP); ok && ad.LinkIndex == idx && a.Unmap().IsGlobalUnicast() {
				out = append(out, a.Unmap())
			}
		}
	}
	return out, nil
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0
}

// LinkOn returns the index of the link with an address whose subnet
// holds a (a next hop on one of this host's networks), or 0 where no
// network of this host holds it.
func LinkOn(a netip.Addr) (int, error) {
	return linkWith(a, func(p netip.Prefix) bool { return !p.IsSingleIP() && p.Masked().Contains(a) })
}

// LinkOf returns the index of the link that holds address a (the node's own
// address: the peers' next hops are on its segment).
func LinkOf(a netip.Addr) (int, error) {
	idx, err := linkWith(a, func(p netip.Prefix) bool { return p.Addr() == a })
	if err == nil && idx == 0 {
		err = fmt.Errorf("no link holds the node address %s", a)
	}
	return idx, err
}

// linkWith returns the index of the link of the first address of a's
// family (with its prefix length) that match takes, 0 for none.
func linkWith(a netip.Addr, match func(netip.Prefix) bool) (int, error) {
	fam := netlink.FAMILY_V6
	if a.Is4() {
		fam = netlink.FAMILY_V4
	}
	addrs, err := netlinksafe.AddrList(nil, fam)
	if err != nil {
		return 0, fmt.Errorf("listing addresses: %w", err)
	}
	for _, ad := range addrs {
		ip, ok := netip.AddrFromSlice(ad.IP)
		ones, _ := ad.Mask.Size()
		if ok && match(netip.PrefixFrom(ip.Unmap(), ones)) {
			return ad.LinkIndex, nil
		}
	}
	return 0, nil
}
