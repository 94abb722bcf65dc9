package hostport

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

// NodeLocalTarget reads what the node-local map translates the (node IP,
// protocol, host port) of r to (nft.go): ok is false when the map has no
// element for it, or the table is not there. For the node tools, which
// read; opts select the netlink connection.
func NodeLocalTarget(r flows.Rule, opts ...nftables.ConnOption) (to netip.AddrPort, ok bool, err error) {
	c, err := nftables.New(opts...)
	if err != nil {
		return to, false, fmt.Errorf("nft (node-local host ports): %w", err)
	}
	set := nftMapOf(r)
	// GetSetElements keeps no error chain: the table is looked for first.
	tables, err := c.ListTablesOfFamily(set.Table.Family)
	if err != nil {
		return to, false, fmt.Errorf("nft (node-local host ports): %w", err)
	}
	if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == nftTable }) {
		return to, false, nil
	}
	elems, err := c.GetSetElements(set)
	if err != nil {
		return to, false, fmt.Errorf("nft (node-local host ports): %w", err)
	}
	key := nftKey(r)
	for _, e := range elems {
		if !bytes.Equal(e.Key, key) {
			continue
		}
		n := 4
		if r.NodeIP.Is6() {
			n = 16
		}
		if len(e.Val) < n+2 {
			return to, false, fmt.Errorf("nft (node-local host ports): element of %s has %d bytes of data", r, len(e.Val))
		}
		a, _ := netip.AddrFromSlice(e.Val[:n])
		return netip.AddrPortFrom(a, uint16(e.Val[n])<<8|uint16(e.Val[n+1])), true, nil
	}
	return to, false, nil
}
