package ovsdb

import (
	"context"
	"fmt"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// KeyPrefix starts every external_ids key of the suite.
const KeyPrefix = "ovsflow.io/"

// Forgotten is what ForgetSuite removed.
type Forgotten struct {
	Ports    int // our Port rows, detached from their bridges
	RootKeys int // in-flight records on the root row
	// RestoreWait: a flow-restore-wait of the suite's was cleared.
	RestoreWait bool
	BridgeKeys  map[string][]string // bridge name -> keys removed (gateways, zone limits)
	QoS         int                 // our QoS and Queue rows (root tables: nothing collects them)
}

// ForgetSuite removes, in one transaction, the suite's records: every Port
// of ours (ovs-vswitchd then removes its Interface), every QoS and Queue
// row of ours (ovs-bandwidth's; root tables, which OVSDB keeps when their
// port goes), the suite's keys on the root row, with the flow-restore-wait
// the suite set (its mark is one of those keys: no one else would clear it,
// and an ovs-vswitchd that starts with it forwards nothing), and each
// bridge's suite keys but its owner tag (which deploy/node-prep.sh sets:
// the bridge stays as it made it). Rows and keys of anyone else, a
// flow-restore-wait without the suite's mark included, are not touched.
func (c *Client) ForgetSuite(ctx context.Context) (Forgotten, error) {
	f := Forgotten{BridgeKeys: map[string][]string{}}
	ports, err := c.OwnedPorts(ctx)
	if err != nil {
		return f, err
	}
	root, err := c.rootIDs(ctx)
	if err != nil {
		return f, err
	}
	bridges, err := c.Bridges(ctx)
	if err != nil {
		return f, err
	}
	// The ports let go of their QoS first: a row still referenced cannot be
	// deleted, and a detached port is collected only after that check.
	ours := []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{KeyOwner: OwnerValue}.ovs())}
	ops := []operation{updateOp(tablePort, ours, ovsdb.Row{"qos": strSet()}), deleteOp(tableQoS, ours...), deleteOp(tableQueue, ours...)}
	const nQoSOps = 3
	ops = append(ops, detachOps(PortUUIDs(ports))...)
	f.Ports = len(ports)
	var rootKeys []string
	for k := range root {
		if strings.HasPrefix(k, KeyPrefix) {
			rootKeys = append(rootKeys, k)
		}
	}
	if mark := root[KeyRestoreWaitSet]; mark != "" {
		ops = append(ops, clearRestoreWaitOps(mark)...)
		f.RestoreWait = true
	}
	if len(rootKeys) > 0 {
		ops = append(ops, rootMutate(mutDelete, strSet(rootKeys...)))
		f.RootKeys = len(rootKeys)
	}
	for _, br := range bridges {
		var keys []string
		for k := range br.ExternalIDs {
			if strings.HasPrefix(k, KeyPrefix) && k != KeyOwner {
				keys = append(keys, k)
			}
		}
		if len(keys) > 0 {
			ops = append(ops, mutateOp(tableBridge, byUUID(br.UUID), mut("external_ids", mutDelete, strSet(keys...))))
			f.BridgeKeys[br.Name] = keys
		}
	}
	res, err := c.transact(ctx, append(ops, bumpCfg)...)
	if err != nil {
		return Forgotten{}, fmt.Errorf("removing the suite's records: %w", err)
	}
	f.QoS = res[nQoSOps-2].Count + res[nQoSOps-1].Count
	return f, nil
}
