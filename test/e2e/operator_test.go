package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// What an operator meets first: errors that name the cause and the key.

// A bridge the plugin created that ovs-vswitchd cannot open (the kernel
// datapath on a node without the openvswitch module) is a permanent error
// (code 7) naming the reason, at once, not a "try again later" after the
// ofport timeout; the bridge is removed, so that the ADD with the config
// fixed works.
func TestOperatorUnopenableBridge(t *testing.T) {
	requireSandbox(t)
	if _, err := netlink.GenlFamilyGet("ovs_datapath"); err == nil {
		t.Skip("SKIPPED: this kernel has the openvswitch module: every bridge on the kernel datapath opens (TestOperatorUnknownDatapath covers a bridge that does not)")
	}
	br := uniq("e2enomod")
	t.Cleanup(func() { framework.DelBridge(br) })
	c := framework.NewContainer(t)
	broken := framework.NewCNI(t, conflist("1.0.0", "nomod", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), map[string]any{"createBridge": true})), nil)
	_, err := broken.Add(c, "eth0", nil)
	if got := cniCode(err); got != 7 {
		t.Fatalf("ADD on the kernel datapath without the module: code %d (%v), want 7", got, err)
	}
	want := `"datapathType" unset ("system"): ovs-vswitchd cannot open bridge "` + br + `" on the kernel datapath: the kernel has no openvswitch module (generic netlink family "ovs_datapath" not found); removed the bridge, which this plugin had created; set "datapathType": "netdev" for the userspace datapath`
	if got := err.Error(); !strings.Contains(got, want) {
		t.Fatalf("ADD error:\n got %s\nwant %s", got, want)
	}
	if out := framework.Vsctl(t, "--no-headings", "--columns=name", "find", "Bridge", "name="+br); out != "" {
		t.Fatalf("bridge %s left after the failed ADD: %q", br, out)
	}
	fixed := framework.NewCNI(t, conflist("1.0.0", "nomod", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), map[string]any{"createBridge": true, "datapathType": "netdev"})), nil)
	fixed.MustAdd(t, c, "eth0", nil)
	if err := fixed.Del(c, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
}

// A bridge that ovs-vswitchd cannot open, made by someone else, is the same
// permanent error, and stays: it is not ours to remove.
func TestOperatorUnknownDatapath(t *testing.T) {
	requireSandbox(t)
	br := uniq("e2ebaddp")
	framework.Vsctl(t, "add-br", br, "--", "set", "bridge", br, "datapath_type=nosuch")
	t.Cleanup(func() { framework.DelBridge(br) })
	c := framework.NewContainer(t)
	n := framework.NewCNI(t, conflist("1.0.0", "baddp", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	_, err := n.Add(c, "eth0", nil)
	if got := cniCode(err); got != 7 {
		t.Fatalf("ADD on a bridge of datapath type nosuch: code %d (%v), want 7", got, err)
	}
	want := `"datapathType" unset ("system"): ovs-vswitchd cannot open bridge "` + br + `" on the nosuch datapath (see ovs-vswitchd's log)`
	if got := err.Error(); !strings.Contains(got, want) {
		t.Fatalf("ADD error:\n got %s\nwant %s", got, want)
	}
	if out := framework.Vsctl(t, "--no-headings", "--columns=name", "find", "Bridge", "name="+br); out != br {
		t.Fatalf("bridge %s, not ours, is gone after the failed ADD: %q", br, out)
	}
}

// ovs-portmap without an "ovsdb" key, beside an ovs-bridge with one: ADD's
// error names the key (once "ovsdb unreachable", not twice), and DEL
// succeeds where no Open vSwitch has run at the default endpoint since boot
// (nothing can have been done through it), so the attachment goes. A DEL
// that cannot know (an endpoint whose directory exists) stays code 11.
func TestOperatorPortmapWithoutOVSDB(t *testing.T) {
	requireSandbox(t)
	if _, err := os.Stat(filepath.Dir(strings.TrimPrefix(endpoint.DefaultOVSDB, "unix:"))); err == nil {
		t.Skipf("SKIPPED: %s exists on this node: a DEL through it cannot tell that nothing was done", endpoint.DefaultOVSDB)
	}
	br := framework.NewBridge(t, "e2ebr")
	c := framework.NewContainer(t)
	n := framework.NewCNI(t, conflist("1.0.0", "nokey", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil),
		map[string]any{"type": "ovs-portmap", "capabilities": map[string]any{"portMappings": true}}), nil)

	maps := mappings(pm(18080, 80, "tcp", ""))
	_, err := n.Add(c, "eth0", maps)
	if got := cniCode(err); got != 11 {
		t.Fatalf("ADD: code %d (%v), want 11", got, err)
	}
	want := `plugin type="ovs-portmap" failed (add): ovsdb unreachable (no "ovsdb" key in this plugin's config: the default, ` + endpoint.DefaultOVSDB + `); connecting to ` + endpoint.DefaultOVSDB + `: `
	if got := err.Error(); !strings.HasPrefix(got, want) {
		t.Fatalf("ADD error:\n got %s\nwant %s...", got, want)
	}
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 1 {
		t.Fatalf("ovs-bridge's ports after its ADD: %v, want 1", ports)
	}
	if err := n.Del(c, "eth0", maps); err != nil {
		t.Fatalf("DEL: %v, want success", err)
	}
	if left := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(left) != 0 {
		t.Fatalf("ports left after DEL: %v", left)
	}

	// An endpoint whose directory exists: OVS may be restarting there.
	sock := "unix:" + filepath.Join(t.TempDir(), "db.sock")
	m := framework.NewCNI(t, conflist("1.0.0", "nokey", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil),
		map[string]any{"type": "ovs-portmap", "ovsdb": sock, "capabilities": map[string]any{"portMappings": true}}), nil)

	c2 := framework.NewContainer(t)
	err = m.Del(c2, "eth0", maps)
	if got := cniCode(err); got != 11 {
		t.Fatalf("DEL through %s: code %d (%v), want 11", sock, got, err)
	}
	want = `plugin type="ovs-portmap" failed (delete): ovsdb unreachable: cannot tell what is left of attachment ` + c2.ID + `/eth0; connecting to ` + sock + `: `
	if got := err.Error(); !strings.HasPrefix(got, want) {
		t.Fatalf("DEL error:\n got %s\nwant %s...", got, want)
	}
}

// hack/ovs-sandbox.sh start NAME refuses a network namespace NAME that it
// did not create, and stop NAME leaves such a namespace alone: it holds
// someone else's interfaces.
func TestOperatorSandboxForeignNetNS(t *testing.T) {
	requireSandbox(t)
	name := uniq(fmt.Sprintf("ovsflow-foreign%d-", os.Getpid()))
	if out, err := run("ip", "netns", "add", name); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { run("ip", "netns", "del", name) })
	if out, err := run("ip", "-n", name, "link", "add", "keepme", "type", "veth", "peer", "name", "keepme1"); err != nil {
		t.Fatalf("ip link add: %v: %s", err, out)
	}
	script := filepath.Join(repoRoot, "hack", "ovs-sandbox.sh")
	cmd := exec.Command(script, "start", name)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("start over a foreign netns: %v, want exit code 1\n%s", err, out)
	}
	want := `ovs-sandbox: network namespace "` + name + `" exists and was not created by ovs-sandbox.sh: pick another NAME, or delete it (ip netns del ` + name + `)`
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("start over a foreign netns:\n got %s\nwant %s", got, want)
	}
	if out, err := exec.Command(script, "stop", name).CombinedOutput(); err != nil {
		t.Fatalf("stop: %v: %s", err, out)
	}
	if out, err := run("ip", "-n", name, "link", "show", "keepme"); err != nil {
		t.Fatalf("the foreign netns lost its interface: %v: %s", err, out)
	}
}

// A plugin run outside the node's network namespace makes the veth where
// ovs-vswitchd cannot see it: the error says so, and what to do.
func TestOperatorOtherNetNS(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	elsewhere := framework.NewContainer(t) // plays a host namespace other than the node's
	c := framework.NewContainer(t)
	conf := conflistConf(t, framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil))
	cmd := exec.Command("ip", "netns", "exec", elsewhere.Name, filepath.Join(binDir, "ovs-bridge"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID="+c.ID, "CNI_NETNS="+c.NS.Path(),
		"CNI_IFNAME=eth0", "CNI_PATH="+binDir)
	cmd.Stdin = strings.NewReader(conf)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("ADD from another netns: %v, want a failure\n%s", err, out)
	}
	var e struct {
		Code uint   `json:"code"`
		Msg  string `json:"msg"`
	}
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("ADD's error: %v\n%s", err, out)
	}
	for _, want := range []string{"(No such device): ovs-vswitchd (pid ", "runs in another network namespace than this plugin", "run the plugin in the node's network namespace, where ovs-vswitchd runs"} {
		if !strings.Contains(e.Msg, want) {
			t.Errorf("ADD's error %q: want it to say %q", e.Msg, want)
		}
	}
	if left := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(left) != 0 {
		t.Errorf("ports left after the failed ADD: %v", left)
	}
}

// conflistConf is plugin as the network config a runtime passes it.
func conflistConf(t *testing.T, plugin map[string]any) string {
	t.Helper()
	plugin["cniVersion"], plugin["name"] = "1.0.0", "otherns"
	b, err := json.Marshal(plugin)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Typos: an unknown key close to a known one gets a warning on stderr
// (and stays ignored, as CNI has unknown keys); a misspelled IPAM type is
// code 7 naming "ipam.type" and the value.
func TestOperatorTypos(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	c := framework.NewContainer(t)
	conf := framework.BridgeConf(br, ovsdbAddr, t.TempDir(), map[string]any{"bridge": nil, "brige": br, "portSecurty": false})
	stdout, stderr, err := runPlugin(t, "ovs-bridge", "ADD", c, conflistConf(t, conf))
	e := cniError(t, stdout, err)
	if e.Code != 7 || e.Msg != `"bridge" is required` {
		t.Errorf("ADD with \"brige\": code %d %q, want 7 %q", e.Code, e.Msg, `"bridge" is required`)
	}
	for _, want := range []string{
		`ovs-bridge: warning: unknown key "brige" ignored; did you mean "bridge"?`,
		`ovs-bridge: warning: unknown key "portSecurty" ignored; did you mean "portSecurity"?`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q: want %q", stderr, want)
		}
	}

	ipam := conf["ipam"].(map[string]any)
	ipam["type"] = "host-locl"
	conf = framework.BridgeConf(br, ovsdbAddr, t.TempDir(), map[string]any{"ipam": ipam})
	stdout, _, err = runPlugin(t, "ovs-bridge", "ADD", c, conflistConf(t, conf))
	e = cniError(t, stdout, err)
	want := `"ipam.type" "host-locl": no plugin of that name in CNI_PATH "` + binDir + `"`
	if e.Code != 7 || e.Msg != want {
		t.Errorf("ADD with IPAM type host-locl: code %d %q, want 7 %q", e.Code, e.Msg, want)
	}
	if left := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(left) != 0 {
		t.Errorf("ports left after the failed ADD: %v", left)
	}

	// "capabilites" on ovs-portmap: the warning says why no host port is
	// published, and DEL (which needs no mappings) succeeds.
	pmConf := map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilites": map[string]any{"portMappings": true}}
	_, stderr, err = runPlugin(t, "ovs-portmap", "DEL", c, conflistConf(t, pmConf))
	if err != nil {
		t.Errorf("ovs-portmap DEL: %v", err)
	}
	if want := `ovs-portmap: warning: unknown key "capabilites" ignored; did you mean "capabilities"?`; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q: want %q", stderr, want)
	}
}

// runPlugin runs plugin's command for container c, as a runtime does,
// with the network config conf on stdin.
func runPlugin(t *testing.T, plugin, command string, c *framework.Container, conf string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, plugin))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+c.ID, "CNI_NETNS="+c.NS.Path(),
		"CNI_IFNAME=eth0", "CNI_PATH="+binDir)
	cmd.Stdin = strings.NewReader(conf)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// cniError is the CNI error a plugin printed, failing the test when it
// did not fail.
func cniError(t *testing.T, stdout string, err error) (e struct {
	Code uint   `json:"code"`
	Msg  string `json:"msg"`
}) {
	t.Helper()
	if err == nil {
		t.Fatalf("the plugin succeeded, want a failure:\n%s", stdout)
	}
	if jerr := json.Unmarshal([]byte(stdout), &e); jerr != nil {
		t.Fatalf("the plugin's error: %v\n%s", jerr, stdout)
	}
	return e
}

// The node tools explain themselves: help lists the commands and their
// flags, and each problem is one clear error with the documented exit
// code (0 answered, 1 could not answer, 2 usage).
func TestOperatorNodeTools(t *testing.T) {
	requireSandbox(t)
	tool := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "ovs-portmap"), args...)
		cmd.Env = slicesWithout(os.Environ(), "CNI_COMMAND=")
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}
	for _, h := range []string{"help", "-h", "--help"} {
		out, _, code := tool(h)
		if code != 0 {
			t.Errorf("ovs-portmap %s: exit %d, want 0", h, code)
		}
		for _, want := range []string{"ovs-portmap reconcile [flags]", "ovs-portmap trace [flags]", "ovs-portmap flows [flags]",
			"Exit codes: 0 ", "\novs-portmap trace:\n", "  -in-port string", "\novs-portmap reconcile:\n", "  -watch"} {
			if !strings.Contains(out, want) {
				t.Errorf("ovs-portmap %s: no %q in\n%s", h, want, out)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		code int
		want string // the whole of stderr
	}{
		{[]string{"bogus"}, 2, "ovs-portmap: unknown command \"bogus\" (ovs-portmap help lists them)\n"},
		{[]string{"trace", "-ovsdb", ovsdbAddr, "-pod", "shop"}, 2, "trace: -pod \"shop\": want NAMESPACE/NAME\n"},
		{[]string{"flows", "-ovsdb", ovsdbAddr, "-pod", "shop/"}, 2, "flows: -pod \"shop/\": want NAMESPACE/NAME\n"},
	} {
		_, stderr, code := tool(tc.args...)
		if code != tc.code || stderr != tc.want {
			t.Errorf("ovs-portmap %s: exit %d, stderr %q; want %d, %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
	}
	// An unknown attachment, all questions: one error, not one per question.
	_, stderr, code := tool("trace", "-ovsdb", ovsdbAddr, "-container", "nosuch", "-q", "all")
	if code != 1 || strings.Count(stderr, "\n") != 1 {
		t.Errorf("trace -q all of an unknown attachment: exit %d, stderr %q; want 1, one line", code, stderr)
	}

	// A real attachment with one TCP host port.
	br := framework.NewBridge(t, "e2ebr")
	c := framework.NewContainer(t)
	n := framework.NewCNI(t, conflist("1.0.0", "tools", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil),
		map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]any{"portMappings": true}}), nil)

	maps := mappings(pm(18091, 80, "tcp", ""))
	n.MustAdd(t, c, "eth0", maps)
	t.Cleanup(func() { n.Del(c, "eth0", maps) })
	_, stderr, code = tool("trace", "-ovsdb", ovsdbAddr, "-container", c.ID, "-in-port", "999")
	if want := "-in-port \"999\": no such port on bridge \"" + br + "\""; code != 1 || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("trace -in-port 999: exit %d, stderr %q; want 1, one line with %q", code, stderr, want)
	}
	_, stderr, code = tool("trace", "-ovsdb", ovsdbAddr, "-container", c.ID, "-q", "udp")
	if want := "no host port of the attachment fits the question (protocol udp, host IP any, host port any; "; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("trace -q udp of a TCP host port: exit %d, stderr %q; want 1, %q", code, stderr, want)
	}
}

// slicesWithout is env without the variables that start with prefix.
func slicesWithout(env []string, prefix string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// reconcile's attachments= counts every attachment whose flows it rebuilt,
// not only those with host ports.
func TestOperatorReconcileCount(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", "count", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil),
		map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]any{"portMappings": true}}), nil)

	for i := range 3 {
		c := framework.NewContainer(t)
		var caps map[string]any
		if i == 0 {
			caps = mappings(pm(18092, 80, "tcp", ""))
		}
		n.MustAdd(t, c, "eth0", caps)
		t.Cleanup(func() { n.Del(c, "eth0", caps) })
	}
	ours := len(framework.PortsOf(t, ovsdb.KeyOwner, ovsdb.OwnerValue))
	out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr)
	if err != nil {
		t.Fatalf("reconcile: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("attachments=%d ", ours); ours < 3 || !strings.Contains(out, want) {
		t.Fatalf("reconcile with %d attachments (1 with a host port): %q, want %q", ours, out, want)
	}
}

// CHECK given other host ports than ADD (a caller that did not pass the
// portMappings capability args to CHECK) says so in its first line, before
// the flow diff.
func TestOperatorCheckCapArgs(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t) // node addresses on the bridge: host ports to publish
	c := framework.NewContainer(t)
	n := framework.NewCNI(t, conflist("1.0.0", "check", framework.BridgeConf(h.Bridge, ovsdbAddr, t.TempDir(), nil),
		map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]any{"portMappings": true}}), nil)
	maps := mappings(pm(18093, 80, "tcp", ""))
	r := n.MustAdd(t, c, "eth0", maps)
	t.Cleanup(func() { n.Del(c, "eth0", maps) })
	if err := n.Check(c, "eth0", maps); err != nil {
		t.Fatalf("CHECK with ADD's host ports: %v", err)
	}
	var v4 string
	for _, ip := range r.IPs {
		if ip.Address.IP.To4() != nil {
			v4 = ip.Address.IP.String()
		}
	}
	for _, tc := range []struct {
		name string
		caps map[string]any
		want []string // in the first line of the error, in this order
	}{
		{"none", nil, []string{"host ports differ from those ADD published (published by ADD, not asked by this CHECK: tcp ", ":18093->" + v4 + ":80",
			"): this CHECK was given no portMappings; a runtime passes CHECK the capability args (runtimeConfig.portMappings) it passed ADD"}},
		{"other", mappings(pm(18094, 80, "tcp", "")), []string{"host ports differ from those ADD published (published by ADD, not asked by this CHECK: tcp ",
			":18093->" + v4 + ":80", "; asked by this CHECK, not published by ADD: tcp ", ":18094->" + v4 + ":80)"}},
	} {
		err := n.Check(c, "eth0", tc.caps)
		if err == nil {
			t.Errorf("CHECK with %s host ports: no error", tc.name)
			continue
		}
		t.Logf("CHECK with %s host ports:\n%v", tc.name, err)
		first, rest, _ := strings.Cut(err.Error(), "\n")
		line := first
		for _, w := range tc.want {
			_, after, ok := strings.Cut(line, w)
			if !ok {
				t.Errorf("CHECK with %s host ports: no %q (in order) in its first line:\n%v", tc.name, w, err)
				break
			}
			line = after
		}
		if !strings.Contains(rest, "installed flows differ") {
			t.Errorf("CHECK with %s host ports: no flow diff after the first line:\n%v", tc.name, err)
		}
	}
}
