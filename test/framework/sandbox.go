// Package framework is the one harness of the project's suites (test/e2e,
// test/resilience, test/runtimes): the private Open vSwitch they run in, the
// CNI runner, config builders, traffic helpers and waits on conditions.
//
// Main runs a test binary inside a private Open vSwitch: TestMain
// calls Main, which builds the plugin binaries, starts ovsdb-server and
// ovs-vswitchd in a network namespace of their own (hack/ovs-sandbox.sh) and
// re-executes the test binary inside that netns, which then plays the node.
// The re-executed binary finds the sandbox in Env.
//
// Two variables choose what it runs on: OVSFLOW_DATAPATH (Datapath: the
// datapath_type of the bridges the suites create, "netdev" by default, or
// "system" for the kernel datapath, which needs the openvswitch module:
// hack/ovs-vm.sh runs the suites so in a virtual machine) and OVSFLOW_BIN (a
// directory of plugins already built, instead of building them with go: the
// virtual machine has no Go toolchain). A third, OVSFLOW_TIME_SCALE, says how
// many times slower than real hardware the machine is (Slowdown).
package framework

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Environment handed from the outer process to the re-executed one.
const (
	envNetNS  = "OVSFLOW_SANDBOX_NETNS"
	envOVSDB  = "OVSFLOW_SANDBOX_OVSDB"
	envBinDir = "OVSFLOW_SANDBOX_BIN"
	envRepo   = "OVSFLOW_SANDBOX_REPO"

	envDatapath = "OVSFLOW_DATAPATH"
	envPrebuilt = "OVSFLOW_BIN"
	envScale    = "OVSFLOW_TIME_SCALE"
)

// The datapath types the suites run on.
const (
	Netdev = "netdev" // userspace datapath: any kernel, the default
	System = "system" // kernel datapath: needs the openvswitch module
)

// Datapath is the datapath_type of the bridges the suites create
// (OVSFLOW_DATAPATH). Checks that depend on it branch on it, with the reason.
var Datapath = datapathFromEnv()

func datapathFromEnv() string {
	if v := os.Getenv(envDatapath); v != "" {
		return v
	}
	return Netdev
}

// Userspace reports whether the bridges use the userspace (netdev) datapath.
func Userspace() bool { return Datapath == Netdev }

// Slowdown is how many times slower than real hardware this machine runs
// (OVSFLOW_TIME_SCALE; 1 by default, about 10 under software emulation,
// which hack/ovs-vm.sh sets). See Scaled and Load.
var Slowdown = scaleFromEnv()

func scaleFromEnv() int {
	if n, err := strconv.Atoi(os.Getenv(envScale)); err == nil && n > 1 {
		return n
	}
	return 1
}

// Scaled stretches a test's own wait for the machine by Slowdown.
func Scaled(d time.Duration) time.Duration { return d * time.Duration(Slowdown) }

// Load is n concurrent callers divided by Slowdown, and at least min: the
// plugins' own budget (their "timeout", pkg/cnicmd) does not stretch, so a
// machine ten times slower carries a tenth of the load within it.
func Load(n, min int) int { return max(n/Slowdown, min) }

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
	// KernelDatapath: the suite runs on Datapath System too. A suite without
	// it fails when asked to, rather than run on netdev unasked.
	KernelDatapath bool
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
	if Datapath != Netdev && Datapath != System {
		return fail(o, "%s=%q: want %q or %q", envDatapath, Datapath, Netdev, System)
	}
	if Datapath == System && !o.KernelDatapath {
		return fail(o, "%s=%s: this suite runs on the userspace datapath only", envDatapath, Datapath)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		return fail(o, "repo root: %v", err)
	}
	bin := os.Getenv(envPrebuilt)
	if bin == "" {
		if bin, err = build(root, o); err != nil {
			return fail(o, "building plugins: %v", err)
		}
		defer os.RemoveAll(bin)
	}
	if confined, err := Confine(bin); err != nil {
		return fail(o, "%v", err)
	} else if confined != bin {
		defer os.RemoveAll(confined)
		bin = confined
		fmt.Fprintf(os.Stderr, "%s: plugins run with an empty PATH (%s=inherit to give them yours)\n", o.Suite, envPluginPath)
	}
	fmt.Fprintf(os.Stderr, "%s: bridges on the %s datapath\n", o.Suite, Datapath)

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
	if Datapath == System {
		if err := warmUp(name, vars["OVSDB"]); err != nil {
			return fail(o, "the kernel datapath forwards nothing: %v", err)
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

// warmUpScript makes a bridge on the kernel datapath with two veths into
// netns of their own and pings across it, then removes it all; twice. The
// first bridge of a freshly booted guest forwards nothing at all (seen under
// software emulation with Debian's 6.1.0-50 kernel and Open vSwitch 3.1,
// also at commits whose suite passed on an older guest kernel); later ones
// do. Without this, the first test of the suite met that bridge. It prints
// how many pings each bridge took ("-" for none answered).
const warmUpScript = `set -u
db=$1 n=$2
bridge() { # bridge NAME TRIES
	local br=$1 tries=$2 got=- i t
	ovs-vsctl --db="$db" --timeout=30 -- --may-exist add-br $br -- set bridge $br datapath_type=system
	for i in 1 2; do
		ip netns add $n-w$i
		ip link add owarm$i type veth peer name eth0 netns $n-w$i
		ip link set owarm$i up
		ip -n $n-w$i link set lo up
		ip -n $n-w$i addr add 198.51.100.25$i/24 dev eth0
		ip -n $n-w$i link set eth0 up
		ovs-vsctl --db="$db" --timeout=30 add-port $br owarm$i
	done
	for t in $(seq "$tries"); do
		if ip netns exec $n-w1 ping -c 1 -W 1 198.51.100.252 >/dev/null 2>&1; then got=$t; break; fi
	done
	ovs-vsctl --db="$db" --timeout=30 del-br $br
	for i in 1 2; do ip link del owarm$i 2>/dev/null; ip netns del $n-w$i; done
	echo "$br $got"
	[ "$got" != - ]
}
bridge ovsflow-warm0 5 || true
bridge ovsflow-warm1 60
`

// warmUp runs warmUpScript in the sandbox netns name.
func warmUp(name, ovsdb string) error {
	t0 := time.Now()
	out, err := exec.Command("ip", "netns", "exec", name, "bash", "-c", warmUpScript, "warm", ovsdb, name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("no ping across a second new bridge within 60 tries: %v: %s", err, out)
	}
	fmt.Fprintf(os.Stderr, "sandbox: kernel datapath warmed up in %s (pings answered per bridge: %s)\n", time.Since(t0).Round(time.Millisecond), strings.Join(strings.Fields(string(out)), " "))
	return nil
}

// build builds the plugins and o.Build into a new temporary directory.
func build(root string, o Options) (string, error) {
	bin, err := os.MkdirTemp("", "ovsflow-"+o.Suite+"-bin-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", append([]string{"build", "-o", bin, "./cmd/..."}, o.Build...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(bin)
		return "", err
	}
	return bin, nil
}

func fail(o Options, format string, a ...any) int {
	fmt.Fprintf(os.Stderr, o.Suite+": "+format+"\n", a...)
	return 1
}
