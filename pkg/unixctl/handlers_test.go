package unixctl

import (
	"errors"
	"maps"
	"slices"
	"testing"
)

func TestMemoryCounts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]int
	}{
		{"handlers:2 idl-cells-Open_vSwitch:812 ports:3 revalidators:1 rules:9 udpif keys:4",
			map[string]int{"handlers": 2, "idl-cells-Open_vSwitch": 812, "ports": 3, "revalidators": 1, "rules": 9, "udpif keys": 4}},
		{"idl-cells-Open_vSwitch:812 ports:3 revalidators:1 rules:9\n", map[string]int{"idl-cells-Open_vSwitch": 812, "ports": 3, "revalidators": 1, "rules": 9}},
		{"", map[string]int{}},
		{"garbage", map[string]int{}},
	} {
		if got := MemoryCounts(tc.in); !maps.Equal(got, tc.want) {
			t.Errorf("MemoryCounts(%q): got %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestPerCPU(t *testing.T) {
	got := PerCPU("ovs-system: per-cpu dispatch mode\nother: per-vport dispatch mode\n")
	if !slices.Equal(got, []string{"ovs-system"}) {
		t.Errorf("got %v, want [ovs-system]", got)
	}
}

func TestUpcallsErr(t *testing.T) {
	for _, tc := range []struct {
		u    Upcalls
		want bool
	}{
		{Upcalls{PerCPU: []string{"ovs-system"}, Revalidators: 1}, true},
		{Upcalls{PerCPU: []string{"ovs-system"}, Revalidators: 1, Handlers: 2}, false},
		{Upcalls{PerCPU: []string{"ovs-system"}}, false}, // flow-restore-wait: no thread yet
		{Upcalls{Revalidators: 1}, false},                // per-vport: a handler per port
	} {
		if got := errors.Is(tc.u.Err(), ErrNoUpcallHandler); got != tc.want {
			t.Errorf("%+v: got %v, want %v", tc.u, tc.u.Err(), tc.want)
		}
	}
}
