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

func TestSocketNeedsAUnixTarget(t *testing.T) {
	if _, err := Socket("tcp:192.0.2.1:6653"); !errors.Is(err, ErrNoSocket) {
		t.Errorf("tcp target: got %v, want ErrNoSocket", err)
	}
	if _, err := Socket("unix:" + filepath.Join(t.TempDir(), "br0.mgmt")); !errors.Is(err, ErrNoSocket) {
		t.Errorf("no pid file: got %v, want ErrNoSocket", err)
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
		if err := SetZoneLimits(context.Background(), target, map[uint16]uint32{64000: 2 * limit, 64002: limit}); err != nil {
			t.Fatal(err)
		}
		sock, err := Socket(target)
		if err != nil {
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
