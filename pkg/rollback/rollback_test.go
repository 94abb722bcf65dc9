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
	l.Run()
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("got order %v, want %v", got, want)
	}
	got = nil
	l.Run()
	if len(got) != 0 {
		t.Fatalf("second Run ran %v, want nothing", got)
	}
}

func TestDoOwnContext(t *testing.T) {
	Do(func(ctx context.Context) {
		d, ok := ctx.Deadline()
		if !ok || time.Until(d) > Timeout {
			t.Fatalf("got deadline %v (%v), want within %v", d, ok, Timeout)
		}
	})
}
