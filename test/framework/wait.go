package framework

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// PollInterval is how often Until and Eventually look again. Short enough
// that a wait ends soon after its condition holds, long enough that a
// condition which costs a round trip to OVSDB does not load the machine.
const PollInterval = 50 * time.Millisecond

// Until calls cond until it reports true or Scaled(timeout) has passed, and
// reports whether it did. It is the suites' one polling loop: a test waits
// for the thing it waits for, with a deadline, never for a fixed time.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(Scaled(timeout))
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(PollInterval)
	}
	return true
}

// Eventually calls cond until it returns nil, and fails the test with what
// and cond's last error when Scaled(timeout) passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	if err := Wait(timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Wait calls cond until it returns nil; when Scaled(timeout) passes first it
// returns cond's last error, wrapped with how long it waited.
func Wait(timeout time.Duration, cond func() error) error {
	var last error
	ok := Until(timeout, func() bool { last = cond(); return last == nil })
	if ok {
		return nil
	}
	if last == nil {
		last = errors.New("condition not met")
	}
	return fmt.Errorf("not within %v: %w", Scaled(timeout), last)
}

// Consistently calls cond for Scaled(d) and fails the test at the first
// error: for what must stay true (a blocked attack stays blocked). Time is
// the subject here, so the wait is fixed by design.
func Consistently(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(Scaled(d))
	for {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(PollInterval)
	}
}
