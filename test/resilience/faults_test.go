package resilience

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// sandbox is a second private Open vSwitch whose daemons these tests stop
// and start. Its ovs-vswitchd runs in its own netns, so the plugins run
// there too (pluginExec.netns): that netns is the node of these tests.
type sandbox struct {
	name, rundir, db string
	syncs            int
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	// Named after the suite's sandbox, so that TestMain stops it even if
	// this process dies without its cleanups.
	s := &sandbox{name: uniq(sandboxNS + "-")}
	script := filepath.Join(repoRoot, "hack", "ovs-sandbox.sh")
	out, err := exec.Command(script, "start", s.name).Output()
	if err != nil {
		t.Fatalf("second sandbox: %v", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "OVSDB="); ok {
			s.db = v
		}
		if v, ok := strings.CutPrefix(l, "RUNDIR="); ok {
			s.rundir = v
		}
	}
	t.Cleanup(func() {
		// Stop the daemons here (reaping them), then let the script remove the rest.
		s.stop(t, "ovs-vswitchd", syscall.SIGTERM)
		s.stop(t, "ovsdb-server", syscall.SIGTERM)
		exec.Command(script, "stop", s.name).Run()
	})
	return s
}

func (s *sandbox) pid(daemon string) int {
	b, err := os.ReadFile(filepath.Join(s.rundir, daemon+".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// stop signals a daemon and waits until it is gone (a zombie counts as gone;
// one reparented to this process is reaped).
func (s *sandbox) stop(t testing.TB, daemon string, sig syscall.Signal) {
	t.Helper()
	pid := s.pid(daemon)
	if pid == 0 {
		return
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != daemon {
		t.Logf("%s.pid names process %d (%q), not %s: stale, not signalled", daemon, pid, strings.TrimSpace(string(comm)), daemon)
		os.Remove(filepath.Join(s.rundir, daemon+".pid"))
		return
	}
	_ = syscall.Kill(pid, sig)
	gone := func() bool {
		st, ok := readProcStat(strconv.Itoa(pid))
		if !ok {
			return true
		}
		if st.state == 'Z' || st.state == 'X' {
			if st.ppid == os.Getpid() {
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, 0, nil)
			}
			return true
		}
		return false
	}
	for !framework.Until(10*time.Second, gone) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	os.Remove(filepath.Join(s.rundir, daemon+".pid"))
}

func (s *sandbox) ovsEnv() []string {
	return append(os.Environ(), "OVS_RUNDIR="+s.rundir, "OVS_DBDIR="+s.rundir, "OVS_LOGDIR="+s.rundir, "OVS_SYSCONFDIR="+s.rundir)
}

// startOVSDB starts ovsdb-server with the command line of hack/ovs-sandbox.sh.
func (s *sandbox) startOVSDB(t testing.TB) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", s.name, "ovsdb-server", s.rundir+"/conf.db",
		"--remote=punix:"+s.rundir+"/db.sock", "--pidfile="+s.rundir+"/ovsdb-server.pid", "--detach", "--no-chdir",
		"--log-file="+s.rundir+"/ovsdb-server.log", "-vconsole:off")
	cmd.Env = s.ovsEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("starting ovsdb-server: %v: %s", err, out)
	}
}

func (s *sandbox) startVswitchd(t testing.TB) {
	t.Helper()
	if out, err := exec.Command(filepath.Join(repoRoot, "hack", "ovs-sandbox.sh"), "start-vswitchd", s.name).CombinedOutput(); err != nil {
		t.Fatalf("start-vswitchd: %v: %s", err, out)
	}
}

// sync waits until ovs-vswitchd is connected and has applied the database
// (it reconnects to a restarted ovsdb-server with a backoff of up to 8 s).
func (s *sandbox) sync(t testing.TB) {
	t.Helper()
	s.syncs++
	framework.VsctlAt(t, s.db, "--timeout=30", "set", "Open_vSwitch", ".", fmt.Sprintf("external_ids:rs-sync=%d", s.syncs))
}

// faultTimeout is the plugins' "timeout" in the fault tests: a command that
// meets a daemon stopped waits until its work's share of it ends (a
// quarter less), then fails with code 11, so these tests wait that long and
// not the default budget.
const faultTimeout = 10 * time.Second

// faultNet is a chain of both plugins against the second sandbox, with a
// short budget (faultTimeout).
func faultNet(t *testing.T, s *sandbox, br string, x *pluginExec) (*framework.CNI, audit) {
	t.Helper()
	dataDir := t.TempDir()
	const network = "faults"
	budget := map[string]any{"timeout": faultTimeout.String()}
	n := newCNI(t, conflist("1.0.0", network,
		framework.BridgeConf(br, s.db, dataDir, budget),
		framework.PortmapConf(s.db, map[string]any{"hostIPs": []string{nodeV4, nodeV6}, "timeout": faultTimeout.String()})), x)
	au := audit{n: node{db: s.db, netns: s.name, bridge: br}, dataDir: dataDir, netw: network,
		subnets: testSubnets, wantMappings: true, allVethsAreOurs: true}
	return n, au
}

var faultCaps = mappings(pm(8080, 80, "tcp", ""), pm(5353, 53, "udp", ""))

// faultCounts are the figures of the fault tests.
type faultCounts struct{ injected, survived, leaked int }

func (f *faultCounts) result(t *testing.T, ok bool) {
	t.Helper()
	f.injected++
	if ok && !t.Failed() {
		f.survived++
	}
}

// OVSDB down during ADD: code 11 and nothing left; during DEL: code 11,
// since without OVSDB a DEL cannot tell whether anything of the attachment
// is left (cnicmd.OpenDel), and the runtime's retry with OVSDB back
// succeeds and leaves nothing. ovsdb-server
// is SIGKILLed (a crash) and restarted with the sandbox's command line.
func TestOVSDBDown(t *testing.T) {
	requireSandbox(t)
	becomeSubreaper(t)
	s := newSandbox(t)
	const br = "rsfbr"
	framework.VsctlAt(t, s.db, "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev")
	x := &pluginExec{netns: s.name}
	n, au := faultNet(t, s, br, x)
	ctx := context.Background()
	used := map[string]attachment{}
	var fc faultCounts
	newAtt := func() *framework.Container {
		c := framework.NewContainer(t)
		used[c.ID+"/eth0"] = attachment{id: c.ID, ifname: "eth0"}
		return c
	}
	clean := func(t *testing.T, what string) bool {
		t.Helper()
		if r := au.run(t, used, nil); len(r.leaked) > 0 {
			fc.leaked += len(r.leaked)
			t.Errorf("%s: %s", what, r)
			for _, a := range used {
				cleanupAttachment(t, au.n, a)
			}
			return false
		}
		return true
	}

	t.Run("ADD with OVSDB down", func(t *testing.T) {
		c := newAtt()
		s.stop(t, "ovsdb-server", syscall.SIGKILL)
		_, err := n.AddContext(ctx, c, "eth0", faultCaps)
		if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "ovsdb") {
			t.Errorf("ADD: got %v (code %d), want code 11 about ovsdb", err, cniCode(err))
		}
		// The runtime's DEL cannot know that nothing was created.
		if err := n.DelContext(ctx, c, "eth0", faultCaps); cniCode(err) != types.ErrTryAgainLater {
			t.Errorf("DEL with OVSDB down after the failed ADD: got %v (code %d), want code 11", err, cniCode(err))
		}
		s.startOVSDB(t)
		s.sync(t)
		if err := n.DelContext(ctx, c, "eth0", faultCaps); err != nil { // the runtime retries
			t.Errorf("DEL retried with OVSDB back: %v", err)
		}
		fc.result(t, clean(t, "after ADD with OVSDB down"))
	})

	t.Run("DEL with OVSDB down, nothing to delete", func(t *testing.T) {
		c := newAtt()
		s.stop(t, "ovsdb-server", syscall.SIGKILL)
		if err := n.DelContext(ctx, c, "eth0", nil); cniCode(err) != types.ErrTryAgainLater {
			t.Errorf("DEL: got %v (code %d), want code 11", err, cniCode(err))
		}
		s.startOVSDB(t)
		s.sync(t)
		if err := n.DelContext(ctx, c, "eth0", nil); err != nil { // the runtime retries
			t.Errorf("DEL retried with OVSDB back: %v", err)
		}
		fc.result(t, clean(t, "after DEL with nothing to delete"))
	})

	t.Run("DEL with OVSDB down, something to delete", func(t *testing.T) {
		c := newAtt()
		if _, err := n.AddContext(ctx, c, "eth0", faultCaps); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		s.stop(t, "ovsdb-server", syscall.SIGKILL)
		err := n.DelContext(ctx, c, "eth0", faultCaps)
		if cniCode(err) != types.ErrTryAgainLater {
			t.Errorf("DEL with OVSDB down: got %v (code %d), want code 11", err, cniCode(err))
		}
		s.startOVSDB(t)
		s.sync(t)
		if err := n.DelContext(ctx, c, "eth0", faultCaps); err != nil {
			t.Errorf("DEL with OVSDB back: %v", err)
		}
		fc.result(t, clean(t, "after the later DEL"))
	})

	// ovs-vswitchd stopped, so that ovs-bridge's ADD is waiting for the
	// ofport (its port row is in the database) when ovsdb-server dies.
	t.Run("OVSDB dies while ADD waits for the ofport", func(t *testing.T) {
		c := newAtt()
		s.stop(t, "ovs-vswitchd", syscall.SIGTERM)
		x.before = func(plugin, command string) {
			if plugin == "ovs-bridge" && command == "ADD" {
				time.AfterFunc(time.Second, func() { s.stop(t, "ovsdb-server", syscall.SIGKILL) })
			}
		}
		_, err := n.AddContext(ctx, c, "eth0", faultCaps)
		x.before = nil
		if cniCode(err) != types.ErrTryAgainLater {
			t.Errorf("ADD: got %v (code %d), want code 11", err, cniCode(err))
		}
		// The runtime's DEL right away, OVSDB still down: it must either
		// remove everything or say code 11 (there is a port row to remove).
		delErr := n.DelContext(ctx, c, "eth0", faultCaps)
		t.Logf("DEL with OVSDB still down: %v (code %d)", delErr, cniCode(delErr))
		s.startOVSDB(t)
		s.startVswitchd(t)
		s.sync(t)
		if delErr != nil {
			if cniCode(delErr) != types.ErrTryAgainLater {
				t.Errorf("DEL with OVSDB down: got %v, want success or code 11", delErr)
			}
			if err := n.DelContext(ctx, c, "eth0", faultCaps); err != nil { // the runtime retries
				t.Errorf("DEL retried with OVSDB back: %v", err)
			}
		}
		fc.result(t, clean(t, "ADD failed with OVSDB gone, then DEL succeeded with OVSDB still down"))
	})

	// ovsdb-server SIGKILLed at a random point of the chain's ADD.
	t.Run("OVSDB killed at random points of ADD", func(t *testing.T) {
		rnd := newRand(t)
		// the typical chain ADD with nothing killed
		for i := 0; i < 3; i++ {
			c := newAtt()
			if _, err := n.AddContext(ctx, c, "eth0", faultCaps); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if err := n.DelContext(ctx, c, "eth0", nil); err != nil {
				t.Fatalf("DEL: %v", err)
			}
		}
		typBridge := x.typical("ovs-bridge", "ADD", 100*time.Millisecond)
		typPortmap := x.typical("ovs-portmap", "ADD", 50*time.Millisecond)
		x.takeLog()
		trials := envInt("OVSFLOW_RS_OVSDB_TRIALS", 10)
		for i := 0; i < trials; i++ {
			c := newAtt()
			// Even trials: a point of the whole chain's ADD; odd trials: a
			// point of ovs-portmap's ADD (its OVSDB record, flows, nft).
			window, where := typBridge+typPortmap, "chain"
			if i%2 == 1 {
				window, where = typPortmap, "ovs-portmap"
			}
			delay := time.Duration(rnd.Int64N(int64(window) + 1))
			stopped := make(chan struct{})
			var timer *time.Timer
			arm := func() {
				timer = time.AfterFunc(delay, func() { s.stop(t, "ovsdb-server", syscall.SIGKILL); close(stopped) })
			}
			if where == "chain" {
				arm()
			} else {
				x.before = func(plugin, command string) {
					if plugin == "ovs-portmap" && command == "ADD" {
						arm()
					}
				}
			}
			start := time.Now()
			_, addErr := n.AddContext(ctx, c, "eth0", faultCaps)
			took := time.Since(start)
			x.before = nil
			down := timer != nil && !timer.Stop()
			if down {
				<-stopped
			}
			what := fmt.Sprintf("trial %d (OVSDB killed %s into the %s ADD, down during ADD: %v)", i, delay.Round(time.Microsecond), where, down)
			hung := false
			for _, inv := range x.takeLog() {
				if inv.Hung {
					hung = true
					t.Errorf("%s: %s %s hung (no exit %s after it started); its goroutines:\n%s", what, inv.Plugin, inv.Command, hangAfter, inv.Stderr)
				}
			}
			if addErr != nil && cniCode(addErr) != types.ErrTryAgainLater {
				t.Errorf("%s: ADD after %s: got %v (code %d), want success or code 11", what, took.Round(time.Millisecond), addErr, cniCode(addErr))
			}
			delErr := n.DelContext(ctx, c, "eth0", faultCaps)
			if down {
				s.startOVSDB(t)
				// ovs-vswitchd reconnects with a backoff of up to 8 s:
				// restart it rather than wait.
				s.stop(t, "ovs-vswitchd", syscall.SIGTERM)
				s.startVswitchd(t)
				s.sync(t)
			}
			if delErr != nil {
				if cniCode(delErr) != types.ErrTryAgainLater {
					t.Errorf("%s: DEL with OVSDB down: got %v, want success or code 11", what, delErr)
				}
				if err := n.DelContext(ctx, c, "eth0", faultCaps); err != nil {
					t.Errorf("%s: DEL retried: %v", what, err)
				}
			}
			t.Logf("%s: ADD (%s) %v; DEL %v", what, took.Round(time.Millisecond), addErr, delErr)
			fc.result(t, clean(t, fmt.Sprintf("%s, ADD error %v, first DEL %v", what, addErr, delErr)))
			if hung {
				t.Fatalf("%s: a plugin hung; stopping the trials", what)
			}
		}
	})
	framework.Figure(t, "ovsdb_down", "injected", fc.injected, "survived", fc.survived, "leaked", fc.leaked)
}

// ovs-vswitchd down with OVSDB up: ovs-bridge's ADD waits for it as long as
// its budget lets it (faultTimeout here), fails with code 11 naming
// ovs-vswitchd and rolls back everything; ovs-portmap with ovs-vswitchd
// gone fails and rolls back too.
func TestVswitchdDown(t *testing.T) {
	requireSandbox(t)
	becomeSubreaper(t)
	s := newSandbox(t)
	const br = "rsvbr"
	framework.VsctlAt(t, s.db, "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev")
	x := &pluginExec{netns: s.name}
	n, au := faultNet(t, s, br, x)
	ctx := context.Background()
	var fc faultCounts
	used := map[string]attachment{}
	newAtt := func() *framework.Container {
		c := framework.NewContainer(t)
		used[c.ID+"/eth0"] = attachment{id: c.ID, ifname: "eth0"}
		return c
	}
	check := func(t *testing.T, what string) bool {
		t.Helper()
		if r := au.run(t, used, nil); len(r.leaked) > 0 {
			fc.leaked += len(r.leaked)
			t.Errorf("%s: %s", what, r)
			for _, a := range used {
				cleanupAttachment(t, au.n, a)
			}
			return false
		}
		return true
	}

	t.Run("ADD waits for the ofport", func(t *testing.T) {
		s.stop(t, "ovs-vswitchd", syscall.SIGTERM)
		for i := 0; i < 2; i++ { // the second ADD also finds the first one's pending change
			c := newAtt()
			x.takeLog()
			start := time.Now()
			_, err := n.AddContext(ctx, c, "eth0", faultCaps)
			took := time.Since(start)
			t.Logf("ADD #%d with ovs-vswitchd down: %s: %v (code %d)", i+1, took.Round(time.Millisecond), err, cniCode(err))
			// How long the bounded wait took is a figure; that it ends with
			// code 11 naming ovs-vswitchd is the behaviour (the harness's
			// hang guard, hangAfter, says when it does not end).
			framework.Figure(t, "vswitchd_down_add", "add", i+1, "took_ms", took.Milliseconds())
			if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "ovs-vswitchd") {
				t.Errorf("ADD #%d: got %v (code %d), want code 11 naming ovs-vswitchd", i+1, err, cniCode(err))
			}
			for _, inv := range x.takeLog() {
				if inv.Hung {
					t.Errorf("ADD #%d: %s %s hung (no exit %s after it started); its goroutines:\n%s", i+1, inv.Plugin, inv.Command, hangAfter, inv.Stderr)
				}
			}
			if !check(t, fmt.Sprintf("after ADD #%d failed", i+1)) { // full rollback, before any DEL
				fc.result(t, false)
				continue
			}
			if err := n.DelContext(ctx, c, "eth0", faultCaps); err != nil {
				t.Errorf("DEL after the failed ADD: %v", err)
			}
			fc.result(t, check(t, "after DEL"))
		}
		s.startVswitchd(t)
		s.sync(t)
		c := newAtt()
		if _, err := n.AddContext(ctx, c, "eth0", faultCaps); err != nil {
			t.Errorf("ADD with ovs-vswitchd back: %v", err)
		}
		if err := n.DelContext(ctx, c, "eth0", faultCaps); err != nil {
			t.Errorf("DEL: %v", err)
		}
		check(t, "ADD/DEL with ovs-vswitchd back")
	})

	t.Run("ovs-vswitchd gone before ovs-portmap's ADD", func(t *testing.T) {
		if s.pid("ovs-vswitchd") == 0 {
			s.startVswitchd(t)
			s.sync(t)
		}
		c := newAtt()
		x.before = func(plugin, command string) {
			if plugin == "ovs-portmap" && command == "ADD" {
				s.stop(t, "ovs-vswitchd", syscall.SIGKILL)
			}
		}
		_, err := n.AddContext(ctx, c, "eth0", faultCaps)
		x.before = nil
		if err == nil || !strings.Contains(err.Error(), "ovs-portmap") {
			t.Errorf("ADD: got %v, want ovs-portmap's error", err)
		}
		t.Logf("ADD: %v", err)
		// ovs-portmap rolled back its record and claims.
		for _, row := range au.n.rows(t, "Port") {
			if row.ExternalIDs["ovsflow.io/container-id"] != c.ID {
				continue
			}
			for k := range row.ExternalIDs {
				if strings.HasPrefix(k, "ovsflow.io/claim/") || k == "ovsflow.io/portmap" {
					t.Errorf("after the failed ADD: port %s still has %s", row.Name, k)
				}
			}
		}
		// ovs-vswitchd is still down: the flows went with it, so DEL has
		// nothing to do there and must succeed (a crashed ovs-vswitchd
		// leaves its management socket file behind).
		delErr := n.DelContext(ctx, c, "eth0", faultCaps)
		if delErr != nil {
			t.Errorf("DEL with ovs-vswitchd down: got %v, want success (its flows are gone with it)", delErr)
		}
		s.startVswitchd(t)
		s.sync(t)
		if delErr != nil {
			if err := n.DelContext(ctx, c, "eth0", faultCaps); err != nil { // the runtime retries
				t.Errorf("DEL retried with ovs-vswitchd back: %v", err)
			}
		}
		fc.result(t, check(t, "after DEL"))
	})
	framework.Figure(t, "vswitchd_down", "injected", fc.injected, "survived", fc.survived, "leaked", fc.leaked)
}
