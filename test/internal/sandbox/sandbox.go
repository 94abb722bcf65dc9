// Package sandbox runs a test binary inside a private Open vSwitch: TestMain
// calls Main, which builds the plugin binaries, starts ovsdb-server and
// ovs-vswitchd in a network namespace of their own (hack/ovs-sandbox.sh) and
// re-executes the test binary inside that netns, which then plays the node.
// The re-executed binary finds the sandbox in Env.
package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Environment handed from the outer process to the re-executed one.
const (
	envNetNS  = "OVSFLOW_SANDBOX_NETNS"
	envOVSDB  = "OVSFLOW_SANDBOX_OVSDB"
	envBinDir = "OVSFLOW_SANDBOX_BIN"
	envRepo   = "OVSFLOW_SANDBOX_REPO"
)

// Env describes the sandbox the tests run in.
var Env = struct {
	NetNS  string // the sandbox's netns (the node)
	OVSDB  string // its OVSDB endpoint
	BinDir string // the built binaries
	Repo   string // the repository root
}{os.Getenv(envNetNS), os.Getenv(envOVSDB), os.Getenv(envBinDir), os.Getenv(envRepo)}

// SkipReason is set when the suite cannot run here.
var SkipReason string

// Options of Main.
type Options struct {
	Suite string   // name in messages and in the sandbox's name
	Build []string // packages to build besides ./cmd/...
	// Gate, when set, returns why the suite should not run now ("" to run).
	Gate func() string
}

// Main is the body of a suite's TestMain; it returns the exit code.
func Main(m *testing.M, o Options) int {
	if Env.NetNS != "" {
		// Go probes the IP stack once per process: do it here, where lo is up,
		// not first inside a fresh container netns (whose lo is down), which
		// would make every later ":port" listener IPv4-only.
		if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
			l.Close()
		}
		return m.Run()
	}
	if o.Gate != nil {
		if why := o.Gate(); why != "" {
			return skipAll(m, o.Suite, why)
		}
	}
	if os.Geteuid() != 0 {
		return skipAll(m, o.Suite, o.Suite+" tests need root (network namespaces, Open vSwitch)")
	}
	return reexec(o)
}

func skipAll(m *testing.M, suite, why string) int {
	SkipReason = why
	fmt.Fprintf(os.Stderr, "\n*** SKIPPING %s: %s ***\n\n", suite, why)
	return m.Run()
}

// Require skips, loudly, when the suite cannot run here.
func Require(t testing.TB) {
	t.Helper()
	if SkipReason != "" {
		t.Skipf("SKIPPED: %s", SkipReason)
	}
}

func reexec(o Options) int {
	root, err := filepath.Abs("../..")
	if err != nil {
		return fail(o, "repo root: %v", err)
	}
	bin, err := os.MkdirTemp("", "ovsflow-"+o.Suite+"-bin-")
	if err != nil {
		return fail(o, "%v", err)
	}
	defer os.RemoveAll(bin)
	build := exec.Command("go", append([]string{"build", "-o", bin, "./cmd/..."}, o.Build...)...)
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fail(o, "building plugins: %v", err)
	}

	name := fmt.Sprintf("ovsflow-%s-%d", o.Suite, os.Getpid())
	script := filepath.Join(root, "hack", "ovs-sandbox.sh")
	out, err := exec.Command(script, "start", name).Output()
	if err != nil {
		reason := fmt.Sprintf("Open vSwitch sandbox could not start: %v", err)
		if ee, ok := err.(*exec.ExitError); ok {
			reason += ": " + string(ee.Stderr)
		}
		if os.Getenv("CI") != "" {
			return fail(o, "%s", reason) // CI has root and apt: the suite must run there
		}
		SkipReason = reason
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING %s: %s ***\n\n", o.Suite, reason)
		return 0
	}
	defer exec.Command(script, "stop", name).Run()
	defer func() {
		// Second sandboxes of a suite (NAME-N), should its tests have died
		// without their cleanups.
		extra, _ := filepath.Glob("/run/ovsflow/" + name + "-*")
		for _, dir := range extra {
			exec.Command(script, "stop", filepath.Base(dir)).Run()
		}
	}()
	vars := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	args := append([]string{"netns", "exec", name, os.Args[0]}, os.Args[1:]...)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = os.Stdout, os.Stderr, os.Stdin
	cmd.Env = append(os.Environ(), envNetNS+"="+name, envOVSDB+"="+vars["OVSDB"], envBinDir+"="+bin, envRepo+"="+root)
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return fail(o, "running tests in sandbox: %v", err)
	}
	return 0
}

func fail(o Options, format string, a ...any) int {
	fmt.Fprintf(os.Stderr, o.Suite+": "+format+"\n", a...)
	return 1
}
