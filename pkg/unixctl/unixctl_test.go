package unixctl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/internal/ovstest"
)

func TestFind(t *testing.T) {
	tcpTarget := endpoint.Endpoint{Network: "tcp", Address: "127.0.0.1:6653"}
	t.Setenv("OVS_RUNDIR", filepath.Join(t.TempDir(), "none"))
	if _, err := Find(tcpTarget, ""); !errors.Is(err, ErrNoSocket) {
		t.Errorf("tcp target: got %v, want ErrNoSocket", err)
	}
	dir := t.TempDir()
	target := endpoint.Endpoint{Network: "unix", Address: filepath.Join(dir, "br0.mgmt")}
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
	if got, err := Find(tcpTarget, ""); got != want || err != nil {
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

func TestMain(m *testing.M) {
	code := m.Run()
	ovstest.Stop()
	os.Exit(code)
}

// bridge adds a netdev bridge to the test binary's private Open vSwitch and
// returns its OpenFlow target.
func bridge(t *testing.T, name string) endpoint.Endpoint {
	t.Helper()
	sb := ovstest.Require(t, "ovsflow-unixctl", "ovs-vsctl", "ovs-ofctl", "ovs-appctl", "ovsdb-server", "ovs-vswitchd")
	if b, err := exec.Command("ovs-vsctl", "--db="+sb.DB, "--timeout=10", "add-br", name, "--",
		"set", "bridge", name, "datapath_type=netdev").CombinedOutput(); err != nil {
		t.Fatalf("add-br: %v: %s", err, b)
	}
	t.Cleanup(func() { exec.Command("ovs-vsctl", "--db="+sb.DB, "--timeout=10", "del-br", name).Run() })
	return endpoint.Endpoint{Network: "unix", Address: filepath.Join(sb.RunDir, name+".mgmt")}
}

// TestSetZoneLimits sets limits on a real ovs-vswitchd and reads them back
// with ovs-appctl.
func TestSetZoneLimits(t *testing.T) {
	target := bridge(t, "ucbr0")
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

// A revalidation wait registered before a flow change reaches ovs-vswitchd's
// control socket and ends after the change; it is nil without a socket, and
// fails on a socket that is not there.
func TestRevalidation(t *testing.T) {
	target := bridge(t, "ucbr1")
	sock, err := Find(target, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := StartRevalidation(ctx, sock)
	if err != nil || w == nil {
		t.Fatalf("on %s: %v, %v", sock, w, err)
	}
	if b, err := exec.Command("ovs-ofctl", "add-flow", target.String(), "cookie=1,priority=1,tcp,tp_dst=1,actions=drop").CombinedOutput(); err != nil {
		t.Fatalf("add-flow: %v: %s", err, b)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("waiting for the round after a change: %v", err)
	}
	if w, err := StartRevalidation(ctx, ""); w != nil || err != nil {
		t.Errorf("no control socket: %v, %v, want nil, nil", w, err)
	}
	if err := (*Revalidation)(nil).Wait(ctx); err != nil {
		t.Errorf("Wait on nil: %v", err)
	}
	if _, err := StartRevalidation(ctx, filepath.Join(t.TempDir(), "ovs-vswitchd.1.ctl")); err == nil {
		t.Errorf("a control socket that does not exist: got nil, want an error")
	}
}

func TestZoneLimitArgs(t *testing.T) {
	got := strings.Join(ZoneLimitArgs(map[uint16]uint32{64002: 0, 64000: 100, 64001: 100}), " ")
	if want := "zone=64000,limit=100 zone=64001,limit=100 zone=64002,limit=0"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// An ovs-vswitchd that takes connections and answers nothing (a busy one)
// is waited for until the context ends, then is the suite's timeout
// (code 11): a command and the revalidation wait registered before a flow
// change alike.
func TestMuteIsTimeout(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mute.ctl")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	for name, f := range map[string]func(context.Context) error{
		"SetZoneLimits":     func(ctx context.Context) error { return SetZoneLimits(ctx, sock, map[uint16]uint32{64000: 1}) },
		"StartRevalidation": func(ctx context.Context) error { _, err := StartRevalidation(ctx, sock); return err },
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := f(ctx)
		cancel()
		if !errors.Is(err, endpoint.ErrTimeout) {
			t.Errorf("%s on a socket that never answers: got %v, want endpoint.ErrTimeout", name, err)
		}
	}
}
