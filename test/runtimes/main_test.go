// Package runtimes drives the plugins through the runtimes people use, none
// of which this project wrote: containerd's CRI plugin and CRI-O (both
// through crictl), podman with its CNI backend, cnitool (libcni), and Apache
// Mesos's CNI isolator (not installable here, so emulated exactly as it
// calls plugins).
// Each suite asserts behaviour (host ports reached from an "outside" netns,
// container to container) and that nothing of ours is left after teardown.
//
// TestMain, as root, installs the runtimes with hack/install-runtimes.sh (a
// suite whose runtime cannot be installed is skipped loudly, or fails when CI
// is set), builds the plugins, starts a private Open vSwitch
// (hack/ovs-sandbox.sh) and re-executes the test binary inside the sandbox's
// netns, which plays the node. The runtimes run as children of that process,
// so they and the plugins they execute see the bridge's interface; they also
// share its private mount namespace (made by `ip netns exec`), so their
// mounts vanish with them. In that namespace the node's cgroup hierarchies
// are mounted again (runc needs them) and private directories are mounted
// over the node-wide state the runtimes use whatever their configuration
// (/var/lib/cni, /run/containerd, /run/runc).
//
// Everything else lives in one work dir: the runtimes' configs, roots, state,
// sockets and logs, the shims' records of every plugin call (shim_test.go),
// IPAM data. Containers go into cgroups named after it. Teardown (t.Cleanup,
// then sweep in both processes) kills by PID what names the work dir or sits
// in those cgroups, unmounts, removes the cgroups and netns files, stops the
// sandbox: also after a failed or killed run. OVSFLOW_RT_KEEP=1 keeps the work
// dir for a look at the plugin calls.
package runtimes

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// Environment handed from the outer process to the re-executed one.
const (
	envNetNS   = "OVSFLOW_RT_NETNS"
	envOVSDB   = "OVSFLOW_RT_OVSDB"
	envBinDir  = "OVSFLOW_RT_BIN"
	envRepo    = "OVSFLOW_RT_REPO"
	envWork    = "OVSFLOW_RT_WORK"
	envInstall = "OVSFLOW_RT_INSTALL_" // + component: the install's KEY=VALUE lines, or "SKIP: reason"
	envHostPID = "OVSFLOW_RT_HOST_PID" // the outer process, in the node's mount namespace
)

var (
	skipReason string // the whole package cannot run (not root, no OVS)
	sandboxNS  = os.Getenv(envNetNS)
	ovsdbAddr  = os.Getenv(envOVSDB)
	binDir     = os.Getenv(envBinDir)
	repoRoot   = os.Getenv(envRepo)
	workDir    = os.Getenv(envWork)
)

// components are the hack/install-runtimes.sh components, one per suite that needs one.
var components = []string{"containerd", "podman", "crio", "cnitool"}

func TestMain(m *testing.M) {
	if sandboxNS != "" {
		// The framework's helpers (Vsctl, WireOVSHost, NewBridge) find the sandbox in its Env.
		framework.Env.NetNS, framework.Env.OVSDB, framework.Env.BinDir, framework.Env.Repo = sandboxNS, ovsdbAddr, binDir, repoRoot
		// Go probes the IP stack once per process: do it here, where lo is up,
		// not first inside a fresh container netns.
		if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
			l.Close()
		}
		if err := remountCgroups(os.Getenv(envHostPID)); err != nil {
			os.Exit(fail("%v", err))
		}
		restore, err := privateStateDirs(workDir)
		if err != nil {
			os.Exit(fail("%v", err))
		}
		code := m.Run()
		sweep(workDir) // whatever a crashed suite left
		restore()
		os.Exit(code)
	}
	if os.Geteuid() != 0 {
		skipReason = "the runtime suites need root (containerd, podman, network namespaces, Open vSwitch)"
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING test/runtimes: %s ***\n\n", skipReason)
		os.Exit(m.Run())
	}
	os.Exit(runInSandbox(m))
}

func inCI() bool { return os.Getenv("CI") != "" }

func runInSandbox(m *testing.M) int {
	root, err := filepath.Abs("../..")
	if err != nil {
		return fail("repo root: %v", err)
	}
	env := []string{envRepo + "=" + root}

	// Install per component: one that fails skips its suite only.
	for _, c := range components {
		cmd := exec.Command(filepath.Join(root, "hack", "install-runtimes.sh"), c)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			reason := fmt.Sprintf("hack/install-runtimes.sh %s failed: %v: %s", c, err, lastLines(stderr.String(), 15))
			if inCI() {
				return fail("%s", reason) // CI has root and the registries: the suite must run there
			}
			fmt.Fprintf(os.Stderr, "\n*** SKIPPING the %s suite: %s ***\n\n", c, reason)
			env = append(env, envInstall+c+"=SKIP: "+reason)
			continue
		}
		env = append(env, envInstall+c+"="+string(out))
	}

	work, err := os.MkdirTemp("", "ovsflow-rt-")
	if err != nil {
		return fail("%v", err)
	}
	// Teardown, in order, whatever happened to the inner process: its
	// leftovers (processes, cgroups, netns files), the sandbox, the mount
	// points it made, the work dir.
	var missing []string
	for _, d := range sharedStateDirs {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, d)
		}
	}
	var stopSandbox func()
	defer func() {
		sweep(work)
		removeRecordedNetNS(work)
		if stopSandbox != nil {
			stopSandbox()
		}
		for _, d := range missing {
			os.Remove(d) // the inner process made it as a mount point; gone if empty
		}
		if os.Getenv("OVSFLOW_RT_KEEP") == "" {
			os.RemoveAll(work)
		} else {
			fmt.Fprintf(os.Stderr, "test/runtimes: keeping %s (OVSFLOW_RT_KEEP)\n", work)
		}
	}()
	bin := filepath.Join(work, "plugins")
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/...",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/main/loopback")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fail("building plugins: %v", err)
	}
	confined, err := framework.Confine(bin)
	if err != nil {
		return fail("%v", err)
	}
	if confined != bin {
		defer os.RemoveAll(confined)
		bin = confined
		fmt.Fprintln(os.Stderr, "test/runtimes: plugins run with an empty PATH (OVSFLOW_PLUGIN_PATH=inherit to give them yours)")
	}

	name := fmt.Sprintf("ovsflow-rt-%d", os.Getpid())
	sandbox := filepath.Join(root, "hack", "ovs-sandbox.sh")
	out, err := exec.Command(sandbox, "start", name).Output()
	if err != nil {
		reason := fmt.Sprintf("Open vSwitch sandbox could not start: %v", err)
		if ee, ok := err.(*exec.ExitError); ok {
			reason += ": " + string(ee.Stderr)
		}
		if inCI() {
			return fail("%s", reason)
		}
		skipReason = reason
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING test/runtimes: %s ***\n\n", skipReason)
		return m.Run()
	}
	stopSandbox = func() { exec.Command(sandbox, "stop", name).Run() }
	vars := parseVars(string(out))
	args := append([]string{"netns", "exec", name, os.Args[0]}, os.Args[1:]...)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = os.Stdout, os.Stderr, os.Stdin
	cmd.Env = append(append(os.Environ(), env...),
		envNetNS+"="+name, envOVSDB+"="+vars["OVSDB"], envBinDir+"="+bin, envWork+"="+work,
		fmt.Sprintf("%s=%d", envHostPID, os.Getpid()))
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		return fail("running tests in sandbox: %v", err)
	}
	return 0
}

// remountCgroups mounts the node's cgroup hierarchies again under
// /sys/fs/cgroup: `ip netns exec` mounts a fresh sysfs over /sys in its mount
// namespace (so that /sys/class/net shows the netns), which hides them, and
// runc refuses to work without ("no cgroup mount found in mountinfo").
// Mounting a cgroup v1 hierarchy with the same controllers, or cgroup2,
// gives the very same hierarchy, so the runtimes see the node's cgroups.
func remountCgroups(hostPID string) error {
	b, err := os.ReadFile(filepath.Join("/proc", hostPID, "mountinfo"))
	if err != nil {
		return fmt.Errorf("reading the node's mount table: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 3 {
			continue
		}
		point, fstype, super := unescapeMount(f[4]), g[0], g[2]
		if point != "/sys/fs/cgroup" && !strings.HasPrefix(point, "/sys/fs/cgroup/") {
			continue
		}
		var flags uintptr
		for _, o := range strings.Split(f[5], ",") {
			switch o {
			case "nosuid":
				flags |= syscall.MS_NOSUID
			case "nodev":
				flags |= syscall.MS_NODEV
			case "noexec":
				flags |= syscall.MS_NOEXEC
			}
		}
		var data []string
		for _, o := range strings.Split(super, ",") {
			if o != "rw" && o != "ro" {
				data = append(data, o)
			}
		}
		if err := os.MkdirAll(point, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(fstype, point, fstype, flags, strings.Join(data, ",")); err != nil {
			return fmt.Errorf("mounting %s on %s (%s): %w", fstype, point, super, err)
		}
	}
	return nil
}

// sharedStateDirs are the node-wide directories the runtimes write to
// whatever their configuration says: libcni's cache (/var/lib/cni: cnitool,
// podman and containerd all use the default), containerd 1.6's shim sockets
// (/run/containerd) and runc's default root, which podman uses (/run/runc).
// The inner process bind-mounts a
// private directory over each in its own mount namespace, which the runtimes
// share, so that the suites neither read nor leave anything there, and two
// runs (or a developer's demo) do not meet.
var sharedStateDirs = []string{"/var/lib/cni", "/run/containerd", "/run/runc"}

func privateStateDirs(work string) (restore func(), err error) {
	var undo []func()
	restore = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	for _, d := range sharedStateDirs {
		priv := filepath.Join(work, "state", strings.ReplaceAll(strings.Trim(d, "/"), "/", "-"))
		if err := os.MkdirAll(priv, 0o755); err != nil {
			restore()
			return nil, err
		}
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				restore()
				return nil, err
			}
			undo = append(undo, func() { os.Remove(d) })
		}
		if err := syscall.Mount(priv, d, "", syscall.MS_BIND, ""); err != nil {
			restore()
			return nil, fmt.Errorf("bind-mounting %s over %s: %w", priv, d, err)
		}
		undo = append(undo, func() { syscall.Unmount(d, syscall.MNT_DETACH) })
	}
	return restore, nil
}

func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "test/runtimes: "+format+"\n", a...)
	return 1
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func parseVars(s string) map[string]string {
	vars := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	return vars
}

// requireSandbox skips, loudly, when the package cannot run here.
func requireSandbox(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skipf("SKIPPED: %s", skipReason)
	}
}

// installed returns what hack/install-runtimes.sh printed for component,
// skipping the test (loudly) when that install failed.
func installed(t *testing.T, component string) map[string]string {
	t.Helper()
	requireSandbox(t)
	v, ok := os.LookupEnv(envInstall + component)
	if !ok {
		t.Fatalf("no install record for %q", component)
	}
	if reason, skip := strings.CutPrefix(v, "SKIP: "); skip {
		t.Skipf("SKIPPED: %s", reason)
	}
	return parseVars(v)
}
