// Package filelock serialises the harness's processes (several prefixes,
// CI's background build) on a file of this machine.
package filelock

import (
	"fmt"
	"os"
	"syscall"
)

// With runs f holding an exclusive flock on path (made if missing); the
// lock goes with the file's close, or with the process.
func With(path string, f func() error) error {
	l, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := syscall.Flock(int(l.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", path, err)
	}
	return f()
}
