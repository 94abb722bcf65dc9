package e2e

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// TestAgentUninstall: `ovsflow-agent uninstall` on a node as
// deploy/node-prep.sh made it, with a pod holding a host port, removes the
// suite's flows but the base flow, its OVSDB records, nft tables, gateway
// address, routes, conflist and plugins, and nothing else: the node's own
// host-local, a route of another protocol, the bridge with its owner tag
// and uplink stay, and the uplink still reaches the node (the base flow).
// Each thing is first shown to be there, so that the test can fail.
// Uninstall acts on the whole sandbox (every port and root key of the
// suite): the suite's tests run one at a time.
func TestAgentUninstall(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	framework.PrepareBridge(t, h.Bridge) // as node-prep.sh leaves a bridge
	n := h.PortmapList(t, "1.1.0", "uninst", nil)
	c := framework.NewContainer(t)
	n.MustAdd(t, c, "eth0", mappings(pm(31081, 80, "tcp", "")))
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	c.ServeTCP(t, 80)
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 31081), c, outsideV4)

	// The node's CNI dirs as the agent left them, and a node's own plugin.
	src, bin, conf := t.TempDir(), t.TempDir(), t.TempDir()
	for _, p := range []string{"ovs-bridge", "ovs-portmap", "host-local", "loopback"} {
		os.WriteFile(filepath.Join(src, p), []byte("image's "+p), 0o755)
		os.WriteFile(filepath.Join(bin, p), []byte("image's "+p), 0o755)
	}
	os.WriteFile(filepath.Join(bin, "host-local"), []byte("node's own"), 0o755)
	os.WriteFile(filepath.Join(conf, "10-ovsflow.conflist"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(conf, "20-other.conflist"), []byte("{}"), 0o644)
	// A route of the agent's and one of another protocol.
	br, err := netlink.LinkByName(h.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	_, ours, _ := net.ParseCIDR("198.51.100.128/26")
	_, theirs, _ := net.ParseCIDR("198.51.100.192/26")
	for _, r := range []*netlink.Route{
		{LinkIndex: br.Attrs().Index, Dst: ours, Gw: net.ParseIP(outsideV4), Flags: int(netlink.FLAG_ONLINK), Protocol: podroutes.DefaultProtocol},
		{LinkIndex: br.Attrs().Index, Dst: theirs, Gw: net.ParseIP(outsideV4), Flags: int(netlink.FLAG_ONLINK), Protocol: 4},
	} {
		if err := netlink.RouteReplace(r); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { netlink.RouteDel(&netlink.Route{LinkIndex: br.Attrs().Index, Dst: theirs}) })

	suite := flows.SuiteDelete().String()
	suiteFlows := func() []string { return framework.FlowsMatching(t, h.OFTarget(), suite) }
	var base []string
	for _, f := range flows.BaseFlows() {
		base = append(base, f.Line())
	}
	nft := func(fam string) error { _, err := run("nft", "list", "table", fam, "ovsflow_hostport"); return err }
	gateway := func() bool { return slices.Contains(bridgeAddrs(t, h.Bridge), "192.0.2.1") }
	rootKeys := func() string {
		return framework.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids")
	}
	before := suiteFlows()
	if len(before) <= len(base) || len(framework.PortsOf(t, ovsdb.KeyOwner, ovsdb.OwnerValue)) != 1 || nft("ip") != nil || !gateway() {
		t.Fatalf("before: %d flows of the suite, ports %v, nft ip table %v, gateway %v: the test proves nothing",
			len(before), framework.PortsOf(t, ovsdb.KeyOwner, ovsdb.OwnerValue), nft("ip"), gateway())
	}
	// The mapping has no hostIP: it is on 127.0.0.1 too, with
	// route_localnet on for the bridge interface.
	expect(t, nil, "tcp", hp("127.0.0.1", 31081), c, "")
	if got := routeLocalnetOf(t, h.Bridge); got != "1" {
		t.Fatalf("before: route_localnet of %s is %s: the test proves nothing", h.Bridge, got)
	}

	out, err := run(filepath.Join(binDir, "ovsflow-agent"), "uninstall", "-ovsdb", ovsdbAddr, "-plugin-src", src,
		"-cni-bin-dir", bin, "-cni-conf-dir", conf, "-conf-template", "/etc/ovsflow/10-ovsflow.conflist")
	t.Logf("uninstall said:\n%s", out)
	if err != nil {
		t.Fatalf("uninstall: %v", err)
	}

	if got := suiteFlows(); len(got) != len(base) || !strings.Contains(strings.Join(got, "\n"), "actions=NORMAL") {
		t.Errorf("flows of the suite after uninstall:\n%s\nwant the base flow only: %q", strings.Join(got, "\n"), base)
	}
	if left := framework.PortsOf(t, ovsdb.KeyOwner, ovsdb.OwnerValue); len(left) > 0 {
		t.Errorf("ports of the suite left: %v", left)
	}
	if k := rootKeys(); strings.Contains(k, ovsdb.KeyPrefix) {
		t.Errorf("root external_ids of the suite left: %s", k)
	}
	if k := framework.Vsctl(t, "get", "Bridge", h.Bridge, "external_ids"); k != `{"`+ovsdb.KeyOwner+`"=`+ovsdb.OwnerValue+`}` {
		t.Errorf("bridge external_ids %s, want the owner tag only (as node-prep.sh set it)", k)
	}
	if framework.Vsctl(t, "get", "Bridge", h.Bridge, "fail_mode") != "secure" {
		t.Error("the bridge's fail_mode changed")
	}
	for _, fam := range []string{"ip", "ip6"} {
		if nft(fam) == nil {
			t.Errorf("nft table %s ovsflow_hostport left", fam)
		}
	}
	if gateway() {
		t.Error("the gateway address 192.0.2.1 is still on the bridge")
	}
	if got := routeLocalnetOf(t, h.Bridge); got != "0" {
		t.Errorf("route_localnet of %s after uninstall: got %s, want 0 again", h.Bridge, got)
	}
	if !slices.Contains(bridgeAddrs(t, h.Bridge), nodeV4) {
		t.Errorf("the node's own address %s went", nodeV4)
	}
	for _, dst := range []*net.IPNet{ours, theirs} {
		rs, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
		if want := dst == theirs; (len(rs) == 1) != want {
			t.Errorf("route %s: %d left, want kept %v (only protocol %d is the agent's)", dst, len(rs), want, podroutes.DefaultProtocol)
		}
	}
	for name, want := range map[string]bool{"ovs-bridge": false, "ovs-portmap": false, "loopback": false, "host-local": true} {
		if _, err := os.Stat(filepath.Join(bin, name)); (err == nil) != want {
			t.Errorf("plugin %s: present %v, want %v", name, err == nil, want)
		}
	}
	for name, want := range map[string]bool{"10-ovsflow.conflist": false, "20-other.conflist": true} {
		if _, err := os.Stat(filepath.Join(conf, name)); (err == nil) != want {
			t.Errorf("conflist %s: present %v, want %v", name, err == nil, want)
		}
	}
	// The uplink still reaches the node through the base flow; the pod's
	// host port is gone.
	if _, err := run("ip", "netns", "exec", h.Outside.Name, "ping", "-c1", "-W2", nodeV4); err != nil {
		t.Errorf("the outside no longer reaches the node through the bridge: %v", err)
	}
	if got, err := framework.Dial(h.Outside.NS, "tcp", hp(nodeV4, 31081)); err == nil {
		t.Errorf("the host port still answers after uninstall: %q", got)
	}
	// DEL of the pod afterwards (its runtime tearing down) succeeds.
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Errorf("DEL after uninstall: %v", err)
	}
}
