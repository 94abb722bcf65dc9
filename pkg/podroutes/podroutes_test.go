package podroutes

import (
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ovsflow/ovs-cni/test/framework"
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

func strs[T interface{ String() string }](v []T) []string {
	var out []string
	for _, x := range v {
		out = append(out, x.String())
	}
	return out
}

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func TestPlan(t *testing.T) {
	self := Peer{"a", t0, pfx("198.51.100.0/25", "2001:db8:1::/64"), addrs("203.0.113.1", "2001:db8:f::1")}
	for _, tc := range []struct {
		name        string
		peers       []Peer
		want, wantS []string
	}{
		{"dual stack", []Peer{{"b", t0, pfx("2001:db8:2::/64", "198.51.100.128/25"), addrs("203.0.113.2", "2001:db8:f::2")}},
			[]string{"198.51.100.128/25 via 203.0.113.2", "2001:db8:2::/64 via 2001:db8:f::2"}, nil},
		{"the next hop of the range's family", []Peer{{"b", t0, pfx("2001:db8:2::/64"), addrs("203.0.113.2")}},
			nil, []string{"node b: 2001:db8:2::/64: the node has no InternalIP of its family"}},
		{"a range that is this node's", []Peer{{"b", t0, pfx("198.51.100.0/26"), addrs("203.0.113.2")}},
			nil, []string{"node b: 198.51.100.0/26: overlaps this node's pod range"}},
		{"two peers of one age claim one range: the first by name", []Peer{
			{"c", t0, pfx("192.0.2.0/27"), addrs("203.0.113.3")}, {"b", t0, pfx("192.0.2.0/26"), addrs("203.0.113.2")},
			{"d", t0, pfx("192.0.2.64/26"), addrs("203.0.113.4")}},
			[]string{"192.0.2.0/26 via 203.0.113.2", "192.0.2.64/26 via 203.0.113.4"},
			[]string{"node c: 192.0.2.0/27: overlaps 192.0.2.0/26 of node b, an older Node"}},
		{"host bits are masked", []Peer{{"b", t0, pfx("192.0.2.5/26"), addrs("203.0.113.2")}}, []string{"192.0.2.0/26 via 203.0.113.2"}, nil},
		{"no peers", nil, nil, nil},
		{"a peer with this node's address", []Peer{{"b", t0, pfx("192.0.2.0/26"), addrs("203.0.113.1")}},
			nil, []string{"node b: 192.0.2.0/26: its InternalIP 203.0.113.1 is this node's"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped := Plan(self, nil, tc.peers)
			if g := strs(got); !slices.Equal(g, tc.want) {
				t.Errorf("routes: got %q, want %q", g, tc.want)
			}
			if g := strs(skipped); !slices.Equal(g, tc.wantS) {
				t.Errorf("skipped: got %q, want %q", g, tc.wantS)
			}
		})
	}
}

// TestPlanClaims: a peer's range is a claim a Node object makes. Of
// overlapping claims the older Node's is routed (on every node alike,
// whatever the order of the list); a claim into this node's own networks
// (its segment, its API server, another node's address) is routed
// nowhere, and claims nothing against a later valid one.
func TestPlanClaims(t *testing.T) {
	self := Peer{"a", t0, pfx("198.51.100.0/26"), addrs("203.0.113.1", "2001:db8:f::1")}
	local := pfx("203.0.113.0/24", "2001:db8:f::/64", "127.0.0.0/8", "::1/128", "fe80::/64", "198.18.0.1/32")
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	real := []Peer{
		{"b", at(1), pfx("192.0.2.0/26", "2001:db8:2::/64"), addrs("203.0.113.2", "2001:db8:f::2")},
		{"c", at(2), pfx("192.0.2.64/26"), addrs("203.0.113.3")},
	}
	realRoutes := []string{"192.0.2.0/26 via 203.0.113.2", "192.0.2.64/26 via 203.0.113.3", "2001:db8:2::/64 via 2001:db8:f::2"}
	for _, tc := range []struct {
		name        string
		hostile     []Peer
		want, wantS []string
	}{
		{"a newer Node claims a peer's range, more or less specific", []Peer{
			{"x", at(3), pfx("192.0.2.0/27", "192.0.2.0/24", "2001:db8:2::/48"), addrs("203.0.113.66", "2001:db8:f::66")}},
			realRoutes, []string{
				"node x: 192.0.2.0/27: overlaps 192.0.2.0/26 of node b, an older Node",
				"node x: 192.0.2.0/24: overlaps 192.0.2.0/26 of node b, an older Node",
				"node x: 2001:db8:2::/48: overlaps 2001:db8:2::/64 of node b, an older Node"}},
		{"a range inside the node subnet", []Peer{{"x", at(0), pfx("203.0.113.128/25", "2001:db8:f::/112"), addrs("203.0.113.66", "2001:db8:f::66")}},
			realRoutes, []string{
				"node x: 203.0.113.128/25: overlaps 203.0.113.0/24, a network of this node",
				"node x: 2001:db8:f::/112: overlaps 2001:db8:f::/64, a network of this node"}},
		{"a /32 of the API server, the default route, loopback, link-local", []Peer{
			{"x", at(0), pfx("198.18.0.1/32", "0.0.0.0/0", "127.0.0.0/16", "fe80::/10"), addrs("203.0.113.66", "2001:db8:f::66")}},
			realRoutes, []string{
				"node x: 198.18.0.1/32: overlaps 198.18.0.1/32, a network of this node",
				"node x: 0.0.0.0/0: overlaps this node's pod range",
				"node x: 127.0.0.0/16: overlaps 127.0.0.0/8, a network of this node",
				"node x: fe80::/10: overlaps fe80::/64, a network of this node"}},
		{"a range that holds another node's address", []Peer{
			{"x", at(0), pfx("198.51.100.200/32"), addrs("203.0.113.66")},
			{"y", at(9), pfx("192.0.2.128/26"), addrs("198.51.100.200")}},
			append(slices.Clone(realRoutes[:2]), "192.0.2.128/26 via 198.51.100.200", realRoutes[2]),
			[]string{"node x: 198.51.100.200/32: holds 198.51.100.200, the InternalIP of node y"}},
		{"an older claim that is refused claims nothing", []Peer{
			{"x", at(0), pfx("192.0.2.0/24"), addrs("2001:db8:f::66")}},
			realRoutes, []string{"node x: 192.0.2.0/24: the node has no InternalIP of its family"}},
		{"an older Node's range wins over a real but newer one", []Peer{
			{"x", at(0), pfx("192.0.2.64/28"), addrs("203.0.113.66")}},
			[]string{"192.0.2.0/26 via 203.0.113.2", "192.0.2.64/28 via 203.0.113.66", "2001:db8:2::/64 via 2001:db8:f::2"},
			[]string{"node c: 192.0.2.64/26: overlaps 192.0.2.64/28 of node x, an older Node"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peers := append(slices.Clone(tc.hostile), real...)
			for i := range 2 { // the order of the list does not matter
				if i == 1 {
					slices.Reverse(peers)
				}
				got, skipped := Plan(self, local, peers)
				if g := strs(got); !slices.Equal(g, tc.want) {
					t.Errorf("order %d: routes: got %q, want %q", i, g, tc.want)
				}
				if g := strs(skipped); !slices.Equal(g, tc.wantS) {
					t.Errorf("order %d: skipped: got %q, want %q", i, g, tc.wantS)
				}
			}
		})
	}
}

// TestPlanOneFamily: a node with an IPv4 address only does not route the
// IPv6 ranges of dual-stack peers (it has no link to their next hops).
func TestPlanOneFamily(t *testing.T) {
	self := Peer{"a", t0, pfx("198.51.100.0/25"), addrs("203.0.113.1")}
	got, skipped := Plan(self, nil, []Peer{{"b", t0, pfx("2001:db8:2::/64", "192.0.2.0/26"), addrs("203.0.113.2", "2001:db8:f::2")}})
	if g, want := strs(got), []string{"192.0.2.0/26 via 203.0.113.2"}; !slices.Equal(g, want) {
		t.Errorf("routes %q, want %q", g, want)
	}
	if g, want := strs(skipped), []string{"node b: 2001:db8:2::/64: this node has no InternalIP of its family"}; !slices.Equal(g, want) {
		t.Errorf("skipped %q, want %q", g, want)
	}
}

// TestSync applies plans in a private network namespace: routes appear,
// change and go; a route of another protocol is never touched.
func TestSync(t *testing.T) {
	l := vethInPrivateNetns(t, "Table.Sync", "up0", "up1")
	for _, a := range []string{"203.0.113.1/24", "2001:db8:f::1/64"} {
		ad, _ := netlink.ParseAddr(a)
		ad.Flags = 0x80 // IFA_F_NODAD
		if err := netlink.AddrAdd(l, ad); err != nil {
			t.Fatal(err)
		}
	}
	links := map[bool]int{}
	for _, a := range addrs("203.0.113.1", "2001:db8:f::1") {
		i, err := LinkOf(a)
		if err != nil {
			t.Fatal(err)
		}
		links[a.Is4()] = i
	}
	// Someone else's route in the same range of destinations.
	_, dst, _ := net.ParseCIDR("192.0.2.192/26")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Protocol: 4}); err != nil {
		t.Fatal(err)
	}
	tb := Table{Protocol: DefaultProtocol}
	step := func(what string, want []Route, wantChanged, wantRemoved int) {
		t.Helper()
		res, err := tb.Sync(want, links)
		if err != nil || res.Changed != wantChanged || res.Removed != wantRemoved || len(res.Foreign) > 0 {
			t.Errorf("%s: %+v, %v; want changed %d, removed %d, nil", what, res, err, wantChanged, wantRemoved)
		}
		have, err := tb.List()
		if err != nil {
			t.Fatal(err)
		}
		var got, exp []string
		for _, h := range have {
			got = append(got, h.Route.String())
		}
		for _, w := range want {
			exp = append(exp, w.String())
		}
		slices.Sort(got)
		slices.Sort(exp)
		if !slices.Equal(got, exp) {
			t.Errorf("%s: routes of ours %q, want %q", what, got, exp)
		}
	}
	r1 := Route{Dst: netip.MustParsePrefix("192.0.2.0/26"), Via: netip.MustParseAddr("203.0.113.2")}
	r2 := Route{Dst: netip.MustParsePrefix("2001:db8:2::/64"), Via: netip.MustParseAddr("2001:db8:f::2")}
	step("first", []Route{r1, r2}, 2, 0)
	// This node's networks: its addresses' subnets and connected routes,
	// not the routes of ours nor those via a gateway.
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.ParseIP("198.18.7.0").To4(),
		Mask: net.CIDRMask(24, 32)}, Scope: netlink.SCOPE_LINK}); err != nil {
		t.Fatal(err)
	}
	// The kernel adds the link-local address (fe80::/64) on its own once the
	// link is up, later on a loaded machine: wait for it, with a deadline.
	var local []netip.Prefix
	framework.Until(10*time.Second, func() bool {
		var err error
		if local, err = Local(); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(local, netip.MustParsePrefix("fe80::/64"))
	})
	for _, want := range pfx("203.0.113.0/24", "2001:db8:f::/64", "198.18.7.0/24", "fe80::/64") {
		if !slices.Contains(local, want) {
			t.Errorf("Local() %q lacks %s", strs(local), want)
		}
	}
	for _, not := range pfx("192.0.2.0/26", "2001:db8:2::/64") {
		if slices.ContainsFunc(local, not.Overlaps) {
			t.Errorf("Local() %q holds %s (a route of ours, or via a gateway)", strs(local), not)
		}
	}
	step("again: nothing to do", []Route{r1, r2}, 0, 0)
	r1b := r1
	r1b.Via = netip.MustParseAddr("203.0.113.3")
	step("a new next hop", []Route{r1b, r2}, 1, 0)
	step("a peer gone", []Route{r2}, 0, 1)
	// A default route of our protocol is ours too, and no peer explains it.
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP("203.0.113.9"),
		Flags: int(netlink.FLAG_ONLINK), Protocol: DefaultProtocol}); err != nil {
		t.Fatal(err)
	}
	step("a default route of ours", []Route{r2}, 0, 1)
	// A destination with a route of another protocol is left to it.
	r3 := Route{Dst: netip.MustParsePrefix("192.0.2.192/26"), Via: netip.MustParseAddr("203.0.113.4")}
	res, err := tb.Sync([]Route{r2, r3}, links)
	if err != nil || res.Changed != 0 || len(res.Foreign) != 1 || res.Foreign[0] != r3 {
		t.Errorf("a destination of another protocol's route: %+v, %v; want it foreign, untouched", res, err)
	}
	if n, err := tb.RemoveAll(); n != 1 || err != nil {
		t.Errorf("RemoveAll: %d, %v; want 1, nil", n, err)
	}
	rs, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
	if len(rs) != 1 {
		t.Errorf("the route of protocol 4 is gone: %v", rs)
	}
}

// A route with a link of its own and an MTU (an overlay's route into the
// bridge, pkg/overlay): installed there with its mtu, changed when the MTU
// changes, left alone when nothing does.
func TestSyncLinkAndMTU(t *testing.T) {
	l := vethInPrivateNetns(t, "Table.Sync", "br0", "br0p")
	// The node's address, as on a node's bridge interface.
	ad, _ := netlink.ParseAddr("192.0.2.2/24")
	if err := netlink.AddrAdd(l, ad); err != nil {
		t.Fatal(err)
	}
	tb := Table{Protocol: DefaultProtocol}
	r := Route{Dst: netip.MustParsePrefix("198.18.2.0/24"), Via: netip.MustParseAddr("169.254.253.1"), Link: l.Attrs().Index, MTU: 1450}
	for _, step := range []struct {
		what    string
		mtu     int
		changed int
	}{{"first", 1450, 1}, {"again", 1450, 0}, {"another MTU", 1430, 1}} {
		r.MTU = step.mtu
		res, err := tb.Sync([]Route{r}, nil)
		if err != nil || res.Changed != step.changed || res.Removed != 0 {
			t.Errorf("%s: %+v, %v; want changed %d", step.what, res, err, step.changed)
		}
		have, err := tb.List()
		if err != nil || len(have) != 1 || have[0].LinkIndex != l.Attrs().Index || have[0].MTU != step.mtu || have[0].Via != r.Via {
			t.Errorf("%s: routes of ours %+v, %v; want %s on br0", step.what, have, err, r)
		}
	}
	if n, err := tb.RemoveAll(); n != 1 || err != nil {
		t.Errorf("RemoveAll: %d, %v; want 1, nil", n, err)
	}
}

// vethInPrivateNetns moves the test's thread into a network namespace of
// its own, until the test ends, with a veth pair a, b there, both up, and
// returns link a. It skips, loudly, without root.
func vethInPrivateNetns(t *testing.T, what, a, b string) netlink.Link {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("*** not root: " + what + " NOT tested ***")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Set(orig); ns.Close(); orig.Close(); runtime.UnlockOSThread() })
	la := netlink.NewLinkAttrs()
	la.Name = a
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: b}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{a, b} {
		if p, err := netlink.LinkByName(name); err != nil || netlink.LinkSetUp(p) != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	l, err := netlink.LinkByName(a)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
