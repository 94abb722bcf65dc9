package ovsdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/jsonrpc"
)

// VswitchdWatch follows ovs-vswitchd's life through OVSDB itself: every
// ovs-vswitchd holds the OVSDB lock "ovs_vswitchd" (RFC 7047 section 4.1.8)
// for as long as it runs. The watch queues a request for that lock behind it;
// ovsdb-server grants it the moment ovs-vswitchd dies (crash, kill -9, stop),
// and the watch gives it back at once, so that the next ovs-vswitchd can take
// it.
type VswitchdWatch struct {
	c *jsonrpc.Conn
}

const vswitchdLock = "ovs_vswitchd"

// WatchVswitchd connects to the OVSDB endpoint for watching.
func WatchVswitchd(ctx context.Context, ep endpoint.Endpoint) (*VswitchdWatch, error) {
	c, err := jsonrpc.Dial(ctx, ep)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	return &VswitchdWatch{c: c}, nil
}

// Close ends the watch (and releases any lock request).
func (w *VswitchdWatch) Close() { w.c.Close() }

// WaitRunning returns once an ovs-vswitchd holds its lock, with this watch's
// request queued behind it. It checks every interval while none runs.
func (w *VswitchdWatch) WaitRunning(ctx context.Context, interval time.Duration) error {
	for {
		var r struct {
			Locked bool `json:"locked"`
		}
		if err := w.c.Call(ctx, "lock", []string{vswitchdLock}, &r); err != nil {
			return err
		}
		if !r.Locked {
			return nil // held by ovs-vswitchd; ours is queued
		}
		// Nobody runs: give the lock straight back and look again.
		if err := w.c.Call(ctx, "unlock", []string{vswitchdLock}, nil); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// WaitGone blocks until the running ovs-vswitchd lets go of its lock (it
// stopped or died), then calls hold (if not nil), then releases the lock for
// its successor: what hold commits to OVSDB is what the successor starts
// with (see SetFlowRestoreWait). An error of hold is returned after the lock
// is released.
func (w *VswitchdWatch) WaitGone(ctx context.Context, hold func(context.Context) error) error {
	for {
		m, err := w.c.Next(ctx)
		if err != nil {
			return err
		}
		if m.Method == "locked" {
			var name string
			if len(m.Params) > 0 && json.Unmarshal(m.Params[0], &name) == nil && name == vswitchdLock {
				var held error
				if hold != nil {
					held = hold(ctx)
				}
				return errors.Join(w.c.Call(ctx, "unlock", []string{vswitchdLock}, nil), held)
			}
		}
	}
}

// Running reports whether an ovs-vswitchd holds its lock now; a request of
// the watch's that is queued behind it is given up.
func (w *VswitchdWatch) Running(ctx context.Context) (bool, error) {
	var r struct {
		Locked bool `json:"locked"`
	}
	if err := w.c.Call(ctx, "lock", []string{vswitchdLock}, &r); err != nil {
		return false, err
	}
	// Granted (none runs) or queued: either way it goes back.
	return !r.Locked, w.c.Call(ctx, "unlock", []string{vswitchdLock}, nil)
}
