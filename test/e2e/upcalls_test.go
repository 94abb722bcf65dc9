package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/reconcile"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
	"github.com/ovsflow/ovs-cni/test/framework"
)

var overriding = regexp.MustCompile(`Overriding n-handler-threads to (\d+)`)

// An ovs-vswitchd that starts within 10 s of the kernel's boot: Open
// vSwitch 3.1.0 on a machine of at most two CPUs counts 0 usable CPUs until
// 10 s of CLOCK_MONOTONIC have passed, starts no upcall handler for the
// per-CPU kernel datapath, and forwards no new flow until then. The boot is
// made with a time namespace whose monotonic clock starts near 0. The
// watch's question (unixctl.ReadUpcalls) sees the state
// (unixctl.ErrNoUpcallHandler) and ovs-vswitchd logs "Overriding
// n-handler-threads to 0"; once it mends itself the watch reports its
// handlers and the bridge forwards again. Kernel datapath only (the userspace datapath has no per-CPU
// dispatch).
func TestUpcallHandlersAtBoot(t *testing.T) {
	requireSandbox(t)
	if datapath != framework.System {
		t.Skip("the kernel datapath's per-CPU upcall dispatch: run by hack/ovs-vm.sh")
	}
	h := newOVSHost(t)
	n := newCNI(t, conflist("1.0.0", "upcalls", bridgeConf(h.bridge, t.TempDir(), map[string]any{"isGateway": true})))
	a, b := newContainer(t), newContainer(t)
	n.mustAdd(t, a, "eth0", nil)
	bV4 := addrOf(t, n.mustAdd(t, b, "eth0", nil), false)
	t.Cleanup(func() { n.del(a, "eth0", nil); n.del(b, "eth0", nil) })
	if err := framework.Wait(30*time.Second, func() error { return a.ping(bV4) }); err != nil {
		t.Fatalf("a -> b before the restart: %v", err)
	}

	rundir := filepath.Dir(strings.TrimPrefix(ovsdbAddr, "unix:"))
	pidFile := filepath.Join(rundir, "ovs-vswitchd.pid")
	logFile := filepath.Join(rundir, "ovs-vswitchd.log")
	before, _ := os.ReadFile(logFile)
	killVswitchd(t, pidFile)
	t.Cleanup(func() { restartVswitchdFrom(t, pidFile) })
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		t.Fatal(err)
	}
	// The new ovs-vswitchd's monotonic clock starts at 0 to 1 s.
	cmd := exec.Command("unshare", "--fork", "--time", fmt.Sprintf("--monotonic=-%d", now.Sec),
		"ovs-vswitchd", ovsdbAddr, "--pidfile="+pidFile, "--detach", "--no-chdir",
		"--log-file="+logFile, "-vconsole:off", "-vfile:info")
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+rundir, "OVS_DBDIR="+rundir, "OVS_LOGDIR="+rundir, "OVS_SYSCONFDIR="+rundir,
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ovs-vswitchd in a time namespace: %v: %s", err, out)
	}

	// The log of the new ovs-vswitchd's lines.
	log := func() string {
		b, _ := os.ReadFile(logFile)
		if len(b) < len(before) {
			return string(b)
		}
		return string(b[len(before):])
	}
	// The state lasts until 10 s of ovs-vswitchd's clock (about 6 s in the
	// emulated guest): asked directly, as the watch asks, without waiting
	// for a reconcile pass (the watch asks after its restore pass, which
	// the emulated guest makes too slow to meet the state).
	sock, err := unixctl.Find(endpoint.Endpoint{Network: "unix", Address: filepath.Join(rundir, h.bridge+".mgmt")}, "")
	if err != nil {
		t.Fatal(err)
	}
	var seen error
	if err := framework.Wait(60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		u, err := unixctl.ReadUpcalls(ctx, sock)
		if err != nil {
			return err
		}
		if seen = u.Err(); seen != nil {
			return nil
		}
		if m := overriding.FindAllStringSubmatch(log(), -1); len(m) > 0 && m[len(m)-1][1] != "0" {
			return errors.New("ovs-vswitchd has its handlers already: the state was missed")
		}
		return fmt.Errorf("%+v", u)
	}); err != nil || !errors.Is(seen, unixctl.ErrNoUpcallHandler) {
		t.Fatalf("the missing upcall handler never seen: %v\novs-vswitchd's log:\n%s", err, log())
	}
	t.Logf("seen: %v", seen)
	if !strings.Contains(log(), "Overriding n-handler-threads to 0") {
		t.Errorf("ovs-vswitchd did not log %q: another cause than the one named", "Overriding n-handler-threads to 0")
	}

	var mu sync.Mutex
	var reports []error
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reconcile.Watch(ctx, ovsdbEP, "", reconcile.Hooks{Upcalls: func(err error) {
			t.Logf("watch: %s", reconcile.UpcallsLine(err))
			mu.Lock()
			reports = append(reports, err)
			mu.Unlock()
		}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	saw := func(cond func(error) bool) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			for _, err := range reports {
				if cond(err) {
					return nil
				}
			}
			return fmt.Errorf("reports so far: %v", reports)
		}
	}
	// Mended after 10 s of its clock: the watch says the handlers are
	// there (no false alarm), b answers.
	if err := framework.Wait(60*time.Second, saw(func(err error) bool { return err == nil })); err != nil {
		t.Fatalf("the watch never reported the handlers: %v\novs-vswitchd's log:\n%s", err, log())
	}
	if err := framework.Wait(30*time.Second, func() error { return a.ping(bV4) }); err != nil {
		t.Fatalf("a -> b after the handlers came back: %v", err)
	}
}
