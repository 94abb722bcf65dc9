package overlay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// WarmNeighbours resolves, for the userspace datapath's tunnels of bridge
// (ovs-vswitchd's control socket sock), the next hop towards each remote
// before a pod's packet needs it. That datapath resolves a tunnel's next
// hop in a cache of its own (tnl/neigh), and drops the packet that finds
// it empty while it asks: the first datagram to a peer after a start, a
// restart or the cache's aging would be lost. For each remote whose next
// hop (the kernel's route to it) is not cached, the kernel's neighbour
// entry is copied into it; where the kernel has none yet, one datagram to
// the remote's discard port (9) makes the kernel resolve it first (within
// a second). It returns how many entries it set.
func WarmNeighbours(ctx context.Context, sock, bridge string, remotes []netip.Addr) (int, error) {
	cached, err := unixctl.TunnelNeighbours(ctx, sock)
	if err != nil {
		return 0, err
	}
	set := 0
	var errs []error
	for _, r := range remotes {
		hop, link, err := nextHop(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cached[hop] {
			continue
		}
		mac, err := kernelNeighbour(hop, link)
		if err == nil && mac == nil {
			nudge(r)
			for deadline := time.Now().Add(time.Second); mac == nil && err == nil && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond) // the kernel's resolution: no event of it to wait on here
				mac, err = kernelNeighbour(hop, link)
			}
		}
		if err != nil || mac == nil {
			errs = append(errs, fmt.Errorf("the next hop %s towards %s: %v", hop, r, cmpErr(err, "not resolved by the kernel within a second")))
			continue
		}
		if err := unixctl.SetTunnelNeighbour(ctx, sock, bridge, hop, mac); err != nil {
			errs = append(errs, err)
			continue
		}
		cached[hop] = true
		set++
	}
	return set, errors.Join(errs...)
}

func cmpErr(err error, otherwise string) string {
	if err != nil {
		return err.Error()
	}
	return otherwise
}

// nextHop is the kernel's next hop towards remote (its gateway, or remote
// itself on a link of this node) and the link it leaves by.
func nextHop(remote netip.Addr) (netip.Addr, int, error) {
	rs, err := netlink.RouteGet(remote.AsSlice())
	if err != nil || len(rs) == 0 {
		return netip.Addr{}, 0, fmt.Errorf("the route to %s: %v", remote, cmpErr(err, "none"))
	}
	if gw, ok := netip.AddrFromSlice(rs[0].Gw); ok {
		return gw.Unmap(), rs[0].LinkIndex, nil
	}
	return remote, rs[0].LinkIndex, nil
}

// kernelNeighbour is the MAC of ip in the kernel's neighbour table of
// link (nil: none yet).
func kernelNeighbour(ip netip.Addr, link int) (net.HardwareAddr, error) {
	fam := netlink.FAMILY_V6
	if ip.Is4() {
		fam = netlink.FAMILY_V4
	}
	ns, err := netlink.NeighList(link, fam)
	if err != nil {
		return nil, fmt.Errorf("listing neighbours: %w", err)
	}
	const known = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip && len(n.HardwareAddr) == 6 && n.State&known != 0 {
			return n.HardwareAddr, nil
		}
	}
	return nil, nil
}

// nudge sends one empty datagram to remote's discard port from the node's
// stack, so that the kernel resolves the next hop towards it.
func nudge(remote netip.Addr) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(remote, 9)))
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = c.Write(nil)
}
