package ipam

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
)

// settleInterval paces the wait for IPv6 addresses to leave the tentative
// state (duplicate address detection) before routes through an IPv6
// gateway go in, as the reference plugins wait. The wait lasts as long as
// the command's context (its budget, pkg/cnicmd): the reference plugins'
// fixed 5 s failed sandboxes on a saturated node (ovs-bridge turns DAD off
// on the container end, but the kernel keeps an address tentative until it
// has processed the link's carrier, in a work queue that a busy node runs
// late).
const (
	settleInterval = 50 * time.Millisecond
	noCarrierWait  = 5 * time.Second
)

// Configure runs in the container's netns: it puts the addresses of res
// that belong to ifName (Interface indexes res.Interfaces; an address
// without one is skipped) on the link, brings it up, and adds res's routes
// through it, as the reference plugins' ConfigureIface does. A route
// without a gateway goes through the first gateway of its family among
// the addresses. Unlike ConfigureIface, which drops them, a route's mtu
// and advmss (CNI 1.1) are applied too.
func Configure(ctx context.Context, ifName string, res *current.Result) error {
	if len(res.Interfaces) == 0 {
		return errors.New("the result has no interfaces")
	}
	l, err := netlinksafe.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("looking up %q: %w", ifName, err)
	}
	var gw4, gw6 net.IP
	ipv6 := false
	for _, ipc := range res.IPs {
		if ipc.Interface == nil {
			continue
		}
		if i := *ipc.Interface; i < 0 || i >= len(res.Interfaces) || res.Interfaces[i].Name != ifName {
			return fmt.Errorf("address %s: interface index %d is not %q", ipc.Address.String(), i, ifName)
		}
		if !ipv6 && ipc.Address.IP.To4() == nil {
			if err := enableIPv6(ifName); err != nil {
				return err
			}
			ipv6 = true
		}
		addr := ipc.Address
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &addr}); err != nil {
			return fmt.Errorf("adding address %s to %q: %w", addr.String(), ifName, err)
		}
		switch {
		case ipc.Gateway == nil:
		case ipc.Gateway.To4() != nil:
			if gw4 == nil {
				gw4 = ipc.Gateway
			}
		case gw6 == nil:
			gw6 = ipc.Gateway
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("setting %q up: %w", ifName, err)
	}
	if gw6 != nil {
		// Routes through an IPv6 gateway wait for the addresses to leave
		// the tentative state, as the reference plugins' do; with DAD off
		// (ovs-bridge turns it off on the container end) that is at once.
		if err := settle(ctx, l); err != nil {
			return err
		}
	}
	for _, r := range res.Routes {
		route := netlink.Route{Dst: &r.Dst, LinkIndex: l.Attrs().Index, Gw: r.GW,
			MTU: r.MTU, AdvMSS: r.AdvMSS, Priority: r.Priority}
		if route.Gw == nil {
			if r.Dst.IP.To4() != nil {
				route.Gw = gw4
			} else {
				route.Gw = gw6
			}
		}
		if r.Table != nil {
			route.Table = *r.Table
		}
		if r.Scope != nil {
			route.Scope = netlink.Scope(*r.Scope)
		}
		// As `ip route add`, without NLM_F_EXCL: a second IPv6 route to the
		// same destination through another gateway makes it multipath.
		if err := netlink.RouteAddEcmp(&route); err != nil {
			return fmt.Errorf("adding route %s on %q: %w", describe(route), ifName, err)
		}
	}
	return nil
}

// enableIPv6 makes sure IPv6 is on for ifName and lo (a container's netns
// may have it off), and that ifName keeps its addresses while down.
func enableIPv6(ifName string) error {
	for _, name := range []string{"lo", ifName} {
		key := "net/ipv6/conf/" + name + "/disable_ipv6"
		val, err := os.ReadFile(filepath.Join("/proc/sys", key))
		if err != nil {
			// Unreadable: adding the address says what is wrong.
			fmt.Fprintf(os.Stderr, "reading %s: %v\n", key, err)
			continue
		}
		if strings.TrimSpace(string(val)) == "0" {
			continue
		}
		if err := writeSysctl(key, "0"); err != nil {
			return err
		}
	}
	return writeSysctl("net/ipv6/conf/"+ifName+"/keep_addr_on_down", "1")
}

func writeSysctl(key, value string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting %s to %s: %w", key, value, err)
	}
	return nil
}

// settle waits, until ctx ends, until no IPv6 address of l is tentative,
// and fails when one failed duplicate address detection. A link without
// carrier keeps its addresses tentative: that is not an error.
func settle(ctx context.Context, l netlink.Link) error {
	name := l.Attrs().Name
	start := time.Now()
	for {
		addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return fmt.Errorf("listing addresses of %q: %w", name, err)
		}
		tentative := false
		for _, a := range addrs {
			if a.Flags&syscall.IFA_F_DADFAILED != 0 {
				return fmt.Errorf("address %s of %q failed duplicate address detection", a.IP, name)
			}
			if a.Flags&syscall.IFA_F_TENTATIVE != 0 {
				tentative = true
			}
		}
		if !tentative {
			return nil
		}
		// Without carrier, addresses stay tentative: after as long as the
		// reference plugins wait, that is the link's state, not a DAD to
		// wait for.
		if time.Since(start) > noCarrierWait {
			if now, err := netlinksafe.LinkByName(name); err == nil && now.Attrs().OperState != netlink.OperUp {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			now, err := netlinksafe.LinkByName(name)
			if err != nil {
				return fmt.Errorf("looking up %q: %w", name, err)
			}
			if now.Attrs().OperState == netlink.OperUp {
				return fmt.Errorf("%q still has tentative addresses after %v: %w", name, time.Since(start).Round(time.Millisecond), ctx.Err())
			}
			return nil
		case <-time.After(settleInterval):
		}
	}
}

// CheckAddresses runs in the container's netns, for CHECK: each address of
// ips must be on ifName with its prefix length, and its subnet routed in
// the main table, as the reference plugins check
// (ValidateExpectedInterfaceIPs).
func CheckAddresses(ifName string, ips []*current.IPConfig) error {
	if len(ips) == 0 {
		return nil
	}
	l, err := netlinksafe.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("looking up %q: %w", ifName, err)
	}
	have, err := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing addresses of %q: %w", ifName, err)
	}
	for _, ipc := range ips {
		ones, _ := ipc.Address.Mask.Size()
		if !hasAddr(have, ipc.Address.IP, ones) {
			return fmt.Errorf("address %s is not on %q", ipc.Address.String(), ifName)
		}
		subnet := &net.IPNet{IP: ipc.Address.IP.Mask(ipc.Address.Mask), Mask: ipc.Address.Mask}
		family := netlink.FAMILY_V6
		if ipc.Address.IP.To4() != nil {
			family = netlink.FAMILY_V4
		}
		routes, err := netlinksafe.RouteListFiltered(family, &netlink.Route{Dst: subnet}, netlink.RT_FILTER_DST)
		if err != nil {
			return fmt.Errorf("listing routes to %s: %w", subnet, err)
		}
		if len(routes) == 0 {
			return fmt.Errorf("address %s: no route to its subnet %s", ipc.Address.String(), subnet)
		}
	}
	return nil
}

func hasAddr(have []netlink.Addr, ip net.IP, ones int) bool {
	for _, a := range have {
		if n, _ := a.Mask.Size(); n == ones && a.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// describe is a route as `ip route` shows it, the fields it has.
func describe(r netlink.Route) string {
	s := r.Dst.String()
	if r.Gw != nil {
		s += " via " + r.Gw.String()
	}
	for _, f := range []struct {
		name  string
		value int
	}{{"metric", r.Priority}, {"table", r.Table}, {"scope", int(r.Scope)}, {"mtu", r.MTU}, {"advmss", r.AdvMSS}} {
		if f.value != 0 {
			s += fmt.Sprintf(" %s %d", f.name, f.value)
		}
	}
	return s
}

// errBadRoute is a route whose destination is neither IPv4 nor IPv6.
var errBadRoute = errors.New("destination is neither IPv4 nor IPv6")

// CheckRoutes runs in the container's netns, for CHECK: each route must be
// in the main table, on any link, through its gateway when it names one, as
// the reference plugins check (ValidateExpectedRoute). A default route's
// gateway is not compared: theirs is not either.
func CheckRoutes(routes []*types.Route) error {
	for _, r := range routes {
		family := netlink.FAMILY_V6
		switch {
		case r.Dst.IP.To4() != nil:
			family = netlink.FAMILY_V4
		case len(r.Dst.IP) != net.IPv6len:
			return fmt.Errorf("route %v: %w", r, errBadRoute)
		}
		find, filter := &netlink.Route{Dst: &r.Dst, Gw: r.GW}, netlink.RT_FILTER_DST
		if ones, _ := r.Dst.Mask.Size(); ones == 0 && r.Dst.IP.IsUnspecified() {
			find = &netlink.Route{} // the default route: netlink's filter takes a nil Dst for the family's /0
		} else if r.GW != nil {
			filter |= netlink.RT_FILTER_GW
		}
		found, err := netlinksafe.RouteListFiltered(family, find, filter)
		if err != nil {
			return fmt.Errorf("listing routes to %s: %w", r.Dst.String(), err)
		}
		if len(found) == 0 {
			return fmt.Errorf("route %s is not in the main table", describe(netlink.Route{Dst: &r.Dst, Gw: r.GW}))
		}
	}
	return nil
}
