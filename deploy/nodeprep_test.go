package deploy

import (
	"bufio"
	"bytes"
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

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// Addresses of TestNodePrep's node (on its uplink, then on the bridge) and
// of the neighbour behind the uplink.
const (
	npNode    = "203.0.113.10"
	npOutside = "203.0.113.20"
)

// npSandbox is a private Open vSwitch (hack/ovs-sandbox.sh) whose netns is
// the node node-prep.sh prepares.
type npSandbox struct {
	name, db, netns, rundir string
}

// startSandbox starts a sandbox named after this process, or skips the test
// loudly (fails it under CI) where it cannot run: it needs root and Open
// vSwitch.
func startSandbox(t *testing.T) *npSandbox {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		if os.Getenv("CI") != "" {
			t.Fatalf("CI: %s", why)
		}
		fmt.Fprintf(os.Stderr, "*** SKIPPING %s: %s ***\n", t.Name(), why)
		t.Skipf("SKIPPED: %s", why)
	}
	if os.Geteuid() != 0 {
		skip("node-prep.sh needs root (a network namespace, ovs-vswitchd)")
	}
	for _, bin := range []string{"ovsdb-server", "ovs-vswitchd", "ovs-vsctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			if _, err := os.Stat("/usr/sbin/" + bin); err != nil {
				skip(bin + " is not installed (apt-get install openvswitch-switch)")
			}
		}
	}
	script, _ := filepath.Abs("../hack/ovs-sandbox.sh")
	s := &npSandbox{name: fmt.Sprintf("ovsflow-np-%d", os.Getpid())}
	t.Cleanup(func() { exec.Command(script, "stop", s.name).Run() })
	out, err := exec.Command(script, "start", s.name).Output()
	if err != nil {
		skip(fmt.Sprintf("the Open vSwitch sandbox did not start: %v", err))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		switch k, v, _ := strings.Cut(sc.Text(), "="); k {
		case "OVSDB":
			s.db = v
		case "NETNS":
			s.netns = v
		case "RUNDIR":
			s.rundir = v
		}
	}
	return s
}

// must runs a command and returns its output, failing the test on error.
func must(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestNodePrep runs node-prep.sh on a node whose uplink (a veth to a
// neighbour's netns) holds the node's address, before any ADD: the bridge
// is fail_mode=secure, tagged as ours, holds exactly the suite's base flow
// (flows.BaseFlows, installed by `ovs-portmap reconcile`), and the
// neighbour reaches the node's address through the uplink port. A second
// run changes nothing. After kill -9 of ovs-vswitchd and a restart, the
// secure bridge forwards nothing (the control: no flow of ovs-vswitchd's
// own carries the uplink, so what carried it before was the base flow)
// until `ovs-portmap reconcile` has run; then the base flow is back and so
// is the uplink.
func TestNodePrep(t *testing.T) {
	s := startSandbox(t)
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/ovs-portmap").CombinedOutput(); err != nil {
		t.Fatalf("building ovs-portmap: %v\n%s", err, out)
	}
	portmap := filepath.Join(bin, "ovs-portmap")
	const br, upl = "brnp", "npup"
	ext := s.name + "-ext"
	must(t, "ip", "netns", "add", ext)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ext).Run() })
	node := func(args ...string) string {
		t.Helper()
		return must(t, "ip", append([]string{"netns", "exec", s.netns}, args...)...)
	}
	outside := func(args ...string) error {
		return exec.Command("ip", append([]string{"netns", "exec", ext}, args...)...).Run()
	}
	node("ip", "link", "add", upl, "type", "veth", "peer", "name", "eth0", "netns", ext)
	node("ip", "addr", "add", npNode+"/24", "dev", upl)
	node("ip", "link", "set", upl, "up")
	node("ip", "route", "add", "default", "via", npOutside, "dev", upl)
	for _, args := range [][]string{
		{"ip", "addr", "add", npOutside + "/24", "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "link", "set", "lo", "up"},
	} {
		if err := outside(args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	nodePrep := func() string {
		t.Helper()
		return node("env", "OVS_RUNDIR="+s.rundir, "OVS_PORTMAP="+portmap, "DATAPATH=netdev", "sh", "node-prep.sh", br, upl)
	}
	target := endpoint.Endpoint{Network: "unix", Address: filepath.Join(s.rundir, br+".mgmt")}
	// every flow of the bridge, ours or not
	dump := func() []openflow.Flow {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fl, err := openflow.Dump(ctx, target, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fl
	}
	wantBase := func(when string) {
		t.Helper()
		if err := openflow.Diff(flows.BaseFlows(), dump()); err != nil {
			t.Errorf("%s: the bridge's flows are not exactly the base flow: %v", when, err)
		}
	}
	reaches := func() bool {
		return outside("ping", "-c", "3", "-i", "0.2", "-W", "1", npNode) == nil
	}
	vsctl := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(must(t, "ovs-vsctl", append([]string{"--db=" + s.db, "--timeout=10"}, args...)...))
	}

	out := nodePrep()
	t.Logf("node-prep.sh:\n%s", out)
	if got := vsctl("get", "Bridge", br, "fail_mode"); got != "secure" {
		t.Errorf("fail_mode: got %s, want secure", got)
	}
	if got := vsctl("get", "Bridge", br, "external_ids:ovsflow.io/owner"); got != `"ovsflow-cni"` && got != "ovsflow-cni" {
		t.Errorf("external_ids:ovsflow.io/owner: got %s, want ovsflow-cni", got)
	}
	if got := vsctl("list-ports", br); got != upl {
		t.Errorf("ports: got %q, want the uplink %s", got, upl)
	}
	wantBase("after node-prep.sh")
	// A pod told by a redirect to send to another node directly bypasses
	// this node's conntrack on the way out only: TCP answers are INVALID here.
	for _, f := range []string{"all", br} {
		if got := strings.TrimSpace(node("cat", "/proc/sys/net/ipv4/conf/"+f+"/send_redirects")); got != "0" {
			t.Errorf("net.ipv4.conf.%s.send_redirects: got %s, want 0", f, got)
		}
	}
	if !strings.Contains(node("ip", "-4", "addr", "show", "dev", br), npNode+"/24") {
		t.Errorf("the node's address is not on %s", br)
	}
	if !reaches() {
		t.Fatalf("before any ADD: the neighbour does not reach the node's address %s through the uplink", npNode)
	}
	if again := nodePrep(); strings.Contains(again, "moved") || strings.Contains(again, "hwaddr") {
		t.Errorf("a second run changed something:\n%s", again)
	}
	wantBase("after a second node-prep.sh")

	pidFile := filepath.Join(s.rundir, "ovs-vswitchd.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !framework.Until(10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
		t.Fatalf("ovs-vswitchd %d still there after SIGKILL", pid)
	}
	os.Remove(pidFile)
	must(t, "../hack/ovs-sandbox.sh", "start-vswitchd", s.name)
	if !framework.Until(20*time.Second, func() bool {
		return endpoint.Listening(target) && exec.Command("ip", "-n", s.netns, "link", "show", br).Run() == nil
	}) {
		t.Fatalf("ovs-vswitchd did not re-create %s", br)
	}
	// The userspace datapath re-creates the bridge's interface without its
	// addresses: the node's network configuration puts them back.
	node("ip", "addr", "replace", npNode+"/24", "dev", br)
	node("ip", "link", "set", br, "up")
	if fl := dump(); len(fl) != 0 {
		t.Errorf("after the restart, before reconcile: got flows %v, want none (fail_mode=secure)", fl)
	}
	if reaches() {
		t.Errorf("after the restart, before reconcile: the neighbour reaches the node through a bridge without flows")
	}
	t.Logf("reconcile: %s", node(portmap, "reconcile", "-ovsdb", s.db))
	wantBase("after the restart and reconcile")
	if !reaches() {
		t.Errorf("after the restart and reconcile: the neighbour does not reach the node's address %s", npNode)
	}
}
