package orphan

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		n        int
		want     time.Duration
	}{
		{30 * time.Second, 1, 30 * time.Second},
		{30 * time.Second, 2, time.Minute},
		{30 * time.Second, 4, 4 * time.Minute},
		{30 * time.Second, 7, maxBackoff},
		{30 * time.Second, 100, maxBackoff},
		{0, 5, 0},
	} {
		if got := backoff(tc.interval, tc.n); got != tc.want {
			t.Errorf("backoff(%v, %d): got %v, want %v", tc.interval, tc.n, got, tc.want)
		}
	}
}
