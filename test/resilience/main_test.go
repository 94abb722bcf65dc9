// Package resilience checks that the plugins survive what runtimes and nodes
// do to them: SIGKILL at any point of ADD followed by the runtime's DEL,
// OVSDB and ovs-vswitchd going away, a storm of concurrent ADD/CHECK/DEL with
// random kills followed by GC, malformed and hostile input, and foreign OVS
// ports, flows and nft tables next to ours. Every test asserts that nothing of
// an attachment is left once the runtime is done with it, from independent
// oracles (ovs-vsctl, ovs-ofctl, nft, ip, the IPAM files), and prints its
// figures as "FIGURE <name> key=value ..." lines (hack/resilience.sh collects
// them).
//
// It runs when OVSFLOW_RESILIENCE=1 (hack/resilience.sh sets it and prints
// the figures). Like test/e2e, TestMain builds the binaries, starts a private Open vSwitch
// (hack/ovs-sandbox.sh) and re-executes the test binary inside the sandbox's
// netns, which then plays the node; containers are network namespaces.
package resilience

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
	envNetNS  = "OVSFLOW_RS_NETNS"
	envOVSDB  = "OVSFLOW_RS_OVSDB"
	envBinDir = "OVSFLOW_RS_BIN"
	envRepo   = "OVSFLOW_RS_REPO"
	envEnable = "OVSFLOW_RESILIENCE"
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
		// Probe the IP stack here, where lo is up (see test/e2e).
		if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
			l.Close()
		}
		os.Exit(m.Run()) // inside the sandbox netns
	}
	if os.Getenv(envEnable) == "" {
		// Minutes of fault injection: run by hack/resilience.sh, not by every `go test ./...`.
		skipReason = "the resilience suite runs with " + envEnable + "=1 (hack/resilience.sh sets it)"
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING resilience: %s ***\n\n", skipReason)
		os.Exit(m.Run())
	}
	if os.Geteuid() != 0 {
		skipReason = "resilience tests need root (network namespaces, Open vSwitch)"
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING resilience: %s ***\n\n", skipReason)
		os.Exit(m.Run())
	}
	os.Exit(runInSandbox())
}

func runInSandbox() int {
	root, err := filepath.Abs("../..")
	if err != nil {
		return fail("repo root: %v", err)
	}
	bin, err := os.MkdirTemp("", "ovsflow-rs-bin-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(bin)
	build := exec.Command("go", "build", "-o", bin, "./cmd/...",
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fail("building plugins: %v", err)
	}

	name := fmt.Sprintf("ovsflow-rs-%d", os.Getpid())
	sandbox := filepath.Join(root, "hack", "ovs-sandbox.sh")
	out, err := exec.Command(sandbox, "start", name).Output()
	if err != nil {
		reason := fmt.Sprintf("Open vSwitch sandbox could not start: %v", err)
		if ee, ok := err.(*exec.ExitError); ok {
			reason += ": " + string(ee.Stderr)
		}
		if os.Getenv("CI") != "" {
			return fail("%s", reason)
		}
		skipReason = reason
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING resilience: %s ***\n\n", skipReason)
		return 0
	}
	defer exec.Command(sandbox, "stop", name).Run()
	defer func() {
		// The second sandboxes of the fault tests (NAME-N), should the
		// tests have died without their cleanups.
		extra, _ := filepath.Glob("/run/ovsflow/" + name + "-*")
		for _, dir := range extra {
			exec.Command(sandbox, "stop", filepath.Base(dir)).Run()
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
		return fail("running tests in sandbox: %v", err)
	}
	return 0
}

func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "resilience: "+format+"\n", a...)
	return 1
}

// requireSandbox skips, loudly, when the suite cannot run here.
func requireSandbox(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skipf("SKIPPED: %s", skipReason)
	}
}
