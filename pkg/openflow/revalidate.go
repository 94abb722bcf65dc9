package openflow

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// A barrier reply means that the flow table has changed, not that the
// datapath's flow cache has: until a revalidator has gone over it, a
// megaflow cached before the change (for example while a host port had no
// flows, between a DEL and an ADD of the same attachment) still steers
// packets the old way, and a connection made right after ADD returns is
// refused. ovs-vswitchd's revalidator/wait command (on its control socket,
// ovs-vswitchd.PID.ctl beside the bridge's management socket) answers once a
// revalidation round has ended after it was registered; a flow change starts
// a round at once. Registered before the change, it answers when the change
// has reached the datapath: 1-5 ms after the commit here. Registered after
// it, it may wait for the next periodic round (max-revalidator, 500 ms).
//
// One case stays open: a round already running when the wait is registered
// (periodic, or started by another plugin's change) ends after the change
// was committed but started before it. The wait then returns early, as if
// it had not been made; rounds last about a millisecond.

// Revalidation is a revalidator/wait registered before a flow change.
type Revalidation struct {
	c net.Conn
	r *bufio.Reader
}

// StartRevalidation registers a revalidator/wait with the ovs-vswitchd that
// serves target; call it before the flow change and Wait after. For a tcp:
// target, or without an ovs-vswitchd pidfile beside the management socket,
// there is no control socket to reach: it returns nil, and Wait on nil
// returns at once.
func StartRevalidation(ctx context.Context, target string) (*Revalidation, error) {
	e, err := endpoint.Parse(target)
	if err != nil || e.Network != "unix" {
		return nil, nil
	}
	dir := filepath.Dir(e.Address)
	pid, err := os.ReadFile(filepath.Join(dir, "ovs-vswitchd.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the ovs-vswitchd pidfile: %w", err)
	}
	ctl := filepath.Join(dir, "ovs-vswitchd."+strings.TrimSpace(string(pid))+".ctl")
	c, err := endpoint.Dial(ctx, "unix", ctl)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", ctl, err)
	}
	if _, err := c.Write(unixctlRequest("revalidator/wait")); err != nil {
		c.Close()
		return nil, fmt.Errorf("revalidator/wait on %s: %w", ctl, err)
	}
	// The wait sends no acknowledgement. A second connection's "version",
	// answered, proves it registered: ovs-vswitchd reads its control
	// connections in the order it accepted them, and the wait's request was
	// written before the second connection was made.
	if err := unixctlCall(ctx, ctl, "version"); err != nil {
		c.Close()
		return nil, err
	}
	return &Revalidation{c: c, r: bufio.NewReader(c)}, nil
}

func unixctlRequest(method string) []byte {
	b, _ := json.Marshal(map[string]any{"id": 0, "method": method, "params": []string{}})
	return b
}

// unixctlCall runs one control command and reads its reply.
func unixctlCall(ctx context.Context, ctl, method string) error {
	c, err := endpoint.Dial(ctx, "unix", ctl)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", ctl, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	defer stop()
	if _, err := c.Write(unixctlRequest(method)); err != nil {
		return fmt.Errorf("%s on %s: %w", method, ctl, err)
	}
	var reply struct {
		Error any `json:"error"`
	}
	if err := json.NewDecoder(c).Decode(&reply); err != nil {
		return fmt.Errorf("%s on %s: %w", method, ctl, err)
	}
	if reply.Error != nil {
		return fmt.Errorf("%s on %s: %v", method, ctl, reply.Error)
	}
	return nil
}

// Wait returns once the revalidation round has ended, or ctx (bounded by
// Timeout) has; it closes the connection.
func (w *Revalidation) Wait(ctx context.Context) error {
	if w == nil {
		return nil
	}
	defer w.c.Close()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { w.c.SetDeadline(aLongTimeAgo) })
	defer stop()
	var reply struct {
		Error any `json:"error"`
	}
	if err := json.NewDecoder(w.r).Decode(&reply); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("revalidator/wait: %w (%v)", ErrTimeout, err)
		}
		return fmt.Errorf("revalidator/wait: reading the reply: %w", err)
	}
	if reply.Error != nil {
		return fmt.Errorf("revalidator/wait: ovs-vswitchd: %v", reply.Error)
	}
	return nil
}

// WaitAtMost is Wait, bounded by limit: a round that has not ended by then
// is not waited for (nil), unless ctx itself ended.
func (w *Revalidation) WaitAtMost(ctx context.Context, limit time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	err := w.Wait(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
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
