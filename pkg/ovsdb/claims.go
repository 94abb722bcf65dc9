package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// ErrPortGone says that the port a change was for no longer exists.
var ErrPortGone = errors.New("the port is gone")

// ClaimedError says that a claim key is held by another port.
type ClaimedError struct {
	Key    string
	Holder Attachment
	Port   string
}

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("%s is already held by attachment %s (port %q)", e.Key, e.Holder, e.Port)
}

// ClaimValue is the value of a held claim key.
const ClaimValue = "1"

// claimOps are the waits, with timeout 0 (they fail at once), that port
// (a UUID or the named UUID of its insert) is the only Port row holding
// each key of claims, and that no Port row holds a key of excludes.
func claimOps(port any, claims, excludes []string) []operation {
	ops := make([]operation, 0, len(claims)+len(excludes))
	for _, k := range claims {
		ops = append(ops, waitOp(tablePort, []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{k: ClaimValue}.ovs())},
			[]string{"_uuid"}, untilEqual, 0, ovsdb.Row{"_uuid": port}))
	}
	for _, k := range excludes {
		ops = append(ops, waitNone(tablePort, cond("external_ids", fnIncludes, strMap{k: ClaimValue}.ovs())))
	}
	return ops
}

// recordOps are RecordOnBridge's transaction.
func recordOps(portUUID string, unset []string, set map[string]string, claims, excludes []string, bridge string, bridgeSet map[string]string) []operation {
	where := byUUID(portUUID)
	ins := make(strMap, len(set)+len(claims))
	for k, v := range set {
		ins[k] = v
	}
	for _, k := range claims {
		ins[k] = ClaimValue
	}
	ops := make([]operation, 0, 3+len(claims))
	if len(unset) > 0 {
		ops = append(ops, mutateOp(tablePort, where, mut("external_ids", mutDelete, strSet(unset...))))
	}
	if len(ins) > 0 {
		ops = append(ops, mutateOp(tablePort, where, mut("external_ids", mutInsert, withSchema(ins).ovs())))
	}
	if bridge != "" && len(bridgeSet) > 0 {
		// Before the claims' waits, which record counts from the end.
		ops = append(ops, mutateOp(tableBridge, []ovsdb.Condition{cond("name", fnEqual, bridge)}, mut("external_ids", mutInsert, strMap(bridgeSet).ovs())))
	}
	ops = append(ops, claimOps(uuid(portUUID), claims, excludes)...)
	if bridge != "" {
		op := selectOp(tableBridge, cond("name", fnEqual, bridge))
		op.Columns = bridgeColumns
		ops = append(ops, op)
	}
	return ops
}

// Record updates our port's external_ids in one transaction: removes the keys
// in unset, sets the keys in set, and takes every key in claims exclusively.
// A claim is a key that at most one Port row may hold; the transaction waits
// (with timeout 0, so it fails at once) for each claim to be held by this port
// alone, so two concurrent claimers cannot both win. A lost claim is a
// *ClaimedError naming the holder.
func (c *Client) Record(ctx context.Context, portUUID string, unset []string, set map[string]string, claims []string) error {
	_, err := c.RecordOnBridge(ctx, portUUID, unset, set, claims, "", nil)
	return err
}

// RecordOnBridge is Record that also reads, in the same transaction, the
// bridge named bridge (unless ""; nil when there is none), and inserts
// bridgeSet in its external_ids (a key it has already keeps its value):
// one round trip where a publish needs both.
func (c *Client) RecordOnBridge(ctx context.Context, portUUID string, unset []string, set map[string]string, claims []string, bridge string, bridgeSet map[string]string) (*Bridge, error) {
	return c.record(ctx, portUUID, unset, set, claims, nil, bridge, bridgeSet)
}

// Claim is Record that also fails, with a *ClaimedError naming the holder,
// while another Port row holds a key of excludes.
func (c *Client) Claim(ctx context.Context, portUUID string, unset []string, set map[string]string, claims, excludes []string) error {
	_, err := c.record(ctx, portUUID, unset, set, claims, excludes, "", nil)
	return err
}

func (c *Client) record(ctx context.Context, portUUID string, unset []string, set map[string]string, claims, excludes []string, bridge string, bridgeSet map[string]string) (*Bridge, error) {
	ops := recordOps(portUUID, unset, set, claims, excludes, bridge, bridgeSet)
	if len(ops) == 0 {
		return nil, nil
	}
	mutates := ops[0].Op == ovsdb.OperationMutate
	res, err := c.transact(ctx, ops...)
	if err == nil {
		if mutates && res[0].Count != 1 {
			return nil, fmt.Errorf("recording on port %s: %w", portUUID, ErrPortGone)
		}
		if bridge == "" {
			return nil, nil
		}
		brs, err := decode[Bridge](tableBridge, res[len(res)-1].Rows)
		if err != nil || len(brs) == 0 {
			return nil, err
		}
		return &brs[0], nil
	}
	if errors.Is(err, ErrUnreachable) {
		return nil, err
	}
	// The wait that did not hold says which.
	keys := append(slices.Clone(claims), excludes...)
	first := len(ops) - len(keys)
	if bridge != "" {
		first--
	}
	if w := timedOutWait(err); w != nil && w.Index >= first && w.Index < first+len(keys) {
		return nil, c.claimed(ctx, keys[w.Index-first], portUUID, err)
	}
	for _, k := range keys {
		var claimed *ClaimedError
		if cerr := c.claimed(ctx, k, portUUID, err); errors.As(cerr, &claimed) {
			return nil, cerr
		}
	}
	return nil, fmt.Errorf("recording on port %s: %w", portUUID, err)
}

// claimed is the *ClaimedError of key, held by a Port row other than self
// ("": any), or err when none is found.
func (c *Client) claimed(ctx context.Context, key, self string, err error) error {
	where := []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{key: ClaimValue}.ovs())}
	if self != "" {
		where = append(where, cond("_uuid", fnNotEqual, uuid(self)))
	}
	r, serr := c.transact(ctx, selectModel[Port](tablePort, where...))
	if serr == nil {
		if ports, derr := decode[Port](tablePort, r[0].Rows); derr == nil && len(ports) > 0 {
			p := OwnedPort{Port: ports[0]}
			return &ClaimedError{Key: key, Holder: p.Attachment(), Port: p.Port.Name}
		}
	}
	return fmt.Errorf("claiming %s: %w", key, err)
}
