package endpoint

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// listenFull returns a unix listener with a backlog of 1 that nobody accepts
// on, and connects clients until connect(2) answers EAGAIN.
func listenFull(t *testing.T) (net.Listener, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 1); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), path)
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var d net.Dialer
	for i := 0; ; i++ {
		c, err := d.Dial("unix", path)
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil || i > 100 {
			t.Fatalf("filling the backlog: %d connects, %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
	}
	return l, path
}

func TestDialWaitsForAFullBacklog(t *testing.T) {
	l, path := listenFull(t)
	go func() {
		time.Sleep(50 * time.Millisecond) // time is the subject: the backlog stays full a while, so Dial meets it full
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, "unix", path)
	if err != nil {
		t.Fatalf("Dial with the backlog full, then accepting: %v", err)
	}
	c.Close()
}

func TestDialGivesUpWithTheContext(t *testing.T) {
	_, path := listenFull(t)
	// Long enough that even a loaded machine makes a first attempt (which
	// meets the full backlog) before the context ends: at a load of 15 on
	// 2 cores, 1 s was not (the first attempt found the context ended).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	_, err := Dial(ctx, "unix", path)
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("Dial with the backlog full and nobody accepting: %v, want EAGAIN", err)
	}
	// Against the context's own deadline: a clock started after
	// WithTimeout (as this test had it) runs short under load.
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("gave up %s before the context ended", deadline.Sub(now))
	}
}

// lateContext has a deadline whose Done and Err come late, as a context's
// timer does on a loaded machine: the dialer sees the deadline pass first.
type lateContext struct {
	context.Context
	deadline time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.deadline, true }

func TestDialGivesUpWithALateContext(t *testing.T) {
	_, path := listenFull(t)
	late, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	ctx := lateContext{late, time.Now().Add(30 * time.Millisecond)}
	_, err := Dial(ctx, "unix", path)
	if !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("Dial with the backlog full, the deadline passed and the context not yet done: %v, want EAGAIN", err)
	}
}

func TestDialRefusedAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Dial(ctx, "unix", path); err == nil || errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("Dial to a missing socket: %v, want an immediate error", err)
	}
}
