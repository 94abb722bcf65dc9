package filelock

import (
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
)

// While f runs another process cannot take the lock (flock(1) -n), after
// With it can; f's error is With's.
func TestWithExcludesAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	try := func() error { return exec.Command("flock", "-n", path, "true").Run() }
	want := errors.New("f's")
	err := With(path, func() error {
		if try() == nil {
			t.Error("another process took the lock while f held it")
		}
		return want
	})
	if !errors.Is(err, want) {
		t.Errorf("With: %v, want f's error", err)
	}
	if err := try(); err != nil {
		t.Errorf("another process after With: %v", err)
	}
}
