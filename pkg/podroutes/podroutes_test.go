package podroutes

import (
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
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

func TestPlan(t *testing.T) {
	self := Peer{"a", pfx("198.51.100.0/25", "2001:db8:1::/64"), addrs("203.0.113.1", "2001:db8:f::1")}
	for _, tc := range []struct {
		name        string
		peers       []Peer
		want, wantS []string
	}{
		{"dual stack", []Peer{{"b", pfx("2001:db8:2::/64", "198.51.100.128/25"), addrs("203.0.113.2", "2001:db8:f::2")}},
			[]string{"198.51.100.128/25 via 203.0.113.2", "2001:db8:2::/64 via 2001:db8:f::2"}, nil},
		{"the next hop of the range's family", []Peer{{"b", pfx("2001:db8:2::/64"), addrs("203.0.113.2")}},
			nil, []string{"node b: 2001:db8:2::/64: the node has no InternalIP of its family"}},
		{"a range that is this node's", []Peer{{"b", pfx("198.51.100.0/26"), addrs("203.0.113.2")}},
			nil, []string{"node b: 198.51.100.0/26: overlaps this node's pod range"}},
		{"two peers claim one range: neither", []Peer{
			{"b", pfx("192.0.2.0/26"), addrs("203.0.113.2")}, {"c", pfx("192.0.2.0/27"), addrs("203.0.113.3")},
			{"d", pfx("192.0.2.64/26"), addrs("203.0.113.4")}},
			[]string{"192.0.2.64/26 via 203.0.113.4"},
			[]string{"node b: 192.0.2.0/26: overlaps a pod range of node c", "node c: 192.0.2.0/27: overlaps a pod range of node b"}},
		{"host bits are masked", []Peer{{"b", pfx("192.0.2.5/26"), addrs("203.0.113.2")}}, []string{"192.0.2.0/26 via 203.0.113.2"}, nil},
		{"no peers", nil, nil, nil},
		{"a peer with this node's address", []Peer{{"b", pfx("192.0.2.0/26"), addrs("203.0.113.1")}},
			nil, []string{"node b: 192.0.2.0/26: its InternalIP 203.0.113.1 is this node's"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped := Plan(self, tc.peers)
			if g := strs(got); !slices.Equal(g, tc.want) {
				t.Errorf("routes: got %q, want %q", g, tc.want)
			}
			if g := strs(skipped); !slices.Equal(g, tc.wantS) {
				t.Errorf("skipped: got %q, want %q", g, tc.wantS)
			}
		})
	}
}

// TestPlanOneFamily: a node with an IPv4 address only does not route the
// IPv6 ranges of dual-stack peers (it has no link to their next hops).
func TestPlanOneFamily(t *testing.T) {
	self := Peer{"a", pfx("198.51.100.0/25"), addrs("203.0.113.1")}
	got, skipped := Plan(self, []Peer{{"b", pfx("2001:db8:2::/64", "192.0.2.0/26"), addrs("203.0.113.2", "2001:db8:f::2")}})
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
	if os.Geteuid() != 0 {
		t.Skip("*** not root: Table.Sync NOT tested ***")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { netns.Set(orig); ns.Close(); orig.Close() }()
	la := netlink.NewLinkAttrs()
	la.Name = "up0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "up1"}); err != nil {
		t.Fatal(err)
	}
	l, _ := netlink.LinkByName("up0")
	netlink.LinkSetUp(l)
	if p, err := netlink.LinkByName("up1"); err == nil {
		netlink.LinkSetUp(p)
	}
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
