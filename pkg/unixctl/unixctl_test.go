package unixctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	t.Setenv("OVS_RUNDIR", filepath.Join(t.TempDir(), "none"))
	if _, err := Find("tcp:192.0.2.1:6653", ""); !errors.Is(err, ErrNoSocket) {
		t.Errorf("tcp target: got %v, want ErrNoSocket", err)
	}
	dir := t.TempDir()
	target := "unix:" + filepath.Join(dir, "br0.mgmt")
	if _, err := Find(target, ""); !errors.Is(err, ErrNoSocket) {
		t.Errorf("no pid file: got %v, want ErrNoSocket", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ovs-vswitchd.pid"), []byte("42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(target, ""); !errors.Is(err, ErrNoSocket) {
		t.Errorf("pid file naming a missing socket: got %v, want ErrNoSocket", err)
	}
	want := filepath.Join(dir, "ovs-vswitchd.42.ctl")
	if err := os.WriteFile(want, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Find(target, ""); got != want || err != nil {
		t.Errorf("from the target's run dir: got %q, %v; want %q", got, err, want)
	}
	// OVS_RUNDIR, as ovs-appctl, for a tcp: target.
	t.Setenv("OVS_RUNDIR", dir)
	if got, err := Find("tcp:192.0.2.1:6653", ""); got != want || err != nil {
		t.Errorf("from OVS_RUNDIR: got %q, %v; want %q", got, err, want)
	}
	// Given: taken when it is there, ErrNoSocket naming it when not.
	if got, err := Find(target, want); got != want || err != nil {
		t.Errorf("given: got %q, %v; want %q", got, err, want)
	}
	missing := filepath.Join(dir, "other.ctl")
	if _, err := Find(target, missing); !errors.Is(err, ErrNoSocket) || !strings.Contains(err.Error(), missing) {
		t.Errorf("given, missing: got %v, want ErrNoSocket naming %s", err, missing)
	}
}

// TestSetZoneLimits sets limits on a real ovs-vswitchd and reads them back
// with ovs-appctl.
func TestSetZoneLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root (a private Open vSwitch in a network namespace)")
	}
	name := fmt.Sprintf("ovsflow-unixctl-%d", os.Getpid())
	out, err := exec.Command("../../hack/ovs-sandbox.sh", "start", name).Output()
	t.Cleanup(func() { exec.Command("../../hack/ovs-sandbox.sh", "stop", name).Run() })
	if err != nil {
		t.Fatalf("sandbox: %v", err)
	}
	var db, rundir string
	for _, l := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "OVSDB":
			db = v
		case "RUNDIR":
			rundir = v
		}
	}
	if b, err := exec.Command("ip", "netns", "exec", name, "ovs-vsctl", "--db="+db, "add-br", "ucbr0", "--",
		"set", "bridge", "ucbr0", "datapath_type=netdev").CombinedOutput(); err != nil {
		t.Fatalf("add-br: %v: %s", err, b)
	}
	target := "unix:" + filepath.Join(rundir, "ucbr0.mgmt")
	for _, limit := range []uint32{300, 0} {
		sock, err := Find(target, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := SetZoneLimits(context.Background(), sock, map[uint16]uint32{64000: 2 * limit, 64002: limit}); err != nil {
			t.Fatal(err)
		}
		b, err := exec.Command("ovs-appctl", "-t", sock, "dpctl/ct-get-limits", "zone=64000,64002").CombinedOutput()
		if err != nil {
			t.Fatalf("ct-get-limits: %v: %s", err, b)
		}
		for _, want := range []string{fmt.Sprintf("zone=64000,limit=%d,", 2*limit), fmt.Sprintf("zone=64002,limit=%d,", limit)} {
			if !strings.Contains(string(b), want) {
				t.Errorf("limits %d: got\n%s\nwant %q", limit, b, want)
			}
		}
	}
}

func TestZoneLimitArgs(t *testing.T) {
	got := strings.Join(ZoneLimitArgs(map[uint16]uint32{64002: 0, 64000: 100, 64001: 100}), " ")
	if want := "zone=64000,limit=100 zone=64001,limit=100 zone=64002,limit=0"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
