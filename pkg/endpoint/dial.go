// Dial makes every connection to the daemons. Its one job
// beyond net.Dialer: a unix socket whose listen backlog is full (ovs-vswitchd
// or ovsdb-server busy while many plugins connect at once) makes connect(2)
// fail at once with EAGAIN, where a TCP connect would wait; Dial waits too,
// retrying with a short backoff until ctx ends, as the OVS tools do.

package endpoint

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// Dial connects to addr on network ("unix" or "tcp") within ctx.
func Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	backoff := 500 * time.Microsecond
	var full error // the last EAGAIN: why the retries went on
	for {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil && full != nil && Ended(ctx, err) {
			// The context ended during a retry: the backlog was full all
			// along, which says more than "i/o timeout".
			return nil, full
		}
		if err == nil || network != "unix" || !errors.Is(err, syscall.EAGAIN) {
			return c, err
		}
		full = err
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		backoff = min(2*backoff, 20*time.Millisecond)
	}
}

// Ended reports whether err says ctx's time is up. The dialer compares the
// deadline with the clock itself and answers "i/o timeout" once it has
// passed, while ctx.Err() stays nil until the context's own timer has run,
// which on a loaded machine comes later.
func Ended(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}
