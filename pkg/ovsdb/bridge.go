package ovsdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// bridgeColumns are the columns of a Bridge that Bridge reads: all but its
// ports (on a busy node the row carries hundreds of port UUIDs).
var bridgeColumns = []string{"_uuid", "name", "datapath_type", "fail_mode", "datapath_id", "external_ids"}

// Bridge returns the bridge called name, or nil when there is none, without
// its ports.
func (c *Client) Bridge(ctx context.Context, name string) (*Bridge, error) {
	op := selectOp(tableBridge, cond("name", fnEqual, name))
	op.Columns = bridgeColumns
	res, err := c.transact(ctx, op)
	if err != nil {
		return nil, fmt.Errorf("looking up bridge %q: %w", name, err)
	}
	brs, err := decode[Bridge](tableBridge, res[0].Rows)
	if err != nil || len(brs) == 0 {
		return nil, err
	}
	if err := CheckSchema(fmt.Sprintf("bridge %q", name), brs[0].ExternalIDs); err != nil {
		return nil, err
	}
	return &brs[0], nil
}

// BridgeHasPort reports whether bridge name holds the port.
func (c *Client) BridgeHasPort(ctx context.Context, name, portUUID string) (bool, error) {
	op := selectOp(tableBridge, cond("name", fnEqual, name), cond("ports", fnIncludes, uuid(portUUID)))
	op.Columns = []string{"_uuid"}
	res, err := c.transact(ctx, op)
	if err != nil {
		return false, fmt.Errorf("looking up bridge %q: %w", name, err)
	}
	return len(res[0].Rows) == 1, nil
}

// EnsureBridge creates bridge name (with its internal port) unless it exists.
// Concurrent callers are safe: the bridge name is a unique index, so a losing
// insert fails and the bridge is looked up again.
func (c *Client) EnsureBridge(ctx context.Context, name, datapathType string) (*Bridge, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		br, err := c.Bridge(ctx, name)
		if err != nil || br != nil {
			return br, err
		}
		ops := []operation{
			insertOp(tableInterface, "newiface", ovsdb.Row{"name": name, "type": "internal"}),
			insertOp(tablePort, "newport", ovsdb.Row{"name": name, "interfaces": named("newiface")}),
			insertOp(tableBridge, "newbridge", ovsdb.Row{"name": name, "ports": named("newport"), "datapath_type": datapathType,
				"external_ids": withSchema(map[string]string{KeyOwner: OwnerValue}).ovs(),
				// Nothing is forwarded after an ovs-vswitchd restart
				// until reconcile has put the port security flows back.
				"fail_mode": "secure"}),
			mutateOp(tableRoot, allRows, mut("bridges", mutInsert, named("newbridge"))),
		}
		if _, err := c.transact(ctx, ops...); err != nil {
			if errors.Is(err, ErrUnreachable) {
				return nil, err
			}
			lastErr = err // most likely a concurrent creator won; look again
		}
	}
	br, err := c.Bridge(ctx, name)
	if err == nil && br == nil {
		err = fmt.Errorf("creating bridge %q: %w", name, lastErr)
	}
	return br, err
}

// Bridges returns every bridge.
func (c *Client) Bridges(ctx context.Context) ([]Bridge, error) {
	op := selectOp(tableBridge)
	op.Columns = bridgeColumns
	res, err := c.transact(ctx, op)
	if err != nil {
		return nil, fmt.Errorf("listing bridges: %w", err)
	}
	brs, err := decode[Bridge](tableBridge, res[0].Rows)
	if err != nil {
		return nil, err
	}
	for _, br := range brs {
		if err := CheckSchema(fmt.Sprintf("bridge %q", br.Name), br.ExternalIDs); err != nil {
			return nil, err
		}
	}
	return brs, nil
}

// SetBridgeExternalIDs adds keys to a bridge's external_ids; existing keys
// keep their value (an OVSDB map insert does not overwrite).
func (c *Client) SetBridgeExternalIDs(ctx context.Context, bridgeUUID string, set map[string]string) error {
	// A map insert keeps a key that is already there: delete the keys first.
	_, err := c.transact(ctx, mutateOp(tableBridge, byUUID(bridgeUUID),
		mut("external_ids", mutDelete, strSet(strMap(set).keys()...)), mut("external_ids", mutInsert, withSchema(set).ovs())))
	if err != nil {
		return fmt.Errorf("recording on bridge %s: %w", bridgeUUID, err)
	}
	return nil
}

// WithdrawBridgeKey removes key from the bridge's external_ids in one
// transaction that fails unless no Port row on the bridge (KeyBridge) holds
// key with ClaimValue: a bridge record that stays while a port claims it.
func (c *Client) WithdrawBridgeKey(ctx context.Context, br Bridge, key string) error {
	_, err := c.transact(ctx,
		waitNone(tablePort, cond("external_ids", fnIncludes, strMap{key: ClaimValue, KeyBridge: br.Name}.ovs())),
		mutateOp(tableBridge, byUUID(br.UUID), mut("external_ids", mutDelete, strSet(key))))
	if err != nil {
		return fmt.Errorf("withdrawing %s of bridge %q: %w", key, br.Name, err)
	}
	return nil
}
