package ovsdb

import (
	"context"
	"fmt"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// bumpCfg asks ovs-vswitchd to report, through cur_cfg, when it has applied
// the transaction; SyncPending waits on that.
var bumpCfg = mutateOp(tableRoot, allRows, mut("next_cfg", mutAdd, 1))

// selectRoot selects columns of the root row.
func selectRoot(columns ...string) operation {
	op := selectOp(tableRoot, allRows...)
	op.Columns = columns
	return op
}

// SyncPending waits, only if a change is pending (cur_cfg < next_cfg), until
// ovs-vswitchd has applied it (waitCfg). ADD calls it before creating a
// device whose name a just-removed port may still hold inside ovs-vswitchd
// (a DEL quickly followed by an ADD of the same attachment).
func (c *Client) SyncPending(ctx context.Context) error {
	res, err := c.transact(ctx, selectRoot("next_cfg", "cur_cfg"))
	if err != nil {
		return fmt.Errorf("reading next_cfg: %w", err)
	}
	roots, err := decode[OpenvSwitch](tableRoot, res[0].Rows)
	if err != nil || len(roots) != 1 {
		return fmt.Errorf("reading next_cfg: %v", err)
	}
	if roots[0].CurCfg >= roots[0].NextCfg {
		return nil
	}
	return c.waitCfg(ctx, roots[0].NextCfg)
}

// DetachPortsAndSync removes ports like DetachPorts, then waits until
// ovs-vswitchd has applied the change. A retried ADD needs this before it
// re-creates a device of the same name: if ovs-vswitchd saw the old and the
// new port in one reconfiguration, it would keep reading the deleted device.
func (c *Client) DetachPortsAndSync(ctx context.Context, portUUIDs ...string) error {
	ops := append(detachOps(portUUIDs), bumpCfg, selectRoot("next_cfg"))
	res, err := c.transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("detaching %d port(s): %w", len(portUUIDs), err)
	}
	roots, err := decode[OpenvSwitch](tableRoot, res[len(res)-1].Rows)
	if err != nil || len(roots) != 1 {
		return fmt.Errorf("reading next_cfg: %v", err)
	}
	return c.waitCfg(ctx, roots[0].NextCfg)
}

// waitCfg blocks until ovs-vswitchd's cur_cfg reaches n, or ctx is about to
// end (waitTime): a busy ovs-vswitchd is waited for as long as the caller
// waits, and one that has not applied n by then is endpoint.ErrTimeout.
// Each round is an OVSDB wait for cur_cfg to change, so there is no
// polling; it loops because other clients may bump next_cfg too, and
// cur_cfg can skip n.
func (c *Client) waitCfg(ctx context.Context, n int) error {
	ctx, cancel := endpoint.Bounded(ctx)
	defer cancel()
	start := time.Now()
	cur := -1 // not read yet
	notApplied := func() error {
		return fmt.Errorf("%w: configuration %d not applied within %s (at %d)", endpoint.ErrTimeout, n, time.Since(start).Round(time.Millisecond), cur)
	}
	for {
		res, err := c.transact(ctx, selectRoot("cur_cfg"))
		if err != nil && cur >= 0 && endpoint.Ended(ctx, err) {
			// A wait's answer or the read after it ended with ctx's
			// time (a loaded machine answers late): ovs-vswitchd's
			// delay, not a lost OVSDB.
			return notApplied()
		}
		if err != nil {
			return fmt.Errorf("reading cur_cfg: %w", err)
		}
		roots, err := decode[OpenvSwitch](tableRoot, res[0].Rows)
		if err != nil || len(roots) != 1 {
			return fmt.Errorf("reading cur_cfg: %v", err)
		}
		cur = roots[0].CurCfg
		if cur >= n {
			return nil
		}
		w := waitTime(ctx)
		if w < minWait {
			return notApplied()
		}
		_, err = c.transact(ctx, waitOp(tableRoot, allRows, []string{"cur_cfg"}, untilNotEqual, int(w/time.Millisecond), ovsdb.Row{"cur_cfg": cur}))
		if err != nil && !waitTimedOut(err) && endpoint.Ended(ctx, err) {
			return notApplied()
		}
		if err != nil && !waitTimedOut(err) {
			return fmt.Errorf("waiting for cur_cfg: %w", err)
		}
	}
}

// waitTime is how long a wait operation under ctx may block inside
// ovsdb-server: what is left of ctx (endpoint.Bounded), less the time its
// answer needs to come back (waitGrace, at most half of what is left), so
// that it ends as a wait that timed out (the caller's ErrTimeout), not as a
// connection that did (ErrUnreachable).
func waitTime(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return endpoint.Unbounded
	}
	left := time.Until(dl)
	return left - min(waitGrace, left/2)
}

// minWait is the shortest wait worth sending: with less time left, the
// caller has run out of it.
const minWait = 50 * time.Millisecond
