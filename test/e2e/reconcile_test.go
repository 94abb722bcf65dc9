package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// bridgeAddrs lists the addresses on a bridge's internal interface.
func bridgeAddrs(t *testing.T, br string) []string {
	t.Helper()
	l, err := netlink.LinkByName(br)
	if err != nil {
		t.Errorf("internal interface %s: %v", br, err)
		return nil
	}
	addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Errorf("addresses of %s: %v", br, err)
	}
	var out []string
	for _, a := range addrs {
		out = append(out, a.IP.String())
	}
	return out
}

// restartVswitchd kills ovs-vswitchd with SIGKILL and starts it again;
// between the two it calls dead, if not nil. With args, the new one is
// started with the sandbox's own command line and args added (another
// --pidfile or --unixctl, which override the sandbox's).
func restartVswitchd(t *testing.T, dead func(), args ...string) {
	t.Helper()
	killVswitchd(t, filepath.Join(filepath.Dir(strings.TrimPrefix(ovsdbAddr, "unix:")), "ovs-vswitchd.pid"))
	if dead != nil {
		dead()
	}
	if len(args) > 0 {
		rundir := filepath.Dir(strings.TrimPrefix(ovsdbAddr, "unix:"))
		cmd := exec.Command("ovs-vswitchd", append([]string{ovsdbAddr, "--detach", "--no-chdir",
			"--log-file=" + filepath.Join(rundir, "ovs-vswitchd.log"), "-vconsole:off", "-vfile:info"}, args...)...)
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+rundir, "OVS_DBDIR="+rundir, "OVS_LOGDIR="+rundir, "OVS_SYSCONFDIR="+rundir,
			"PATH=/usr/sbin:/usr/bin:/sbin:/bin")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ovs-vswitchd %v: %v: %s", args, err, out)
		}
		return
	}
	startVswitchd(t)
}

// restartVswitchdFrom kills the ovs-vswitchd of pidFile and starts the
// sandbox's own again.
func restartVswitchdFrom(t *testing.T, pidFile string) {
	t.Helper()
	killVswitchd(t, pidFile)
	startVswitchd(t)
}

func startVswitchd(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(filepath.Join(repoRoot, "hack", "ovs-sandbox.sh"), "start-vswitchd", sandboxNS).CombinedOutput(); err != nil {
		t.Fatalf("start-vswitchd: %v: %s", err, out)
	}
}

// killVswitchd kills the ovs-vswitchd of pidFile with SIGKILL and waits
// until it is gone; it removes the pid file, which SIGKILL leaves.
func killVswitchd(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %s: %v", pidFile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	framework.Until(2*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
	os.Remove(pidFile)
}

// Flows live in ovs-vswitchd's memory: after it is killed and started again,
// `ovs-portmap reconcile -watch` rebuilds every host port from OVSDB alone.
func TestReconcileAfterVswitchdRestart(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.1.0", "rec", nil)
	const N = 10
	cs := make([]*framework.Container, N)
	for i := range cs {
		cs[i] = framework.NewContainer(t)
		n.MustAdd(t, cs[i], "eth0", mappings(pm(30000+i, 80, "tcp", "")))
		cs[i].ServeTCP(t, 80)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			n.Del(c, "eth0", nil)
		}
	})
	for i, c := range cs {
		expect(t, h.Outside.NS, "tcp", hp(nodeV4, 30000+i), c, outsideV4)
	}

	startReconcileWatch(t)

	// On the kernel datapath, the datapath and its ports (the internal
	// interface with its addresses, the containers' veths) outlive
	// ovs-vswitchd; only the flows, in its memory, are lost. On the userspace
	// datapath everything is gone with it, and the internal interface (a tap)
	// comes back without addresses.
	var kept []string
	restartVswitchd(t, func() {
		if framework.Userspace() {
			return
		}
		out, err := run("ovs-dpctl", "show")
		for _, want := range []string{h.Bridge, cs[0].HostVeth("eth0"), cs[N-1].HostVeth("eth0")} {
			if err != nil || !strings.Contains(out, "port ") || !strings.Contains(out, want) {
				t.Errorf("kernel datapath with ovs-vswitchd dead: want port %s kept; %v\n%s", want, err, out)
			}
		}
		kept = bridgeAddrs(t, h.Bridge)
	})
	back := time.Now()
	if framework.Userspace() {
		// The node's own addresses are the operator's (its network configuration
		// puts them back); the gateway addresses are restored by reconcile.
		for _, args := range [][]string{
			{"addr", "replace", nodeV4 + "/24", "dev", h.Bridge},
			{"addr", "replace", nodeV6 + "/64", "dev", h.Bridge, "nodad"},
			{"link", "set", h.Bridge, "up"},
		} {
			framework.Until(time.Second, func() bool { _, err := run("ip", args...); return err == nil })
		}
		run("ethtool", "-K", h.Bridge, "tx", "off") // see framework.WireOVSHost
	} else {
		for _, a := range []string{nodeV4, nodeV6, "192.0.2.1"} {
			if !slices.Contains(kept, a) {
				t.Errorf("kernel datapath: %s lost from %s while ovs-vswitchd was dead (has %v)", a, h.Bridge, kept)
			}
		}
	}

	for i, c := range cs {
		var got string
		var err error
		if !framework.Until(5*time.Second, func() bool { // a hang guard: how soon is the figure logged below
			got, err = framework.Dial(h.Outside.NS, "tcp", hp(nodeV4, 30000+i))
			return err == nil && strings.HasPrefix(got, "hello from "+c.ID)
		}) {
			t.Fatalf("host port %d did not answer within %v: %q, %v", 30000+i, framework.Scaled(5*time.Second), got, err)
		}
	}
	t.Logf("all %d host ports answered %.2f s after ovs-vswitchd was started again", N, time.Since(back).Seconds())
	// On the kernel datapath the host ports answer through the datapath
	// flows kept across the restart (flow-restore-wait), before reconcile;
	// what they do not cover (the gateway, not pinged before) waits for the
	// pipeline, after which the watch clears the flag.
	waitRestoreWaitCleared(t)
	if err := cs[0].Ping("192.0.2.1"); err != nil {
		t.Errorf("gateway address not restored: %v", err)
	}

	// CHECK and GC agree with what was rebuilt.
	for i, c := range cs {
		if err := n.Check(c, "eth0", mappings(pm(30000+i, 80, "tcp", ""))); err != nil {
			t.Errorf("CHECK %d after reconcile: %v", i, err)
		}
	}
	var valid []types.GCAttachment
	for _, c := range cs {
		valid = append(valid, types.GCAttachment{ContainerID: c.ID, IfName: "eth0"})
	}
	if err := n.Cfg.GCNetworkList(context.Background(), n.List, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	expect(t, h.Outside.NS, "tcp", hp(nodeV6, 30000), cs[0], outsideV6)

	// A one-shot reconcile is idempotent and removes flows nobody owns.
	orphan := "cookie=0x0fc501deadbeef01,table=41,priority=100,ip,nw_dst=192.0.2.250,actions=drop"
	if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "add-flow", h.OFTarget(), orphan); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr)
		if err != nil {
			t.Fatalf("reconcile: %v: %s", err, out)
		}
		// The second finds every flow as the records want it (compared
		// structurally with a dump) and sends no bundle.
		if want := []string{" stale=1 ", " bridges=0 stale=0 "}[i]; !strings.Contains(out, want) {
			t.Errorf("reconcile %d said %q, want %q", i+1, out, want)
		}
	}
	if out, _ := run("ovs-ofctl", "-O", "OpenFlow14", "dump-flows", h.OFTarget(), "cookie=0x0fc501deadbeef01/-1"); strings.Contains(out, "cookie=") {
		t.Errorf("reconcile left a flow of no live attachment:\n%s", out)
	}
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 30009), cs[9], outsideV4)
}
