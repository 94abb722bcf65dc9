package hostport

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

// Node-local host ports. A process on the node that connects to its own
// address never sends the packet into Open vSwitch (the kernel delivers it
// locally), so the OpenFlow rules cannot see it. The narrowest kernel hook that
// serves it is a DNAT in the nat/output hook, for exactly the published
// (node IP, protocol, host port) triples, from one map per family in tables
// this suite owns:
//
//	table ip  ovsflow_hostport { map hostports { ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service }
//	                             chain output { type nat hook output priority -100; dnat ip to ip daddr . meta l4proto . th dport map @hostports } }
//	table ip6 ovsflow_hostport { the same for IPv6 }
//
// An attachment owns the map elements of its rules (they are claimed in OVSDB,
// so no two attachments share one); ADD adds them, DEL removes them, each in
// one transaction, at a cost that does not depend on how many there are.
// 127.0.0.1 is not served: that would need route_localnet, the CVE-2020-8558
// hole.
const nftTable = "ovsflow_hostport"

// applyNodeLocal adds (or removes) the elements of rules. opts select the
// netlink connection (the tests' netns); the plugin uses the current netns.
//
// The elements alone are sent first, as one netlink batch (far cheaper than
// an nft exec, BenchmarkNodeLocal); the tables are declared, in the same
// batch as the elements, only when they are missing (first use on the node,
// or after a flush), since declaring the hooked base chain again makes the
// kernel wait (docs/performance.md, "Design costs").
func applyNodeLocal(ctx context.Context, rules []flows.Rule, remove bool, opts ...nftables.ConnOption) error {
	if len(rules) == 0 {
		return nil
	}
	err := sendElements(rules, remove, false, false, opts...)
	if err != nil && tablesMissing(err) {
		err = sendElements(rules, remove, true, false, opts...)
	}
	if err != nil {
		return fmt.Errorf("nft (node-local host ports): %w", err)
	}
	return nil
}

// RebuildNodeLocal declares both families' tables and replaces the elements
// of both maps with those of rules, in one netlink batch (reconcile).
func RebuildNodeLocal(ctx context.Context, rules []flows.Rule, opts ...nftables.ConnOption) error {
	if err := sendElements(rules, false, true, true, opts...); err != nil {
		return fmt.Errorf("nft (node-local host ports): %w", err)
	}
	return nil
}

// RemoveNodeLocal deletes both families' tables of the node-local host
// ports (uninstall); a family without the table is skipped.
func RemoveNodeLocal(opts ...nftables.ConnOption) (removed int, err error) {
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		c, err := nftables.New(opts...)
		if err != nil {
			return removed, fmt.Errorf("nft: %w", err)
		}
		c.DelTable(&nftables.Table{Name: nftTable, Family: fam})
		if err := c.Flush(); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return removed, fmt.Errorf("nft: deleting table %s: %w", nftTable, err)
		}
		removed++
	}
	return removed, nil
}
