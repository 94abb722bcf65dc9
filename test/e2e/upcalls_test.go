package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/reconcile"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// TestUpcallsLostAtBoot: an ovs-vswitchd started as at boot, its monotonic
// clock near 0 (a time namespace) and its kernel datapath without flows. On the kernel datapath Open vSwitch
// 3.1.0 then counts no usable CPU for its first 10 s, starts no upcall
// handler for the per-CPU dispatch, and the datapath loses every upcall,
// also after those 10 s (docs/resilience.md): the reconcile watch
// (`ovs-portmap reconcile -watch`, the agent's watch) reads the datapath's
// lookups, says that every upcall is lost while no ping gets through, and,
// once ovs-vswitchd is restarted normally, says the upcalls are handled
// and pings answer. On the userspace datapath the same boot forwards (it
// has no per-CPU dispatch) and the watch says nothing of upcalls: it reads
// kernel datapaths only.
func TestUpcallsLostAtBoot(t *testing.T) {
	l := newLab(t)
	n := l.network("upcalls", nil, nil)
	a := l.join(n, "a", nil)
	b := l.join(n, "b", nil)
	pollUntil(t, "a pings b", func() bool { return a.Ping(b.v4.String()) == nil })
	rundir := filepath.Dir(strings.TrimPrefix(ovsdbAddr, "unix:"))
	pidFile := filepath.Join(rundir, "ovs-vswitchd.pid")
	logFile := filepath.Join(rundir, "ovs-vswitchd.log")
	// Unless the test ended with the normal restart, the next tests get a
	// normal ovs-vswitchd; these run after the watch is gone (cleanups run
	// last registered first), so that no flag of its outlives the test.
	cured := false
	t.Cleanup(func() {
		if cured {
			return
		}
		if _, err := os.Stat(pidFile); err == nil {
			killVswitchd(t, pidFile)
		}
		startVswitchd(t)
	})
	clearRestoreWaitAfter(t)
	wlog := startReconcileWatch(t)
	before, _ := os.ReadFile(logFile)
	vlog := func() string {
		b, _ := os.ReadFile(logFile)
		if len(b) < len(before) {
			return string(b)
		}
		return string(b[len(before):])
	}
	killVswitchd(t, pidFile)
	if datapath == framework.System {
		// A booted kernel's datapath has no flow: the ones the watch's
		// flow-restore-wait keeps would carry a's pings to b.
		if out, err := exec.Command("ip", "netns", "exec", framework.Env.NetNS, "ovs-dpctl", "del-flows", "system@ovs-system").CombinedOutput(); err != nil {
			t.Fatalf("ovs-dpctl del-flows: %v: %s", err, out)
		}
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		t.Fatal(err)
	}
	// The new ovs-vswitchd's monotonic clock starts between 0 and 1 s, as
	// at boot.
	boot := exec.Command("unshare", "--fork", "--time", fmt.Sprintf("--monotonic=-%d", now.Sec),
		"ip", "netns", "exec", framework.Env.NetNS, "ovs-vswitchd", ovsdbAddr, "--pidfile="+pidFile, "--detach", "--no-chdir",
		"--log-file="+logFile, "-vconsole:off", "-vfile:info")
	boot.Env = append(os.Environ(), "OVS_RUNDIR="+rundir, "OVS_DBDIR="+rundir, "OVS_LOGDIR="+rundir, "OVS_SYSCONFDIR="+rundir)
	if out, err := boot.CombinedOutput(); err != nil {
		t.Fatalf("ovs-vswitchd in a time namespace: %v: %s", err, out)
	}
	booted := time.Now()

	// a pings b all along: the misses the watch reads.
	var answered atomic.Int64
	stop := make(chan struct{})
	pinging := make(chan struct{})
	go func() {
		defer close(pinging)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if a.Ping(b.v4.String()) == nil {
				answered.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-pinging
	})

	lostLine := reconcile.UpcallsLine(unixctl.ErrNoUpcallHandler)[:40]
	handledLine := reconcile.UpcallsLine(nil)
	if datapath != framework.System {
		// No per-CPU dispatch: the boot forwards at once, and the watch
		// asks nothing.
		framework.Eventually(t, 30*time.Second, "a pings b after the boot", func() error {
			if answered.Load() == 0 {
				return fmt.Errorf("no answer in %v", time.Since(booted).Round(time.Millisecond))
			}
			return nil
		})
		framework.Eventually(t, 30*time.Second, "the watch's pass after the boot", func() error {
			if c := strings.Count(wlog.String(), "reconcile: "); c < 2 {
				return fmt.Errorf("the watch said %q", wlog.String())
			}
			return nil
		})
		if s := wlog.String(); strings.Contains(s, lostLine) || strings.Contains(s, handledLine) {
			t.Fatalf("the watch spoke of upcalls without a kernel datapath:\n%s", s)
		}
		return
	}

	framework.Eventually(t, 2*time.Minute, "the watch says the kernel datapath loses every upcall", func() error {
		if !strings.Contains(wlog.String(), lostLine) {
			return fmt.Errorf("after %v it said:\n%s", time.Since(booted).Round(time.Second), wlog.String())
		}
		return nil
	})
	t.Logf("the watch, %v after the boot: %s", time.Since(booted).Round(time.Millisecond), lastLine(wlog.String(), lostLine))
	if got := answered.Load(); got != 0 {
		t.Errorf("%d pings answered before the watch's alarm: the datapath forwarded, the alarm is false", got)
	}
	if !strings.Contains(vlog(), "Overriding n-handler-threads to 0") {
		t.Errorf("ovs-vswitchd did not log %q: the loss has another cause than the one named", "Overriding n-handler-threads to 0")
	}
	// It does not mend itself: once its clock passed 10 s it starts its
	// handlers ("Overriding n-handler-threads to 2"), and still no ping
	// is answered.
	framework.Eventually(t, time.Minute, "ovs-vswitchd starts its handlers once its clock passed 10 s", func() error {
		if !handlersStarted.MatchString(vlog()) {
			return fmt.Errorf("its log since the boot:\n%s", vlog())
		}
		return nil
	})
	framework.Consistently(t, 6*time.Second, "no ping answered after the handlers started", func() error {
		if got := answered.Load(); got != 0 {
			return fmt.Errorf("%d pings answered: it mended itself", got)
		}
		return nil
	})

	// The cure is a restart past 10 s of uptime: the watch says the
	// upcalls are handled, and a pings b again.
	mark := len(wlog.String())
	restartVswitchdFrom(t, pidFile)
	framework.Eventually(t, 2*time.Minute, "the watch says the upcalls are handled after a normal restart", func() error {
		if !strings.Contains(wlog.String()[mark:], handledLine) {
			return fmt.Errorf("it said:\n%s", wlog.String()[mark:])
		}
		return nil
	})
	answered.Store(0)
	framework.Eventually(t, 30*time.Second, "a pings b after the normal restart", func() error {
		if answered.Load() == 0 {
			return fmt.Errorf("no answer")
		}
		return nil
	})
	if s := wlog.String()[mark:]; strings.Contains(s, lostLine) {
		t.Errorf("after the normal restart the watch still says the upcalls are lost:\n%s", s)
	}
	waitRestoreWaitCleared(t)
	cured = true
}

var handlersStarted = regexp.MustCompile(`Overriding n-handler-threads to [1-9]`)

// lastLine is the last line of s that holds sub.
func lastLine(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return ""
}
