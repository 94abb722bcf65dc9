// Package rollback is the clean-up of a failed ADD: one list, a step armed
// as each step of the ADD succeeds, run last armed first. ovs-bridge's ADD,
// hostport's Publish and ovs-bandwidth's limit all undo through it.
//
// The clean-up has time of its own. A command keeps part of its time back
// from its work (Reserve): the work's context may have ended (ovs-vswitchd
// did not answer in time), and the clean-up must still run, and end before
// the runtime kills the plugin. Each step gets an even share of what is
// left of that time, so that a step waiting on an ovs-vswitchd that does
// not answer leaves the steps after it theirs (the port's row, the veth,
// the claims, the address).
package rollback

import (
	"context"
	"time"
)

// Timeout bounds a clean-up run under a context that no command reserved
// time in (Reserve): a caller outside the plugins' commands.
const Timeout = 10 * time.Second

// reserveKey is the context key of the time a clean-up has: the deadline of
// the command whose work the context is.
type reserveKey struct{}

// Reserve returns the context of a command's work: ctx, ending keep before
// ctx's deadline, and carrying that deadline for the clean-up run under it
// (Run, Do). A ctx without a deadline is returned as it is.
func Reserve(ctx context.Context, keep time.Duration) (context.Context, context.CancelFunc) {
	end, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	work, cancel := context.WithDeadline(ctx, end.Add(-keep))
	return context.WithValue(work, reserveKey{}, end), cancel
}

// until is when a clean-up under ctx must have ended: the deadline of the
// command that reserved time in ctx, else Timeout from now.
func until(ctx context.Context) time.Time {
	if end, ok := ctx.Value(reserveKey{}).(time.Time); ok {
		return end
	}
	return time.Now().Add(Timeout)
}

// List is the clean-up armed so far; the zero List is empty.
type List struct {
	steps []func(context.Context)
}

// Arm adds f, to run before every step armed earlier.
func (l *List) Arm(f func(context.Context)) {
	l.steps = append(l.steps, f)
}

// Run runs the armed steps, the last armed first, and empties the list.
// ctx is the work's (it may have ended): each step gets a context of its
// own with an even share of the clean-up time left (until).
func (l *List) Run(ctx context.Context) {
	end := until(ctx)
	for i := len(l.steps) - 1; i >= 0; i-- {
		now := time.Now()
		step(ctx, now.Add(end.Sub(now)/time.Duration(i+1)), l.steps[i])
	}
	l.steps = nil
}

// Do runs one clean-up step f with all the clean-up time left under ctx
// (the work's, which may have ended).
func Do(ctx context.Context, f func(context.Context)) {
	step(ctx, until(ctx), f)
}

// step runs f with a context that ends at deadline, not with ctx: values
// stay (a nested clean-up finds the same reserve), cancellation goes.
func step(ctx context.Context, deadline time.Time, f func(context.Context)) {
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	f(sctx)
}
