// Package memo runs an expensive read at most once at a time and keeps its
// result for a while: the callers that arrive while it runs, or while its
// result is fresh, share it. The node agent reads OVS this way for its
// probes and its metrics, so that the number of scrapers and probes does
// not set the load on ovsdb-server and ovs-vswitchd.
package memo

import (
	"context"
	"sync"
	"time"
)

// Value is the shared result of one read.
type Value[T any] struct {
	read    func(context.Context) (T, error)
	fresh   time.Duration
	timeout time.Duration
	now     func() time.Time

	mu     sync.Mutex
	flight *call[T] // the read under way, nil when none
	last   *call[T] // the last read done, nil before the first
	at     time.Time
}

type call[T any] struct {
	done chan struct{} // closed once v and err are set
	v    T
	err  error
}

// New returns the Value of read: its result (errors included) is kept for
// fresh after it is done, and each run of read gets a context that ends
// after timeout, whoever waits for it.
func New[T any](read func(context.Context) (T, error), fresh, timeout time.Duration) *Value[T] {
	return &Value[T]{read: read, fresh: fresh, timeout: timeout, now: time.Now}
}

// Get returns the last result while it is fresh, else that of the read
// under way, else starts one. A caller whose ctx ends first gets ctx's
// error; the read goes on for the others, up to its timeout.
func (m *Value[T]) Get(ctx context.Context) (T, error) {
	m.mu.Lock()
	if m.last != nil && m.now().Sub(m.at) < m.fresh {
		c := m.last
		m.mu.Unlock()
		return c.v, c.err
	}
	c := m.flight
	if c == nil {
		c = &call[T]{done: make(chan struct{})}
		m.flight = c
		go m.run(c)
	}
	m.mu.Unlock()
	select {
	case <-c.done:
		return c.v, c.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (m *Value[T]) run(c *call[T]) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	c.v, c.err = m.read(ctx)
	m.mu.Lock()
	m.flight, m.last, m.at = nil, c, m.now()
	m.mu.Unlock()
	close(c.done)
}
