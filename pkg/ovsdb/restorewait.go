package ovsdb

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// flow-restore-wait (ovs-vswitchd.conf.db(5), Open_vSwitch other_config):
// an ovs-vswitchd that starts while it is "true" neither flushes nor expires
// the kernel datapath's flows, nor sends or receives any packet to or from
// the datapath, until it is cleared. ovs-vswitchd reads it only once it holds
// its OVSDB lock (bridge_run returns early before), and keeps reading it
// until it has seen it false; ovsdb-server sends a session's monitor updates
// before a "locked" notification (ovsdb_jsonrpc_session_send flushes them
// first). So a value committed while the watch holds the lock, before it
// releases it, is always what the next ovs-vswitchd starts with.
const (
	keyFlowRestoreWait = "flow-restore-wait" // in other_config, ovs-vswitchd's
	// KeyRestoreWaitSet, in the root row's external_ids, marks a
	// flow-restore-wait that this suite set (with the time, Unix seconds):
	// only that one does it clear.
	KeyRestoreWaitSet = "ovsflow.io/flow-restore-wait"
)

// SetFlowRestoreWait sets other_config:flow-restore-wait=true and records
// that the suite set it.
func (c *Client) SetFlowRestoreWait(ctx context.Context) error {
	_, err := c.transact(ctx, mutateOp(tableRoot, allRows,
		mut("other_config", mutDelete, strSet(keyFlowRestoreWait)),
		mut("other_config", mutInsert, strMap{keyFlowRestoreWait: "true"}.ovs()),
		mut("external_ids", mutDelete, strSet(KeyRestoreWaitSet)),
		mut("external_ids", mutInsert, strMap{KeyRestoreWaitSet: strconv.FormatInt(time.Now().Unix(), 10)}.ovs()),
	))
	return err
}

// ClearFlowRestoreWait removes the flow-restore-wait that the suite set, in
// one transaction that does nothing unless the suite's mark is there (one
// that someone else set, ovs-ctl's restart, is theirs to clear). It reports
// whether it cleared one.
func (c *Client) ClearFlowRestoreWait(ctx context.Context) (bool, error) {
	ids, err := c.rootIDs(ctx)
	if err != nil || ids[KeyRestoreWaitSet] == "" {
		return false, err
	}
	_, err = c.transact(ctx, clearRestoreWaitOps(ids[KeyRestoreWaitSet])...)
	return err == nil, err
}

// RestoreWaitOurs reports whether a flow-restore-wait that the suite set
// (its mark) is there.
func (c *Client) RestoreWaitOurs(ctx context.Context) (bool, error) {
	ids, err := c.rootIDs(ctx)
	return ids[KeyRestoreWaitSet] != "", err
}

// clearRestoreWaitOps are the operations that remove the flow-restore-wait
// marked by mark (the value of KeyRestoreWaitSet read): they fail unless the
// mark is still there, and touch neither a flag without it nor one set again
// since.
func clearRestoreWaitOps(mark string) []operation {
	return []operation{
		rootWait(strMap{KeyRestoreWaitSet: mark}, true),
		mutateOp(tableRoot, allRows,
			mut("other_config", mutDelete, strSet(keyFlowRestoreWait)),
			mut("external_ids", mutDelete, strSet(KeyRestoreWaitSet)),
		),
	}
}

// KernelDatapath reports whether the bridge runs on the kernel datapath
// ("system", the default), whose flows outlive ovs-vswitchd.
func (b Bridge) KernelDatapath() bool { return b.DatapathType == "" || b.DatapathType == "system" }

// KernelBridges returns the bridges on the kernel datapath, with their
// ports.
func (c *Client) KernelBridges(ctx context.Context) ([]Bridge, error) {
	op := selectOp(tableBridge)
	op.Columns = append(slices.Clone(bridgeColumns), "ports")
	res, err := c.transact(ctx, op)
	if err != nil {
		return nil, fmt.Errorf("listing bridges: %w", err)
	}
	brs, err := decode[Bridge](tableBridge, res[0].Rows)
	return slices.DeleteFunc(brs, func(b Bridge) bool { return !b.KernelDatapath() }), err
}
