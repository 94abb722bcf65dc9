package memo

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestShared: callers that arrive while a read runs share it; while its
// result is fresh they get it without a read; once stale, one new read.
func TestShared(t *testing.T) {
	var reads atomic.Int32
	release := make(chan struct{})
	m := New(func(ctx context.Context) (int32, error) {
		n := reads.Add(1)
		<-release
		return n, nil
	}, time.Minute, time.Minute)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }

	const callers = 50
	var wg sync.WaitGroup
	got := make([]int32, callers)
	started := make(chan struct{}, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			got[i], _ = m.Get(context.Background())
		}()
	}
	for range callers {
		<-started
	}
	// Each caller meets the read under way or its fresh result.
	close(release)
	wg.Wait()
	for i, v := range got {
		if v != 1 {
			t.Errorf("caller %d: got read %d, want 1 (the shared one)", i, v)
		}
	}
	if v, _ := m.Get(context.Background()); v != 1 || reads.Load() != 1 {
		t.Errorf("while fresh: got read %d after %d reads, want 1 after 1", v, reads.Load())
	}
	now = now.Add(time.Minute)
	if v, _ := m.Get(context.Background()); v != 2 {
		t.Errorf("once stale: got read %d, want 2", v)
	}
}

// TestTimeout: a read that hangs ends at its timeout with its context's
// error, for every caller; a caller whose own context ends returns first.
func TestTimeout(t *testing.T) {
	m := New(func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, time.Minute, 50*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Get(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("caller's context cancelled: got %v, want %v", err, context.Canceled)
	}
	if _, err := m.Get(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hanging read: got %v, want %v", err, context.DeadlineExceeded)
	}
}
