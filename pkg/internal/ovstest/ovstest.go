// Package ovstest gives a package's tests a private Open vSwitch: one
// sandbox per test binary (hack/ovs-sandbox.sh: ovsdb-server and
// ovs-vswitchd with the netdev datapath in a network namespace of their own,
// files under /run/ovsflow/NAME), started by the first test that asks for
// it and stopped by the package's TestMain (Stop). The host's Open vSwitch
// is never used.
package ovstest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Sandbox is a running private Open vSwitch.
type Sandbox struct {
	Name   string
	DB     string // unix:RUNDIR/db.sock
	NetNS  string // where ovs-vswitchd runs
	RunDir string
}

var state struct {
	once   sync.Once
	sb     *Sandbox
	script string
	skip   string // why the sandbox cannot run here
}

// Require returns the test binary's sandbox, starting it, named prefix-PID,
// on first use. Without root or without one of the programs in bins (looked
// up in PATH and /usr/sbin) it skips the test, loudly; under CI (CI set) it
// fails it instead, since there the tests must run.
func Require(t testing.TB, prefix string, bins ...string) *Sandbox {
	t.Helper()
	state.once.Do(func() { start(prefix, bins) })
	if state.skip != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %s", state.skip)
		}
		fmt.Fprintf(os.Stderr, "*** SKIPPING %s: %s ***\n", t.Name(), state.skip)
		t.Skipf("SKIPPED: %s", state.skip)
	}
	return state.sb
}

func start(prefix string, bins []string) {
	if os.Geteuid() != 0 {
		state.skip = "the Open vSwitch tests need root (network namespace, ovs-vswitchd)"
		return
	}
	for _, bin := range bins {
		if _, err := exec.LookPath(bin); err != nil {
			if _, err := os.Stat("/usr/sbin/" + bin); err != nil {
				state.skip = bin + " is not installed (apt-get install openvswitch-switch)"
				return
			}
		}
	}
	script, err := sandboxScript()
	if err != nil {
		state.skip = err.Error()
		return
	}
	state.script = script
	name := fmt.Sprintf("%s-%d", prefix, os.Getpid())
	out, err := exec.Command(script, "start", name).Output()
	if err != nil {
		state.skip = fmt.Sprintf("the Open vSwitch sandbox did not start: %v", err)
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			state.skip += ": " + string(ee.Stderr)
		}
		exec.Command(script, "stop", name).Run()
		return
	}
	sb := &Sandbox{Name: name}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		switch k, v, _ := strings.Cut(sc.Text(), "="); k {
		case "OVSDB":
			sb.DB = v
		case "NETNS":
			sb.NetNS = v
		case "RUNDIR":
			sb.RunDir = v
		}
	}
	state.sb = sb
}

// sandboxScript finds hack/ovs-sandbox.sh in the module the test runs in.
func sandboxScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "hack", "ovs-sandbox.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory: cannot find hack/ovs-sandbox.sh")
		}
		dir = parent
	}
}

// Stop stops the sandbox, if one was started.
func Stop() {
	if state.sb != nil {
		exec.Command(state.script, "stop", state.sb.Name).Run()
	}
}
