package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// ErrNoPort says that the attachment has no port of ours.
var ErrNoPort = errors.New("no port of the attachment")

// QoS is a row of table QoS.
type QoS struct {
	UUID        string            `ovsdb:"_uuid"`
	Type        string            `ovsdb:"type"`
	OtherConfig map[string]string `ovsdb:"other_config"`
	ExternalIDs map[string]string `ovsdb:"external_ids"`
}

// Queue is a row of table Queue.
type Queue struct {
	UUID        string            `ovsdb:"_uuid"`
	OtherConfig map[string]string `ovsdb:"other_config"`
	ExternalIDs map[string]string `ovsdb:"external_ids"`
}

// portQoS is the qos column of a Port, read apart from the Port model that
// every command decodes.
type portQoS struct {
	UUID string  `ovsdb:"_uuid"`
	QoS  *string `ovsdb:"qos"`
}

const (
	tableQoS   = "QoS"
	tableQueue = "Queue"
)

// QoSSpec is the QoS of one attachment's port: a QoS row of Type with
// OtherConfig and a single queue 0 with QueueConfig, which takes every
// packet the port sends (no flow sets another queue). ExternalIDs must hold
// the attachment's identity keys (owner, container ID, ifname) and should
// hold its network: the rows are found and removed by them.
type QoSSpec struct {
	Type        string
	OtherConfig map[string]string
	QueueConfig map[string]string
	ExternalIDs map[string]string
}

// AttachmentQoS is what OVSDB holds of an attachment's port QoS: the rows
// tagged with its identity, and the QoS the port uses (nil: none, or no
// port).
type AttachmentQoS struct {
	QoS    []QoS
	Queues []Queue
	// PortQoS is the UUID in the port's qos column.
	PortQoS *string
}

// SetPortQoS gives our port of attachment a the QoS of spec (nil: none) and
// sets the keys of set (after removing those of unset) in its
// external_ids, in one transaction: the QoS and Queue rows tagged with a's
// identity go, new ones go in, the port points at the new QoS. It then
// waits until ovs-vswitchd has applied it (until ctx ends: waitCfg).
// Without the port, it changes nothing and fails with ErrNoPort.
func (c *Client) SetPortQoS(ctx context.Context, a Attachment, spec *QoSSpec, set map[string]string, unset []string) error {
	// The port must be there (a wait that fails at once otherwise): rows
	// of no port would be left behind.
	ops := append([]operation{waitOp(tablePort, a.where(), []string{"_uuid"}, untilNotEqual, 0)}, qosDeleteOps(a)...)
	var qos any = strSet()
	if spec != nil {
		ids := strMap(maps.Clone(spec.ExternalIDs))
		if ids == nil {
			ids = strMap{}
		}
		ids[KeyOwner], ids[KeyContainerID], ids[KeyIfName] = OwnerValue, a.ContainerID, a.IfName
		ops = append(ops,
			insertOp(tableQueue, "queue0", ovsdb.Row{"other_config": strMap(spec.QueueConfig).ovs(), "external_ids": ids.ovs()}),
			insertOp(tableQoS, "qos", ovsdb.Row{"type": spec.Type, "other_config": strMap(spec.OtherConfig).ovs(),
				"queues": ovsdb.OvsMap{GoMap: map[any]any{0: named("queue0")}}, "external_ids": ids.ovs()}))
		qos = named("qos")
	}
	ops = append(ops, updateOp(tablePort, a.where(), ovsdb.Row{"qos": qos}))
	ops = append(ops, externalIDsOps(a, set, unset)...)
	ops = append(ops, bumpCfg, selectRoot("next_cfg"))
	res, err := c.transact(ctx, ops...)
	if waitTimedOut(err) {
		return fmt.Errorf("setting the QoS of port %s: %w", a, ErrNoPort)
	}
	if err != nil {
		return fmt.Errorf("setting the QoS of port %s: %w", a, err)
	}
	roots, err := decode[OpenvSwitch](tableRoot, res[len(res)-1].Rows)
	if err != nil || len(roots) != 1 {
		return fmt.Errorf("reading next_cfg: %v", err)
	}
	return c.waitCfg(ctx, roots[0].NextCfg)
}

// externalIDsOps remove the keys of unset and set from the external_ids of
// a's port, then insert set.
func externalIDsOps(a Attachment, set map[string]string, unset []string) []operation {
	keys := append(slices.Clone(unset), strMap(set).keys()...)
	if len(keys) == 0 {
		return nil
	}
	muts := []ovsdb.Mutation{mut("external_ids", mutDelete, strSet(keys...))}
	if len(set) > 0 {
		muts = append(muts, mut("external_ids", mutInsert, strMap(set).ovs()))
	}
	return []operation{mutateOp(tablePort, a.where(), muts...)}
}

// ClearPortQoS removes the QoS of each attachment, and the keys of unset
// from its port's external_ids, in one transaction: its port (if any) has
// no QoS, and the QoS and Queue rows tagged with its identity go. None is
// no error.
func (c *Client) ClearPortQoS(ctx context.Context, unset []string, a ...Attachment) error {
	var ops []operation
	for _, at := range a {
		ops = append(ops, updateOp(tablePort, at.where(), ovsdb.Row{"qos": strSet()}))
		ops = append(ops, qosDeleteOps(at)...)
		ops = append(ops, externalIDsOps(at, nil, unset)...)
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := c.transact(ctx, ops...); err != nil {
		return fmt.Errorf("removing the QoS of %d attachment(s): %w", len(a), err)
	}
	return nil
}

// qosDeleteOps delete the QoS and Queue rows of attachment a.
func qosDeleteOps(a Attachment) []operation {
	return []operation{deleteOp(tableQoS, a.where()...), deleteOp(tableQueue, a.where()...)}
}

// PortQoS reads what OVSDB holds of the QoS of attachment a.
func (c *Client) PortQoS(ctx context.Context, a Attachment) (AttachmentQoS, error) {
	res, err := c.transact(ctx, selectModel[QoS](tableQoS, a.where()...), selectModel[Queue](tableQueue, a.where()...),
		selectModel[portQoS](tablePort, a.where()...))
	if err != nil {
		return AttachmentQoS{}, fmt.Errorf("reading the QoS of port %s: %w", a, err)
	}
	var out AttachmentQoS
	if out.QoS, err = decode[QoS](tableQoS, res[0].Rows); err != nil {
		return out, err
	}
	if out.Queues, err = decode[Queue](tableQueue, res[1].Rows); err != nil {
		return out, err
	}
	ports, err := decode[portQoS](tablePort, res[2].Rows)
	if err != nil {
		return out, err
	}
	if len(ports) == 1 {
		out.PortQoS = ports[0].QoS
	}
	return out, nil
}

// OwnedQoSAttachments lists the attachments that QoS or Queue rows of ours
// are tagged with, each with the network it records ("" when none).
func (c *Client) OwnedQoSAttachments(ctx context.Context) (map[Attachment]string, error) {
	where := []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{KeyOwner: OwnerValue}.ovs())}
	res, err := c.transact(ctx, selectModel[QoS](tableQoS, where...), selectModel[Queue](tableQueue, where...))
	if err != nil {
		return nil, fmt.Errorf("listing our QoS rows: %w", err)
	}
	qos, err := decode[QoS](tableQoS, res[0].Rows)
	if err != nil {
		return nil, err
	}
	queues, err := decode[Queue](tableQueue, res[1].Rows)
	if err != nil {
		return nil, err
	}
	out := map[Attachment]string{}
	add := func(ids map[string]string) {
		out[Attachment{ContainerID: ids[KeyContainerID], IfName: ids[KeyIfName]}] = ids[KeyNetwork]
	}
	for _, q := range qos {
		add(q.ExternalIDs)
	}
	for _, q := range queues {
		add(q.ExternalIDs)
	}
	return out, nil
}
