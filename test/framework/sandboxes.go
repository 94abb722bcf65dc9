package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
)

// Sandbox is an Open vSwitch of its own (ovsdb-server and ovs-vswitchd,
// userspace datapath) in a network namespace of its own, with a private
// run directory (hack/ovs-sandbox.sh): a second node beside the suite's.
type Sandbox struct {
	Name  string   // its network namespace, under /run/netns
	OVSDB string   // its OVSDB endpoint
	NS    ns.NetNS // its network namespace, open
}

// NewSandbox starts a Sandbox whose name begins with prefix, and stops it
// (its daemons, netns and run directory) at the test's end.
func NewSandbox(t testing.TB, prefix string) *Sandbox {
	t.Helper()
	// A netns name: unique across suites running at once.
	name := Uniq(fmt.Sprintf("%s%d-", prefix, os.Getpid()))
	script := filepath.Join(Env.Repo, "hack", "ovs-sandbox.sh")
	out, err := exec.Command(script, "start", name).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("sandbox %s: %v", name, err)
	}
	t.Cleanup(func() { exec.Command(script, "stop", name).Run() })
	s := &Sandbox{Name: name}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "OVSDB="); ok {
			s.OVSDB = v
		}
	}
	if s.OVSDB == "" {
		t.Fatalf("sandbox %s: no OVSDB= in %q", name, out)
	}
	if s.NS, err = ns.GetNS("/run/netns/" + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.NS.Close() })
	return s
}

// Run runs a command in the sandbox's netns and returns its combined
// output.
func (s *Sandbox) Run(name string, args ...string) (string, error) {
	return Run("ip", append([]string{"netns", "exec", s.Name, name}, args...)...)
}

// Vsctl runs ovs-vsctl against the sandbox's OVSDB.
func (s *Sandbox) Vsctl(t testing.TB, args ...string) string {
	t.Helper()
	return VsctlAt(t, s.OVSDB, args...)
}

// Control runs a command of the sandbox's hack/ovs-sandbox.sh
// (stop-vswitchd, start-vswitchd...).
func (s *Sandbox) Control(t testing.TB, command string) {
	t.Helper()
	if out, err := exec.Command(filepath.Join(Env.Repo, "hack", "ovs-sandbox.sh"), command, s.Name).CombinedOutput(); err != nil {
		t.Fatalf("ovs-sandbox.sh %s %s: %v: %s", command, s.Name, err, out)
	}
}

// NetNSExec executes the plugins inside the network namespace Name (ip
// netns exec), where the node's ovs-vswitchd runs, as a runtime of that
// node would; the rest as libcni's own exec does.
type NetNSExec struct{ Name string }

// ExecPlugin implements invoke.Exec.
func (x NetNSExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", x.Name, path)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, bytes.NewReader(stdin), &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var e types.Error
		if json.Unmarshal(stdout.Bytes(), &e) == nil && e.Msg != "" {
			return nil, &e
		}
		return nil, fmt.Errorf("%s in netns %s: %w: %s", filepath.Base(path), x.Name, err, stdout.Bytes())
	}
	return stdout.Bytes(), nil
}

// FindInPath implements invoke.Exec.
func (NetNSExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// Decode implements invoke.Exec.
func (NetNSExec) Decode(b []byte) (version.PluginInfo, error) {
	d := version.PluginDecoder{}
	return d.Decode(b)
}
