package ovsdb

import (
	"context"
	"fmt"
	"slices"
)

// BridgePorts returns every port of bridge name with its interface, ours
// or not (the node tools look for the uplink and for other attachments):
// nil when there is no such bridge. It reads the whole Port and Interface
// tables, which a node tool run by hand can afford and a plugin never
// does.
func (c *Client) BridgePorts(ctx context.Context, name string) ([]OwnedPort, error) {
	br := selectOp(tableBridge, cond("name", fnEqual, name))
	br.Columns = []string{"_uuid", "name", "ports"}
	res, err := c.transact(ctx, br, selectModel[Port](tablePort), selectModel[Interface](tableInterface))
	if err != nil {
		return nil, fmt.Errorf("listing the ports of bridge %q: %w", name, err)
	}
	brs, err := decode[Bridge](tableBridge, res[0].Rows)
	if err != nil || len(brs) == 0 {
		return nil, err
	}
	all, err := joinPorts(res[1].Rows, res[2].Rows)
	if err != nil {
		return nil, err
	}
	var out []OwnedPort
	for _, p := range all {
		if slices.Contains(brs[0].Ports, p.Port.UUID) {
			out = append(out, p)
		}
	}
	return out, nil
}
