package unixctl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/jsonrpc"
)

// A barrier reply means that the flow table has changed, not that the
// datapath's flow cache has: until a revalidator has gone over it, a
// megaflow cached before the change (for example while a host port had no
// flows, between a DEL and an ADD of the same attachment) still steers
// packets the old way, and a connection made right after ADD returns is
// refused. ovs-vswitchd's revalidator/wait command answers once a
// revalidation round has ended after it was registered; a flow change starts
// a round at once. Registered before the change, it answers when the change
// has reached the datapath: 1-5 ms after the commit. Registered after it, it
// may wait for the next periodic round (max-revalidator, 500 ms).
//
// One case stays open: a round already running when the wait is registered
// (periodic, or started by another plugin's change) ends after the change
// was committed but started before it. The wait then returns early, as if
// it had not been made; rounds last about a millisecond.

// Revalidation is a revalidator/wait registered before a flow change.
type Revalidation struct {
	c   *jsonrpc.Conn
	req *jsonrpc.Request
}

// StartRevalidation registers a revalidator/wait with the ovs-vswitchd whose
// control socket is sock (Find); call it before the flow change and Wait
// after. Without a socket (sock "") it returns nil, and Wait on nil returns
// at once.
func StartRevalidation(ctx context.Context, sock string) (*Revalidation, error) {
	if sock == "" {
		return nil, nil
	}
	c, err := jsonrpc.Dial(ctx, endpoint.Endpoint{Network: "unix", Address: sock})
	if err != nil {
		return nil, fmt.Errorf("ovs-vswitchd control socket %s: %w", sock, timedOut(err))
	}
	req, err := c.Send(ctx, "revalidator/wait", []string{})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("revalidator/wait on %s: %w", sock, timedOut(err))
	}
	// The wait sends no acknowledgement. A second connection's "version",
	// answered, proves it registered: ovs-vswitchd reads its control
	// connections in the order it accepted them, and the wait's request was
	// written before the second connection was made.
	if _, err := call(ctx, sock, "version"); err != nil {
		c.Close()
		return nil, err
	}
	return &Revalidation{c: c, req: req}, nil
}

// Wait returns once the revalidation round has ended, or ctx has (as an
// OpenFlow call, endpoint.Bounded); it closes the connection.
func (w *Revalidation) Wait(ctx context.Context) error {
	if w == nil {
		return nil
	}
	defer w.c.Close()
	ctx, cancel := endpoint.Bounded(ctx)
	defer cancel()
	err := w.req.Wait(ctx, nil)
	var rpcErr *jsonrpc.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &rpcErr):
		return fmt.Errorf("revalidator/wait: ovs-vswitchd: %s", rpcErr.Detail)
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("revalidator/wait: %w (%v)", endpoint.ErrTimeout, err)
	}
	return fmt.Errorf("revalidator/wait: reading the reply: %w", err)
}

// WaitAtMost is Wait, bounded by limit: a round that has not ended by then
// is not waited for (nil), unless ctx itself ended.
func (w *Revalidation) WaitAtMost(ctx context.Context, limit time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err := w.Wait(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, endpoint.ErrTimeout) {
		return nil
	}
	return err
}

// Close gives up a registered wait.
func (w *Revalidation) Close() {
	if w != nil {
		w.c.Close()
	}
}
