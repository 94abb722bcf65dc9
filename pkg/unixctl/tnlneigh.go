package unixctl

import (
	"context"
	"net"
	"net/netip"
	"strings"
)

// TunnelNeighbours returns the addresses in the neighbour cache that the
// userspace datapath's tunnels resolve their next hops in (tnl/neigh/show).
func TunnelNeighbours(ctx context.Context, sock string) (map[netip.Addr]bool, error) {
	out, err := call(ctx, sock, "tnl/neigh/show")
	if err != nil {
		return nil, err
	}
	return ParseTunnelNeighbours(out), nil
}

// ParseTunnelNeighbours reads tnl/neigh/show's table: an address first on
// each row.
func ParseTunnelNeighbours(out string) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			if a, err := netip.ParseAddr(f[0]); err == nil {
				m[a.Unmap()] = true
			}
		}
	}
	return m
}

// SetTunnelNeighbour puts next hop ip with mac on bridge into that cache
// (tnl/neigh/set: an entry that does not age).
func SetTunnelNeighbour(ctx context.Context, sock, bridge string, ip netip.Addr, mac net.HardwareAddr) error {
	_, err := call(ctx, sock, "tnl/neigh/set", bridge, ip.String(), mac.String())
	return err
}
