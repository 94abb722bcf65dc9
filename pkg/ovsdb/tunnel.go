package ovsdb

import (
	"context"
	"fmt"
	"maps"
	"net/netip"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// OwnerAgentValue (of KeyOwner) marks the rows the node agent creates for
// the node rather than for an attachment: the overlay's tunnel port. The
// plugins and the sweepers of attachments select OwnerValue, so they never
// see, sweep or replay the DEL of such a row.
const OwnerAgentValue = "ovsflow-agent"

// TunnelSpec is a flow-based tunnel port of the overlay (pkg/overlay):
// options:remote_ip=flow and options:key=flow, so that one port reaches
// every peer and the flows choose the peer (tun_dst) and key (tun_id).
type TunnelSpec struct {
	Bridge  string
	Name    string     // the Port's and the Interface's
	Type    string     // "geneve" or "vxlan"
	LocalIP netip.Addr // options:local_ip: this node's InternalIP of the outer family
	// Record are more external_ids of the Port row (the overlay's record,
	// which reconcile rebuilds the flows from).
	Record map[string]string
}

// Tunnel is a tunnel port of the agent's, as found in OVSDB.
type Tunnel struct {
	Port      Port
	Interface Interface
	Options   map[string]string
}

// Bridge is the bridge the tunnel was put on (KeyBridge).
func (t Tunnel) Bridge() string { return t.Port.ExternalIDs[KeyBridge] }

// OFPort is the tunnel's ofport, 0 while it has none.
func (t Tunnel) OFPort() int {
	if t.Interface.OFPort == nil || *t.Interface.OFPort < 0 {
		return 0
	}
	return *t.Interface.OFPort
}

func (s TunnelSpec) options() map[string]string {
	return map[string]string{"remote_ip": "flow", "key": "flow", "local_ip": s.LocalIP.Unmap().String()}
}

func (s TunnelSpec) externalIDs() map[string]string {
	ids := withSchema(s.Record)
	ids[KeyOwner], ids[KeyBridge] = OwnerAgentValue, s.Bridge
	return ids
}

// agentRows selects the rows of the agent's.
var agentRows = []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{KeyOwner: OwnerAgentValue}.ovs())}

// Tunnels returns the agent's tunnel ports.
func (c *Client) Tunnels(ctx context.Context) ([]Tunnel, error) {
	ifaces := selectOp(tableInterface, agentRows...)
	ifaces.Columns = []string{"_uuid", "name", "type", "ofport", "error", "external_ids", "options"}
	res, err := c.transact(ctx, selectModel[Port](tablePort, agentRows...), ifaces)
	if err != nil {
		return nil, fmt.Errorf("listing the tunnel ports: %w", err)
	}
	ports, err := decode[Port](tablePort, res[0].Rows)
	if err != nil {
		return nil, err
	}
	is, err := decode[Interface](tableInterface, res[1].Rows)
	if err != nil {
		return nil, err
	}
	opts, err := decode[struct {
		UUID    string            `ovsdb:"_uuid"`
		Options map[string]string `ovsdb:"options"`
	}](tableInterface, res[1].Rows)
	if err != nil {
		return nil, err
	}
	options := map[string]map[string]string{}
	for _, o := range opts {
		options[o.UUID] = o.Options
	}
	var out []Tunnel
	for _, p := range ports {
		if err := CheckSchema(fmt.Sprintf("port %q", p.Name), p.ExternalIDs); err != nil {
			return nil, err
		}
		t := Tunnel{Port: p}
		for _, i := range is {
			if len(p.Interfaces) == 1 && i.UUID == p.Interfaces[0] {
				t.Interface, t.Options = i, options[i.UUID]
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// EnsureTunnel makes spec the agent's one tunnel port, in one transaction:
// it inserts the Interface and Port rows and adds the port to the bridge,
// or updates the rows of the port of that name already there; any other
// tunnel port of the agent's (another bridge, another name) is removed in
// the same transaction. Nothing is sent when the port is already spec. It
// returns the tunnel port's ofport once ovs-vswitchd has given it one.
func (c *Client) EnsureTunnel(ctx context.Context, spec TunnelSpec) (int, error) {
	have, err := c.Tunnels(ctx)
	if err != nil {
		return 0, err
	}
	ids, opts := spec.externalIDs(), spec.options()
	var ops []operation
	var same *Tunnel
	for i, t := range have {
		if t.Port.Name == spec.Name && t.Bridge() == spec.Bridge {
			same = &have[i]
			continue
		}
		ops = append(ops, detachOps([]string{t.Port.UUID})...)
	}
	switch {
	case same != nil && len(ops) == 0 && same.Interface.Type == spec.Type && maps.Equal(same.Options, opts) &&
		maps.Equal(same.Port.ExternalIDs, ids) && maps.Equal(same.Interface.ExternalIDs, ids):
		// As it should be.
	case same != nil:
		ops = append(ops,
			updateOp(tableInterface, byUUID(same.Interface.UUID), ovsdb.Row{"type": spec.Type, "options": strMap(opts).ovs(), "external_ids": strMap(ids).ovs()}),
			updateOp(tablePort, byUUID(same.Port.UUID), ovsdb.Row{"external_ids": strMap(ids).ovs()}))
	default:
		ops = append(ops,
			insertOp(tableInterface, "tun", ovsdb.Row{"name": spec.Name, "type": spec.Type, "options": strMap(opts).ovs(), "external_ids": strMap(ids).ovs()}),
			insertOp(tablePort, "tunport", ovsdb.Row{"name": spec.Name, "interfaces": named("tun"), "external_ids": strMap(ids).ovs()}),
			mutateOp(tableBridge, []ovsdb.Condition{cond("name", fnEqual, spec.Bridge)}, mut("ports", mutInsert, named("tunport"))))
	}
	if len(ops) > 0 {
		last := len(ops) - 1
		res, err := c.transact(ctx, append(ops, bumpCfg)...)
		if err != nil {
			return 0, fmt.Errorf("tunnel port %q on bridge %q: %w", spec.Name, spec.Bridge, err)
		}
		if res[last].Count != 1 {
			return 0, fmt.Errorf("tunnel port %q: no bridge %q", spec.Name, spec.Bridge)
		}
	}
	return c.WaitOFPort(ctx, spec.Name)
}

// RemoveTunnels removes every tunnel port of the agent's, in one
// transaction, and returns how many there were.
func (c *Client) RemoveTunnels(ctx context.Context) (int, error) {
	have, err := c.Tunnels(ctx)
	if err != nil || len(have) == 0 {
		return 0, err
	}
	var ops []operation
	for _, t := range have {
		ops = append(ops, detachOps([]string{t.Port.UUID})...)
	}
	if _, err := c.transact(ctx, append(ops, bumpCfg)...); err != nil {
		return 0, fmt.Errorf("removing %d tunnel port(s): %w", len(have), err)
	}
	return len(have), nil
}
