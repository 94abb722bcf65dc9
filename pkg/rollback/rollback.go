// Package rollback is the clean-up of a failed ADD: one list, a step armed
// as each step of the ADD succeeds, run last armed first, each with a
// bounded context of its own (the command's may have expired, and clean-up
// must not hang). ovs-bridge's ADD, hostport.Publish and ovs-bandwidth's
// limit all undo through it.
package rollback

import (
	"context"
	"time"
)

// Timeout bounds each step of a clean-up.
const Timeout = 10 * time.Second

// List is the clean-up armed so far; the zero List is empty.
type List struct {
	steps []func(context.Context)
}

// Arm adds f, to run before every step armed earlier.
func (l *List) Arm(f func(context.Context)) {
	l.steps = append(l.steps, f)
}

// Run runs the armed steps, the last armed first, and empties the list.
func (l *List) Run() {
	for i := len(l.steps) - 1; i >= 0; i-- {
		Do(l.steps[i])
	}
	l.steps = nil
}

// Do runs one clean-up step f with a context bounded by Timeout.
func Do(f func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	f(ctx)
}
