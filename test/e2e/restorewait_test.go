package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// restoreWait reads other_config:flow-restore-wait ("" when unset) and
// whether the suite's mark is on the root row.
func restoreWait(t *testing.T) (flag string, marked bool) {
	t.Helper()
	flag = strings.Trim(strings.TrimSpace(framework.Vsctl(t, "--if-exists", "get", "Open_vSwitch", ".", "other_config:flow-restore-wait")), `"`)
	return flag, strings.Contains(framework.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids"), ovsdb.KeyRestoreWaitSet)
}

// clearRestoreWaitAfter removes any flow-restore-wait and the suite's mark
// when the test ends: the next tests need a forwarding ovs-vswitchd.
func clearRestoreWaitAfter(t *testing.T) {
	t.Cleanup(func() {
		run("ovs-vsctl", "--db="+ovsdbAddr, "remove", "Open_vSwitch", ".", "other_config", "flow-restore-wait")
		run("ovs-vsctl", "--db="+ovsdbAddr, "remove", "Open_vSwitch", ".", "external_ids", ovsdb.KeyRestoreWaitSet)
	})
}

// setRestoreWaitOurs sets flow-restore-wait with the suite's mark, through
// the call the reconcile watch makes when ovs-vswitchd goes.
func setRestoreWaitOurs(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, ovsdbEP)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := cli.SetFlowRestoreWait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A boot after the reconcile watch set flow-restore-wait and died with the
// node (systemd stopped Open vSwitch while the agent ran): ovs-vswitchd
// starts with the flag, no watch runs, and `ovs-portmap reconcile` run once
// (as deploy/node-prep.sh does at boot) must clear it once the pipeline is
// back, or the node forwards nothing. On the kernel datapath the flag is
// set by a real watch as ovs-vswitchd stops; on the userspace datapath the
// watch sets none (the flows die with ovs-vswitchd), and the test sets it
// through the watch's own call.
func TestOneShotReconcileClearsRestoreWait(t *testing.T) {
	l := newLab(t)
	framework.Vsctl(t, "set-fail-mode", l.Bridge, "secure")
	clearRestoreWaitAfter(t)
	n := l.network("boot", nil, map[string]any{})
	a := l.join(n, "a", nil)
	b := l.join(n, "b", nil)
	if err := a.Ping(b.v4.String()); err != nil {
		t.Fatalf("before the restart: ping a -> b: %v", err)
	}

	if framework.Userspace() {
		stopVswitchd(t, syscall.SIGTERM)
		setRestoreWaitOurs(t)
	} else {
		var log syncBuffer
		watch := exec.Command(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr, "-watch")
		watch.Stdout, watch.Stderr = &log, &log
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if t.Failed() {
				t.Logf("reconcile -watch said:\n%s", log.String())
			}
		}()
		pollUntil(t, "the watch's first pass", func() bool { return strings.Contains(log.String(), "reconcile: ") })
		stopVswitchd(t, syscall.SIGTERM)
		pollUntil(t, "the watch sets flow-restore-wait", func() bool { f, m := restoreWait(t); return f == "true" && m })
		watch.Process.Kill() // dies with the node
		watch.Wait()
	}
	startVswitchd(t)
	l.restoreNode(t)
	if f, m := restoreWait(t); f != "true" || !m {
		t.Fatalf("ovs-vswitchd started with flow-restore-wait %q, mark %v: the test proves nothing", f, m)
	}

	out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr)
	t.Logf("reconcile said:\n%s", out)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	if f, m := restoreWait(t); f != "" || m {
		t.Errorf("after one reconcile: flow-restore-wait %q, mark %v; want both gone", f, m)
	}
	pollUntil(t, "ping a -> b through the bridge", func() bool { return a.Ping(b.v4.String()) == nil })
}

// A flow-restore-wait that someone else set (ovs-ctl's restart, an
// operator) is theirs to clear: neither a one-shot reconcile nor uninstall
// touches it.
func TestRestoreWaitOfOthersStays(t *testing.T) {
	requireSandbox(t)
	framework.NewOVSHost(t)
	clearRestoreWaitAfter(t)
	framework.Vsctl(t, "set", "Open_vSwitch", ".", "other_config:flow-restore-wait=true")
	if out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr); err != nil {
		t.Fatalf("reconcile: %v: %s", err, out)
	}
	if f, _ := restoreWait(t); f != "true" {
		t.Errorf("after reconcile: flow-restore-wait %q, want someone else's \"true\" kept", f)
	}
	uninstall(t)
	if f, _ := restoreWait(t); f != "true" {
		t.Errorf("after uninstall: flow-restore-wait %q, want someone else's \"true\" kept", f)
	}
}

// Uninstall run while a flow-restore-wait of ours is set (the watch set it,
// then the agent was removed) clears it with the suite's mark: no watch of
// ours is left to clear it, and the next ovs-vswitchd would forward nothing.
func TestUninstallClearsRestoreWait(t *testing.T) {
	requireSandbox(t)
	framework.NewOVSHost(t)
	clearRestoreWaitAfter(t)
	setRestoreWaitOurs(t)
	if f, m := restoreWait(t); f != "true" || !m {
		t.Fatalf("flow-restore-wait %q, mark %v: the test proves nothing", f, m)
	}
	uninstall(t)
	if f, m := restoreWait(t); f != "" || m {
		t.Errorf("after uninstall: flow-restore-wait %q, mark %v; want both gone", f, m)
	}
}

// uninstall runs `ovsflow-agent uninstall` with CNI dirs of the test's own.
func uninstall(t *testing.T) {
	t.Helper()
	src, bin, conf := t.TempDir(), t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(src, "ovs-bridge"), []byte("image's"), 0o755)
	out, err := run(filepath.Join(binDir, "ovsflow-agent"), "uninstall", "-ovsdb", ovsdbAddr, "-plugin-src", src,
		"-cni-bin-dir", bin, "-cni-conf-dir", conf, "-conf-template", "/etc/ovsflow/10-ovsflow.conflist")
	t.Logf("uninstall said:\n%s", out)
	if err != nil {
		t.Fatalf("uninstall: %v", err)
	}
}

// pollUntil polls cond until it holds, failing the test after 20 s.
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !framework.Until(20*time.Second, cond) {
		t.Fatalf("%s: not within %v", what, framework.Scaled(20*time.Second))
	}
}
