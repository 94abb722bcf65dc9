package cli

import (
	"strings"
	"testing"
)

func TestCountTests(t *testing.T) {
	out := `=== RUN   TestA
--- PASS: TestA (0.01s)
=== RUN   TestB
=== RUN   TestB/one
=== RUN   TestB/two
    --- PASS: TestB/one (0.00s)
    --- FAIL: TestB/two (0.00s)
--- FAIL: TestB (0.00s)
--- SKIP: TestC (0.00s)
    --- PASS: TestBB (0.00s)
FAIL
`
	got := countTests(strings.NewReader(out))
	if want := (counts{passed: 3, failed: 1, skipped: 1}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
