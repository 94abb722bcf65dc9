// Package e2e drives the real plugin binaries through libcni against a real
// Open vSwitch (ovsdb-server + ovs-vswitchd, userspace datapath) that runs in a
// private network namespace started by hack/ovs-sandbox.sh.
//
// TestMain builds the binaries, starts the sandbox and re-executes the test
// binary inside the sandbox's netns, which then plays the node ("host")
// namespace. Containers are network namespaces created by the tests.
package e2e

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
	envNetNS  = "OVSFLOW_E2E_NETNS"
	envOVSDB  = "OVSFLOW_E2E_OVSDB"
	envBinDir = "OVSFLOW_E2E_BIN"
	envRepo   = "OVSFLOW_E2E_REPO"
)

var (
	skipReason string // set when the suite cannot run (not root, no OVS)
	sandboxNS  = os.Getenv(envNetNS)
	ovsdbAddr  = os.Getenv(envOVSDB)
	binDir     = os.Getenv(envBinDir)
	repoRoot   = os.Getenv(envRepo)
)

func TestMain(m *testing.M) {
	if sandboxNS != "" {
		// Go probes the IP stack once per process: do it here, where lo is up,
		// not first inside a fresh container netns (whose lo is down), which
		// would make every later ":port" listener IPv4-only.
		if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
			l.Close()
		}
		os.Exit(m.Run()) // inside the sandbox netns
	}
	if os.Geteuid() != 0 {
		skipReason = "end-to-end tests need root (network namespaces, Open vSwitch)"
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING e2e: %s ***\n\n", skipReason)
		os.Exit(m.Run())
	}
	os.Exit(runInSandbox())
}

func runInSandbox() int {
	root, err := filepath.Abs("../..")
	if err != nil {
		return fail("repo root: %v", err)
	}
	bin, err := os.MkdirTemp("", "ovsflow-e2e-bin-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(bin)
	build := exec.Command("go", "build", "-o", bin, "./cmd/...",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/ipam/static",
		"github.com/containernetworking/plugins/plugins/ipam/dhcp",
		"github.com/containernetworking/plugins/plugins/main/loopback")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fail("building plugins: %v", err)
	}

	name := fmt.Sprintf("ovsflow-e2e-%d", os.Getpid())
	sandbox := filepath.Join(root, "hack", "ovs-sandbox.sh")
	out, err := exec.Command(sandbox, "start", name).Output()
	if err != nil {
		reason := fmt.Sprintf("Open vSwitch sandbox could not start: %v", err)
		if ee, ok := err.(*exec.ExitError); ok {
			reason += ": " + string(ee.Stderr)
		}
		if os.Getenv("CI") != "" {
			return fail("%s", reason) // CI has root and apt: the suite must run there
		}
		skipReason = reason
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING e2e: %s ***\n\n", skipReason)
		return 0
	}
	defer exec.Command(sandbox, "stop", name).Run()
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
		return fail("running tests in sandbox: %v", err)
	}
	return 0
}

func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", a...)
	return 1
}

// requireSandbox skips, loudly, when the suite cannot run here.
func requireSandbox(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skipf("SKIPPED: %s", skipReason)
	}
}
