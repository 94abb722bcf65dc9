package rollback

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestRunOrder(t *testing.T) {
	var l List
	var got []int
	for i := range 3 {
		l.Arm(func(ctx context.Context) {
			if _, ok := ctx.Deadline(); !ok {
				t.Errorf("step %d: context without deadline", i)
			}
			got = append(got, i)
		})
	}
	l.Run(context.Background())
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("got order %v, want %v", got, want)
	}
	got = nil
	l.Run(context.Background())
	if len(got) != 0 {
		t.Fatalf("second Run ran %v, want nothing", got)
	}
}

// The clean-up of a command runs in the command's time, after its work's
// context has ended: each step alive, the first of three given a third of
// what is left, the last all of it, none past the command's deadline.
func TestRunInTheReserve(t *testing.T) {
	cmd, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	end, _ := cmd.Deadline()
	work, stop := Reserve(cmd, 30*time.Minute)
	if d, _ := work.Deadline(); !d.Equal(end.Add(-30 * time.Minute)) {
		t.Fatalf("work deadline %v, want 30m before the command's %v", d, end)
	}
	stop() // the work failed at once
	var deadlines []time.Time
	var l List
	for range 3 {
		l.Arm(func(ctx context.Context) {
			if err := ctx.Err(); err != nil {
				t.Errorf("step's context: %v, want alive", err)
			}
			d, _ := ctx.Deadline()
			deadlines = append(deadlines, d)
		})
	}
	start := time.Now()
	l.Run(work)
	if len(deadlines) != 3 {
		t.Fatalf("ran %d steps, want 3", len(deadlines))
	}
	// Shares of the hour left, the steps taking no time: a third, half of
	// the rest, the rest.
	for i, want := range []time.Duration{20 * time.Minute, 30 * time.Minute, time.Hour} {
		got := deadlines[i].Sub(start)
		if got < want-time.Minute || got > want+time.Minute {
			t.Errorf("step %d: deadline %v from the start, want about %v", i, got.Round(time.Second), want)
		}
		if deadlines[i].After(end) {
			t.Errorf("step %d: deadline %v past the command's %v", i, deadlines[i], end)
		}
	}
}

// A clean-up under a context without a reserve has Timeout.
func TestDoOwnContext(t *testing.T) {
	Do(context.Background(), func(ctx context.Context) {
		d, ok := ctx.Deadline()
		if !ok || time.Until(d) > Timeout {
			t.Fatalf("got deadline %v (%v), want within %v", d, ok, Timeout)
		}
	})
}

// Do gives its step the whole reserve of the command.
func TestDoReserve(t *testing.T) {
	cmd, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	end, _ := cmd.Deadline()
	work, stop := Reserve(cmd, time.Minute)
	defer stop()
	Do(work, func(ctx context.Context) {
		if d, _ := ctx.Deadline(); !d.Equal(end) {
			t.Fatalf("got deadline %v, want the command's %v", d, end)
		}
	})
}
