package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
)

// Announce makes link name, in the current netns, resolve each of peers (its
// gateways) now: the kernel sends an ARP request or neighbour solicitation
// from the link's own MAC and address, which updates any entry for that
// address that a peer still holds (RFC 826's merge rule; RFC 4861 section
// 7.2.3). It stands in for the gratuitous ARP and unsolicited NA that the
// kernel sends when a link comes up, for a link that came up before its
// frames could reach anyone. Other ways cost more: setting the MAC to
// itself makes the kernel repeat them, but it is a link change, on which
// ovs-vswitchd reconfigures its bridges; sending them on a packet socket
// costs a kernel RCU synchronisation (about 10 ms) when it is closed.
//
// The peers the kernel could not resolve because its neighbour table is
// full (ENOBUFS: one table for every netns, bounded by gc_thresh3) are
// returned in skipped, not as an error: the announcement only hastens what
// the peers learn when they next resolve the address.
func Announce(name string, peers []netip.Addr) (skipped []netip.Addr, err error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("looking up %q: %w", name, err)
	}
	for _, p := range peers {
		n := &netlink.Neigh{LinkIndex: l.Attrs().Index, IP: net.IP(p.AsSlice()), State: netlink.NUD_INCOMPLETE,
			Flags: netlink.NTF_USE}
		if p.Is4() {
			n.Family = netlink.FAMILY_V4
		} else {
			n.Family = netlink.FAMILY_V6
		}
		switch err := netlink.NeighSet(n); {
		case errors.Is(err, syscall.ENOBUFS):
			skipped = append(skipped, p)
		case err != nil:
			return skipped, fmt.Errorf("resolving %s on %q: %w", p, name, err)
		}
	}
	return skipped, nil
}
