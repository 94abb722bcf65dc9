package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/topology"
)

// A wrong use of conformance is said before anything is built or run.
func TestConformanceUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-selection", "all"},
		{"-chain", "cilium"},
		{"-procs", "0"},
		{"-procs", "100"},
		{"extra"},
	} {
		if err := cmdConformance(env{}, args); !errors.Is(err, errUsage) {
			t.Errorf("conformance %q: got %v, want a usage error", args, err)
		}
	}
	plan, err := topology.FromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OID_SVC4", "203.0.113.192/27")
	err = cmdConformance(env{plan: plan}, []string{"-selection", "network"})
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "too small") {
		t.Errorf("-selection network with a /27 Service range: got %v, want a usage error saying it is too small", err)
	}
}

func TestStale(t *testing.T) {
	d := t.TempDir()
	in, out := filepath.Join(d, "in"), filepath.Join(d, "out")
	if !stale(out, in) {
		t.Error("a missing output is not stale")
	}
	for _, f := range []string{in, out} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(in, old, old); err != nil {
		t.Fatal(err)
	}
	if stale(out, in) {
		t.Error("an output newer than its input is stale")
	}
	if err := os.Chtimes(out, old.Add(-time.Hour), old.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !stale(out, in) {
		t.Error("an output older than its input is not stale")
	}
	if !stale(out, filepath.Join(d, "missing")) {
		t.Error("an output of a missing input is not stale")
	}
}
