package framework

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Parallel runs f for i in [0,n) on n goroutines and collects the errors.
func Parallel(n int, f func(i int) error) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = f(i)
		}(i)
	}
	wg.Wait()
	return errs
}

// Allocations lists the addresses host-local holds in dataDir for network.
func Allocations(t testing.TB, dataDir, network string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, network))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}
