package ovsdb

import (
	"context"
	"fmt"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// Served reports whether ovs-vswitchd has opened the bridge: it sets
// datapath_id once it has, in the transaction that reports the
// configuration applied (cur_cfg), and never for a bridge whose datapath it
// cannot open (a kernel datapath without the openvswitch module).
func (b Bridge) Served() bool { return b.DatapathID != nil && *b.DatapathID != "" }

// SyncBridge asks ovs-vswitchd to apply the configuration again, waits until
// it has (until ctx ends; then endpoint.ErrTimeout, as for an ovs-vswitchd
// that does not answer), and reads bridge name again, with the error ovs-vswitchd
// recorded on its internal interface, if any. ovs-vswitchd retries opening
// every bridge it has not opened on each reconfiguration, so a bridge still
// not Served after it is one that this ovs-vswitchd cannot open.
func (c *Client) SyncBridge(ctx context.Context, name string) (*Bridge, string, error) {
	res, err := c.transact(ctx, bumpCfg, selectRoot("next_cfg"))
	if err != nil {
		return nil, "", fmt.Errorf("asking ovs-vswitchd to open bridge %q: %w", name, err)
	}
	roots, err := decode[OpenvSwitch](tableRoot, res[1].Rows)
	if err != nil || len(roots) != 1 {
		return nil, "", fmt.Errorf("reading next_cfg: %v", err)
	}
	if err := c.waitCfg(ctx, roots[0].NextCfg); err != nil {
		return nil, "", fmt.Errorf("waiting for ovs-vswitchd to open bridge %q: %w", name, err)
	}
	br, err := c.Bridge(ctx, name)
	if err != nil || br == nil {
		return br, "", err
	}
	sel := selectOp(tableInterface, cond("name", fnEqual, name))
	sel.Columns = []string{"_uuid", "name", "error"}
	res, err = c.transact(ctx, sel)
	if err != nil {
		return nil, "", fmt.Errorf("reading interface %q: %w", name, err)
	}
	ifs, err := decode[Interface](tableInterface, res[0].Rows)
	if err != nil {
		return nil, "", err
	}
	if len(ifs) == 1 && ifs[0].Error != nil {
		return br, *ifs[0].Error, nil
	}
	return br, "", nil
}

// RemoveBareBridge removes bridge br, which must be ours (KeyOwner), when it
// holds nothing but its own internal port; it reports whether it did. The
// removal waits on the ports it read, in the same transaction, so that a
// port another ADD has just added keeps the bridge.
func (c *Client) RemoveBareBridge(ctx context.Context, br Bridge) (bool, error) {
	if br.ExternalIDs[KeyOwner] != OwnerValue {
		return false, nil
	}
	brSel := selectOp(tableBridge, byUUID(br.UUID)...)
	brSel.Columns = []string{"_uuid", "name", "ports"}
	portSel := selectOp(tablePort, cond("name", fnEqual, br.Name))
	portSel.Columns = []string{"_uuid", "name"}
	res, err := c.transact(ctx, brSel, portSel)
	if err != nil {
		return false, fmt.Errorf("reading the ports of bridge %q: %w", br.Name, err)
	}
	brs, err := decode[Bridge](tableBridge, res[0].Rows)
	if err != nil || len(brs) != 1 {
		return false, err
	}
	own, err := decode[Port](tablePort, res[1].Rows)
	if err != nil {
		return false, err
	}
	for _, p := range brs[0].Ports {
		if len(own) != 1 || p != own[0].UUID {
			return false, nil
		}
	}
	uuids := make([]ovsdb.UUID, len(brs[0].Ports))
	for i, p := range brs[0].Ports {
		uuids[i] = uuid(p)
	}
	_, err = c.transact(ctx,
		waitOp(tableBridge, byUUID(br.UUID), []string{"ports"}, untilEqual, 0, ovsdb.Row{"ports": ovsdb.OvsSet{GoSet: anySlice(uuids)}}),
		mutateOp(tableRoot, allRows, mut("bridges", mutDelete, uuid(br.UUID))))
	if err != nil {
		return false, fmt.Errorf("removing bridge %q: %w", br.Name, err)
	}
	return true, nil
}
