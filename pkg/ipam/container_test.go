package ipam

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/internal/nettest"
)

func cidr(t *testing.T, s string) net.IPNet {
	t.Helper()
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	n.IP = ip
	return *n
}

func prefix(t *testing.T, s string) net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return *n
}

// containerLink makes, in a scratch netns, the container end eth0 of a veth
// whose peer is up, with duplicate address detection off as ovs-bridge
// leaves it (ovs-bridge's prepareContEnd), and IPv6 off on eth0 and lo as some
// runtimes leave a netns. It returns the netns.
func containerLink(t *testing.T) ns.NetNS {
	t.Helper()
	nettest.RequireRoot(t)
	n := nettest.NewNS(t)
	err := n.Do(func(ns.NetNS) error {
		la := netlink.NewLinkAttrs()
		la.Name = "eth0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "peer0"}); err != nil {
			return err
		}
		peer, err := netlink.LinkByName("peer0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		for key, val := range map[string]string{
			"net/ipv6/conf/eth0/accept_dad":   "0",
			"net/ipv6/conf/eth0/disable_ipv6": "1",
			"net/ipv6/conf/lo/disable_ipv6":   "1",
		} {
			if err := writeSysctl(key, val); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("container link: %v", err)
	}
	return n
}

func dualStack(t *testing.T) *current.Result {
	table := 100
	return &current.Result{
		Interfaces: []*current.Interface{{Name: "ovf0"}, {Name: "eth0", Sandbox: "/x"}},
		IPs: []*current.IPConfig{
			{Interface: current.Int(1), Address: cidr(t, "10.7.0.5/24"), Gateway: net.ParseIP("10.7.0.1")},
			{Interface: current.Int(1), Address: cidr(t, "fd00:7::5/64"), Gateway: net.ParseIP("fd00:7::1")},
			{Address: cidr(t, "10.8.0.5/24")}, // no interface: not ours to add
		},
		Routes: []*types.Route{
			{Dst: prefix(t, "0.0.0.0/0")}, // through 10.7.0.1
			{Dst: prefix(t, "::/0")},      // through fd00:7::1
			{Dst: prefix(t, "10.9.0.0/16"), GW: net.ParseIP("10.7.0.254"), MTU: 1400, AdvMSS: 1360, Priority: 7},
			{Dst: prefix(t, "192.0.2.0/24"), Table: &table},
		},
	}
}

// TestConfigure configures eth0 from a dual-stack result and reads back
// what the kernel has: addresses with their prefixes, the link up, IPv6
// turned on, and each route with every field the result carries.
func TestConfigure(t *testing.T) {
	n := containerLink(t)
	res := dualStack(t)
	err := n.Do(func(ns.NetNS) error {
		if err := Configure(context.Background(), "eth0", res); err != nil {
			return err
		}
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if l.Attrs().Flags&net.FlagUp == 0 {
			t.Error("eth0 is down, want up")
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return err
		}
		var got []string
		for _, a := range addrs {
			if !a.IP.IsLinkLocalUnicast() {
				got = append(got, a.IPNet.String())
			}
		}
		if strings.Join(got, " ") != "10.7.0.5/24 fd00:7::5/64" {
			t.Errorf("addresses: got %v, want 10.7.0.5/24 fd00:7::5/64", got)
		}
		for _, key := range []string{"net/ipv6/conf/eth0/disable_ipv6", "net/ipv6/conf/lo/disable_ipv6", "net/ipv6/conf/eth0/keep_addr_on_down"} {
			v, _ := os.ReadFile("/proc/sys/" + key)
			want := "0"
			if strings.HasSuffix(key, "keep_addr_on_down") {
				want = "1"
			}
			if strings.TrimSpace(string(v)) != want {
				t.Errorf("%s: got %q, want %s", key, v, want)
			}
		}

		routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return err
		}
		find := func(dst string) *netlink.Route {
			for i := range routes {
				if routes[i].Dst != nil && routes[i].Dst.String() == dst {
					return &routes[i]
				}
			}
			return nil
		}
		for _, tc := range []struct {
			dst, gw                       string
			mtu, advmss, prio, table, scp int
		}{
			{"0.0.0.0/0", "10.7.0.1", 0, 0, 0, 254, int(netlink.SCOPE_UNIVERSE)},
			{"::/0", "fd00:7::1", 0, 0, 1024, 254, int(netlink.SCOPE_UNIVERSE)}, // IPv6's default metric
			{"10.9.0.0/16", "10.7.0.254", 1400, 1360, 7, 254, int(netlink.SCOPE_UNIVERSE)},
			{"192.0.2.0/24", "10.7.0.1", 0, 0, 0, 100, int(netlink.SCOPE_UNIVERSE)},
		} {
			r := find(tc.dst)
			if r == nil {
				t.Errorf("route %s: missing", tc.dst)
				continue
			}
			if r.Gw.String() != tc.gw || r.MTU != tc.mtu || r.AdvMSS != tc.advmss || r.Priority != tc.prio ||
				r.Table != tc.table || int(r.Scope) != tc.scp || r.LinkIndex != l.Attrs().Index {
				t.Errorf("route %s: got via %s mtu %d advmss %d metric %d table %d scope %d link %d; want via %s mtu %d advmss %d metric %d table %d scope %d link %d",
					tc.dst, r.Gw, r.MTU, r.AdvMSS, r.Priority, r.Table, r.Scope, r.LinkIndex,
					tc.gw, tc.mtu, tc.advmss, tc.prio, tc.table, tc.scp, l.Attrs().Index)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConfigureScope: a link-scope route (no gateway on the address either,
// or the route would get it), in a table of its own.
func TestConfigureScope(t *testing.T) {
	n := containerLink(t)
	table, scope := 100, int(netlink.SCOPE_LINK)
	res := &current.Result{
		Interfaces: []*current.Interface{{Name: "eth0"}},
		IPs:        []*current.IPConfig{{Interface: current.Int(0), Address: cidr(t, "10.7.0.5/24")}},
		Routes:     []*types.Route{{Dst: prefix(t, "192.0.2.0/24"), Table: &table, Scope: &scope}},
	}
	err := n.Do(func(ns.NetNS) error {
		if err := Configure(context.Background(), "eth0", res); err != nil {
			return err
		}
		routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 100}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return err
		}
		if len(routes) != 1 || routes[0].Dst.String() != "192.0.2.0/24" || routes[0].Gw != nil || routes[0].Scope != netlink.SCOPE_LINK {
			t.Errorf("table 100: got %v, want 192.0.2.0/24 scope link without a gateway", routes)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConfigureRefuses(t *testing.T) {
	n := containerLink(t)
	for _, tc := range []struct {
		name   string
		res    *current.Result
		errHas string
	}{
		{"no interfaces", &current.Result{}, "no interfaces"},
		{"address of another interface", &current.Result{
			Interfaces: []*current.Interface{{Name: "ovf0"}, {Name: "eth0"}},
			IPs:        []*current.IPConfig{{Interface: current.Int(0), Address: cidr(t, "10.7.0.5/24")}},
		}, "10.7.0.5/24"},
		{"interface index out of range", &current.Result{
			Interfaces: []*current.Interface{{Name: "eth0"}},
			IPs:        []*current.IPConfig{{Interface: current.Int(3), Address: cidr(t, "10.7.0.5/24")}},
		}, "index 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := n.Do(func(ns.NetNS) error { return Configure(context.Background(), "eth0", tc.res) })
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Configure: got %v, want an error naming %q", err, tc.errHas)
			}
		})
	}
	err := n.Do(func(ns.NetNS) error {
		return Configure(context.Background(), "nosuch0", &current.Result{Interfaces: []*current.Interface{{Name: "nosuch0"}}})
	})
	if err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Errorf("Configure of a missing link: got %v, want an error naming it", err)
	}
}

// TestCheck: after Configure, CHECK's validations pass; each then fails
// once what it checks is removed behind its back, naming it.
func TestCheck(t *testing.T) {
	n := containerLink(t)
	res := dualStack(t)
	mainRoutes := res.Routes[:3] // the table-100 route is not in the main table: CHECK does not look there
	ours := res.IPs[:2]
	err := n.Do(func(ns.NetNS) error {
		if err := Configure(context.Background(), "eth0", res); err != nil {
			return err
		}
		if err := CheckAddresses("eth0", ours); err != nil {
			t.Errorf("CheckAddresses after Configure: %v", err)
		}
		if err := CheckRoutes(mainRoutes); err != nil {
			t.Errorf("CheckRoutes after Configure: %v", err)
		}
		if err := CheckRoutes(res.Routes[3:]); err == nil {
			t.Error("CheckRoutes of a route in table 100: got nil, want an error (main table only)")
		}
		if err := CheckAddresses("eth0", nil); err != nil {
			t.Errorf("CheckAddresses of no address: %v", err)
		}
		if err := CheckAddresses("nosuch0", ours); err == nil || !strings.Contains(err.Error(), "nosuch0") {
			t.Errorf("CheckAddresses of a missing link: got %v, want an error naming it", err)
		}
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}

		// A prefix length that differs is a missing address.
		wrongLen := []*current.IPConfig{{Address: cidr(t, "10.7.0.5/25")}}
		if err := CheckAddresses("eth0", wrongLen); err == nil || !strings.Contains(err.Error(), "10.7.0.5/25") {
			t.Errorf("CheckAddresses with another prefix length: got %v, want an error naming 10.7.0.5/25", err)
		}
		// A gateway that differs is a missing route.
		wrongGW := []*types.Route{{Dst: prefix(t, "10.9.0.0/16"), GW: net.ParseIP("10.7.0.253")}}
		if err := CheckRoutes(wrongGW); err == nil || !strings.Contains(err.Error(), "10.9.0.0/16") {
			t.Errorf("CheckRoutes with another gateway: got %v, want an error naming 10.9.0.0/16", err)
		}
		// A route without a gateway matches its destination through any.
		if err := CheckRoutes([]*types.Route{{Dst: prefix(t, "10.9.0.0/16")}}); err != nil {
			t.Errorf("CheckRoutes without a gateway: %v", err)
		}
		if err := CheckRoutes([]*types.Route{{}}); err == nil {
			t.Error("CheckRoutes of a route without a destination: got nil, want an error")
		}

		gone := &netlink.Route{Dst: &res.Routes[2].Dst, Gw: res.Routes[2].GW, LinkIndex: l.Attrs().Index, Priority: 7}
		if err := netlink.RouteDel(gone); err != nil {
			return err
		}
		if err := CheckRoutes(mainRoutes); err == nil || !strings.Contains(err.Error(), "10.9.0.0/16") {
			t.Errorf("CheckRoutes after the route was removed: got %v, want an error naming 10.9.0.0/16", err)
		}
		if err := netlink.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP("fd00:7::1")}); err != nil {
			return err
		}
		if err := CheckRoutes(res.Routes[1:2]); err == nil || !strings.Contains(err.Error(), "::/0") {
			t.Errorf("CheckRoutes after the IPv6 default route was removed: got %v, want an error naming ::/0", err)
		}

		if err := netlink.AddrDel(l, &netlink.Addr{IPNet: &res.IPs[1].Address}); err != nil {
			return err
		}
		if err := CheckAddresses("eth0", ours); err == nil || !strings.Contains(err.Error(), "fd00:7::5/64") {
			t.Errorf("CheckAddresses after the address was removed: got %v, want an error naming fd00:7::5/64", err)
		}
		// The address back, without its subnet's route: still a failure.
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &res.IPs[1].Address, Flags: 0x200}); err != nil { // IFA_F_NOPREFIXROUTE
			return err
		}
		if err := CheckAddresses("eth0", ours); err == nil || !strings.Contains(err.Error(), "fd00:7::/64") {
			t.Errorf("CheckAddresses without the subnet's route: got %v, want an error naming fd00:7::/64", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
