package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types020 "github.com/containernetworking/cni/pkg/types/020"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// Two containers ping each other and the gateway; TCP works.
func TestBridgeConnectivity(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", "conn", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), map[string]any{"isGateway": true})), nil)
	a, b := framework.NewContainer(t), framework.NewContainer(t)
	ra := n.MustAdd(t, a, "eth0", nil)
	rb := n.MustAdd(t, b, "eth0", nil)
	t.Cleanup(func() { n.Del(a, "eth0", nil); n.Del(b, "eth0", nil) })

	for _, v6 := range []bool{false, true} {
		bAddr := framework.AddrOf(t, rb, v6)
		gw := "192.0.2.1"
		if v6 {
			gw = "2001:db8:c::1"
		}
		if err := a.Ping(bAddr); err != nil {
			t.Errorf("ping A -> B %s: %v", bAddr, err)
		}
		if err := b.Ping(gw); err != nil {
			t.Errorf("ping B -> gateway %s: %v", gw, err)
		}
		b.ServeTCP(t, 8000+len(bAddr))
		got, err := framework.Dial(a.NS, "tcp", net.JoinHostPort(bAddr, fmt.Sprint(8000+len(bAddr))))
		if err != nil || !strings.HasPrefix(got, "hello from "+b.ID) {
			t.Errorf("TCP A -> B %s: got %q, %v", bAddr, got, err)
		}
		if aAddr := framework.AddrOf(t, ra, v6); !strings.Contains(got, aAddr) {
			t.Errorf("TCP A -> B: B saw %q, want source %s", got, aAddr)
		}
	}
}

// Rows carry our external_ids, ofport is set, MTU and MAC match.
func TestBridgePortRecord(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	bc := framework.BridgeConf(br, ovsdbAddr, t.TempDir(), map[string]any{"mtu": 1400, "capabilities": map[string]bool{"mac": true}})
	n := framework.NewCNI(t, conflist("1.0.0", "rec", bc), nil)
	c := framework.NewContainer(t)
	const mac = "02:00:00:00:aa:01"
	r := n.MustAdd(t, c, "eth0", map[string]any{"mac": mac})
	t.Cleanup(func() { n.Del(c, "eth0", nil) })

	host := c.HostVeth("eth0")
	for _, col := range []string{
		"external_ids:" + ovsdb.KeyOwner + "=" + ovsdb.OwnerValue,
		"external_ids:" + ovsdb.KeyContainerID + "=" + c.ID,
		"external_ids:" + ovsdb.KeyIfName + "=eth0",
		"external_ids:" + ovsdb.KeyNetNS + "=" + c.NS.Path(),
		"external_ids:" + ovsdb.KeyNetwork + "=rec",
		"external_ids:" + ovsdb.KeyBridge + "=" + br,
	} {
		for _, table := range []string{"Port", "Interface"} {
			got := framework.Vsctl(t, "--no-headings", "-f", "csv", "--columns=name", "find", table, col)
			if got != host {
				t.Errorf("%s with %s: got %q, want %q", table, col, got, host)
			}
		}
	}
	if of := framework.Vsctl(t, "get", "Interface", host, "ofport"); of == "[]" || strings.HasPrefix(of, "-") {
		t.Errorf("ofport of %s: got %s", host, of)
	}
	if ports := framework.Vsctl(t, "list-ports", br); ports != host {
		t.Errorf("ports of %s: got %q, want %q", br, ports, host)
	}
	var cont *netlink.LinkAttrs
	c.NS.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err == nil {
			cont = l.Attrs()
		}
		return err
	})
	if cont == nil || cont.HardwareAddr.String() != mac || cont.MTU != 1400 {
		t.Errorf("container eth0: got %+v, want MAC %s MTU 1400", cont, mac)
	}
	if r.Interfaces[1].Mac != mac || r.Interfaces[1].Sandbox != c.NS.Path() {
		t.Errorf("result container interface: got %+v", r.Interfaces[1])
	}
	hl, err := netlink.LinkByName(host)
	if err != nil || hl.Attrs().MTU != 1400 {
		t.Errorf("host veth %s: %v, MTU %v", host, err, hl)
	}
}

// VLAN 10 and 20 are isolated on one bridge.
func TestBridgeVLAN(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	dir := t.TempDir()
	l2 := func(name, ip string, vlan int) *framework.CNI {
		return framework.NewCNI(t, conflist("1.0.0", name, framework.BridgeConf(br, ovsdbAddr, dir, map[string]any{"vlan": vlan,
			"ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": ip}}}})), nil)

	}
	a, b, c := framework.NewContainer(t), framework.NewContainer(t), framework.NewContainer(t)
	na, nb, nc := l2("v10a", "192.0.2.21/24", 10), l2("v10b", "192.0.2.22/24", 10), l2("v20", "192.0.2.23/24", 20)
	na.MustAdd(t, a, "eth0", nil)
	nb.MustAdd(t, b, "eth0", nil)
	nc.MustAdd(t, c, "eth0", nil)
	t.Cleanup(func() { na.Del(a, "eth0", nil); nb.Del(b, "eth0", nil); nc.Del(c, "eth0", nil) })
	if tag := framework.Vsctl(t, "get", "Port", c.HostVeth("eth0"), "tag"); tag != "20" {
		t.Errorf("tag of C's port: got %s, want 20", tag)
	}
	if err := a.Ping("192.0.2.22"); err != nil {
		t.Errorf("VLAN 10 -> VLAN 10: %v", err)
	}
	if err := a.Ping("192.0.2.23"); err == nil {
		t.Errorf("VLAN 10 -> VLAN 20: ping succeeded, want isolation")
	}

	// Trunks.
	nt := framework.NewCNI(t, conflist("1.0.0", "trunk", framework.BridgeConf(br, ovsdbAddr, dir, map[string]any{"ipam": nil,
		"trunk": []any{map[string]any{"id": 10}, map[string]any{"minID": 20, "maxID": 22}}})), nil)

	d := framework.NewContainer(t)
	nt.MustAdd(t, d, "eth0", nil)
	t.Cleanup(func() { nt.Del(d, "eth0", nil) })
	if got := framework.Vsctl(t, "get", "Port", d.HostVeth("eth0"), "trunks"); got != "[10, 20, 21, 22]" {
		t.Errorf("trunks: got %s, want [10, 20, 21, 22]", got)
	}
	if err := nt.Check(d, "eth0", nil); err != nil {
		t.Errorf("CHECK of the trunk port: %v", err)
	}
}

// CHECK passes, then names what drifted.
func TestBridgeCheck(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", "chk", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	c := framework.NewContainer(t)
	r := n.MustAdd(t, c, "eth0", nil)
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	if err := n.Check(c, "eth0", nil); err != nil {
		t.Fatalf("CHECK after ADD: %v", err)
	}
	framework.Vsctl(t, "del-port", br, c.HostVeth("eth0"))
	if err := n.Check(c, "eth0", nil); err == nil || !strings.Contains(err.Error(), "port") {
		t.Errorf("CHECK after the port was removed: got %v, want an error about the port", err)
	}
	r = n.MustAdd(t, c, "eth0", nil) // repair
	if err := n.Check(c, "eth0", nil); err != nil {
		t.Fatalf("CHECK after repair: %v", err)
	}
	addr := framework.AddrOf(t, r, false)
	if _, err := c.Exec("ip", "addr", "del", addr+"/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := n.Check(c, "eth0", nil); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("CHECK after the address was removed: got %v, want an error naming %s", err, addr)
	}
}

// DEL removes everything, twice, and after the netns is
// gone; a retried ADD leaves one port.
func TestBridgeDel(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	dir := t.TempDir()
	n := framework.NewCNI(t, conflist("1.0.0", "del", framework.BridgeConf(br, ovsdbAddr, dir, nil)), nil)
	c := framework.NewContainer(t)
	n.MustAdd(t, c, "eth0", nil)
	n.MustAdd(t, c, "eth0", nil) // retried ADD
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 1 {
		t.Errorf("after a retried ADD: ports %v, want one", ports)
	}
	if got := allocations(t, dir, "del"); len(got) != 2 {
		t.Errorf("after a retried ADD: allocations %v, want one IPv4 and one IPv6", got)
	}
	for i := 0; i < 2; i++ {
		if err := n.Del(c, "eth0", nil); err != nil {
			t.Fatalf("DEL #%d: %v", i+1, err)
		}
		if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
			t.Errorf("DEL #%d: ports %v left", i+1, ports)
		}
		if veths := framework.OurVeths(t); len(veths) != 0 {
			t.Errorf("DEL #%d: veths %v left", i+1, veths)
		}
		if got := allocations(t, dir, "del"); len(got) != 0 {
			t.Errorf("DEL #%d: allocations %v left", i+1, got)
		}
	}

	// DEL after the runtime already deleted the netns.
	d := framework.NewContainer(t)
	n.MustAdd(t, d, "eth0", nil)
	d.NS.Close()
	if _, err := run("ip", "netns", "del", d.Name); err != nil {
		t.Fatal(err)
	}
	if err := n.Del(d, "eth0", nil); err != nil {
		t.Fatalf("DEL after the netns was deleted: %v", err)
	}
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, d.ID); len(ports) != 0 {
		t.Errorf("DEL after netns deletion: ports %v left", ports)
	}
	if got := allocations(t, dir, "del"); len(got) != 0 {
		t.Errorf("DEL after netns deletion: allocations %v left", got)
	}
	// The runtime's second DEL has no netns at all.
	rt := d.RT("eth0", nil)
	rt.NetNS = ""
	if err := n.Cfg.DelNetworkList(context.Background(), n.List, rt); err != nil {
		t.Errorf("DEL with an empty netns: %v", err)
	}
}

// With "leaveVethToNetns" DEL detaches everything but leaves the veth,
// down, to go with the netns: the container end has no carrier, the pair
// is gone once the netns is, and a netns that stays does not keep its
// ifname from the next ADD, of the same attachment or of another; GC
// deletes a pair left in a netns that stays.
func TestBridgeDelLeavesVethToNetns(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	dir := t.TempDir()
	n := framework.NewCNI(t, conflist("1.1.0", "leave", framework.BridgeConf(br, ovsdbAddr, dir, map[string]any{"leaveVethToNetns": true})), nil)
	leftDown := func(t *testing.T, c *framework.Container) {
		t.Helper()
		if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
			t.Errorf("after DEL: ports %v left", ports)
		}
		if got := allocations(t, dir, "leave"); len(got) != 0 {
			t.Errorf("after DEL: allocations %v left", got)
		}
		l, err := netlink.LinkByName(c.HostVeth("eth0"))
		if err != nil {
			t.Fatalf("after DEL: the host end: %v, want it left, down", err)
		}
		if l.Attrs().Flags&net.FlagUp != 0 {
			t.Errorf("after DEL: the host end %s is up, want it down", l.Attrs().Name)
		}
		out, err := c.Exec("ip", "-o", "link", "show", "eth0")
		if err != nil || !strings.Contains(out, "NO-CARRIER") {
			t.Errorf("after DEL: the container's eth0: %q, %v; want it without carrier", out, err)
		}
	}
	c := framework.NewContainer(t)
	n.MustAdd(t, c, "eth0", nil)
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	leftDown(t, c)
	// The same attachment again, then another in the same netns.
	n.MustAdd(t, c, "eth0", nil)
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	d := &framework.Container{ID: c.ID + "-next", NS: c.NS, Name: c.Name}
	n.MustAdd(t, d, "eth0", nil)
	if link.Exists(c.HostVeth("eth0")) {
		t.Errorf("ADD of another attachment on the ifname left in the netns: %s still there", c.HostVeth("eth0"))
	}
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, d.ID); len(ports) != 1 {
		t.Errorf("ADD of another attachment in the netns: ports %v, want one", ports)
	}
	if out, err := d.Exec("ip", "-o", "link", "show", "eth0"); err != nil || !strings.Contains(out, "LOWER_UP") {
		t.Errorf("ADD of another attachment in the netns: its eth0: %q, %v; want it with carrier", out, err)
	}
	if err := n.Del(d, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	leftDown(t, d)
	// GC: no attachment is valid; the pair left in the netns goes.
	if err := n.GC(context.Background(), t, nil); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if link.Exists(d.HostVeth("eth0")) {
		t.Errorf("GC left %s", d.HostVeth("eth0"))
	}
	// The netns deleted: the pair goes with it.
	e := framework.NewContainer(t)
	n.MustAdd(t, e, "eth0", nil)
	if err := n.Del(e, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	e.NS.Close()
	if _, err := run("ip", "netns", "del", e.Name); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 10*time.Second, "the pair gone with its netns", func() error {
		if link.Exists(e.HostVeth("eth0")) {
			return fmt.Errorf("%s still there", e.HostVeth("eth0"))
		}
		return nil
	})
}

// Bad input gets the right code and leaves nothing behind.
func TestBridgeBadConfig(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	dir := t.TempDir()
	cases := []struct {
		name     string
		extra    map[string]any
		wantCode uint
		wantMsg  string
	}{
		{"no bridge", map[string]any{"bridge": nil}, types.ErrInvalidNetworkConfig, `"bridge" is required`},
		{"vlan 5000", map[string]any{"vlan": 5000}, types.ErrInvalidNetworkConfig, `"vlan" 5000`},
		{"vlan and trunk", map[string]any{"vlan": 10, "trunk": []any{map[string]any{"id": 20}}}, types.ErrInvalidNetworkConfig, `"vlan" and "trunk"`},
		{"missing bridge", map[string]any{"bridge": "e2enosuch"}, types.ErrInvalidNetworkConfig, `"e2enosuch" does not exist`},
		{"ovsdb socket missing", map[string]any{"ovsdb": "unix:/run/ovsflow/no/such.sock"}, types.ErrTryAgainLater, "ovsdb unreachable"},
		{"bad datapathType", map[string]any{"datapathType": "dpdk"}, types.ErrInvalidNetworkConfig, `"datapathType" "dpdk"`},
		{"bad trunk range", map[string]any{"trunk": []any{map[string]any{"minID": 10, "maxID": 5000}}}, types.ErrInvalidNetworkConfig, `"trunk"[0]`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := framework.NewCNI(t, conflist("1.0.0", "bad", framework.BridgeConf(br, ovsdbAddr, dir, tc.extra)), nil)
			c := framework.NewContainer(t)
			_, err := n.Add(c, "eth0", nil)
			if cniCode(err) != tc.wantCode || err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("ADD: got %v (code %d), want code %d with %q", err, cniCode(err), tc.wantCode, tc.wantMsg)
			}
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
				t.Errorf("ports %v left", ports)
			}
			if veths := framework.OurVeths(t); len(veths) != 0 {
				t.Errorf("veths %v left", veths)
			}
			if got := allocations(t, dir, "bad"); len(got) != 0 {
				t.Errorf("allocations %v left", got)
			}
		})
	}
}

// GC removes exactly the ports not in valid-attachments.
func TestBridgeGC(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.1.0", "gc", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	cs := []*framework.Container{framework.NewContainer(t), framework.NewContainer(t), framework.NewContainer(t)}
	for _, c := range cs {
		n.MustAdd(t, c, "eth0", nil)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			n.Del(c, "eth0", nil)
		}
	})
	valid := []types.GCAttachment{{ContainerID: cs[0].ID, IfName: "eth0"}, {ContainerID: cs[2].ID, IfName: "eth0"}}
	if err := n.Cfg.GCNetworkList(context.Background(), n.List, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	for i, c := range cs {
		got := len(framework.PortsOf(t, ovsdb.KeyContainerID, c.ID))
		want := 1
		if i == 1 {
			want = 0
		}
		if got != want {
			t.Errorf("container %d after GC: %d ports, want %d", i, got, want)
		}
	}
	if _, err := netlink.LinkByName(cs[1].HostVeth("eth0")); err == nil {
		t.Errorf("GC left the veth of the stale attachment")
	}
}

// STATUS is fine with OVS up and code 50 with the bridge missing, with
// ovs-vswitchd stopped (OVSDB up) and with OVS stopped.
func TestBridgeStatus(t *testing.T) {
	requireSandbox(t)
	sb := uniq(fmt.Sprintf("ovsflow-st-%d-", os.Getpid())) // a netns name: unique across suites running at once
	script := repoRoot + "/hack/ovs-sandbox.sh"
	out, err := exec.Command(script, "start", sb).Output()
	if err != nil {
		t.Fatalf("second sandbox: %v", err)
	}
	t.Cleanup(func() { exec.Command(script, "stop", sb).Run() })
	endpoint := ""
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "OVSDB="); ok {
			endpoint = v
		}
	}
	if _, err := run("ovs-vsctl", "--db="+endpoint, "add-br", "stbr", "--", "set", "bridge", "stbr", "datapath_type="+datapath); err != nil {
		t.Fatal(err)
	}
	n := framework.NewCNI(t, conflist("1.1.0", "status", framework.BridgeConf("stbr", ovsdbAddr, t.TempDir(), map[string]any{"ovsdb": endpoint})), nil)
	if err := n.Cfg.GetStatusNetworkList(context.Background(), n.List); err != nil {
		t.Fatalf("STATUS with OVS up: %v", err)
	}
	missing := framework.NewCNI(t, conflist("1.1.0", "status", framework.BridgeConf("nosuchbr", ovsdbAddr, t.TempDir(), map[string]any{"ovsdb": endpoint})), nil)
	if err := missing.Cfg.GetStatusNetworkList(context.Background(), missing.List); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with the bridge missing: got %v, want code 50", err)
	}
	// OVSDB answers and has the bridge's row, but no ovs-vswitchd serves it.
	if out, err := exec.Command(script, "stop-vswitchd", sb).CombinedOutput(); err != nil {
		t.Fatalf("stopping ovs-vswitchd: %v: %s", err, out)
	}
	if err := n.Cfg.GetStatusNetworkList(context.Background(), n.List); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with ovs-vswitchd stopped: got %v, want code 50", err)
	}
	if out, err := exec.Command(script, "start-vswitchd", sb).CombinedOutput(); err != nil {
		t.Fatalf("starting ovs-vswitchd: %v: %s", err, out)
	}
	if err := n.Cfg.GetStatusNetworkList(context.Background(), n.List); err != nil {
		t.Errorf("STATUS with ovs-vswitchd started again: %v", err)
	}
	if err := exec.Command(script, "stop", sb).Run(); err != nil {
		t.Fatal(err)
	}
	err = n.Cfg.GetStatusNetworkList(context.Background(), n.List)
	if cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with OVS stopped: got %v (code %d), want code 50", err, cniCode(err))
	}
	pmOnly := framework.NewCNI(t, conflist("1.1.0", "status", map[string]any{"type": "ovs-portmap", "ovsdb": endpoint,
		"capabilities": map[string]bool{"portMappings": true}}), nil)

	if err := pmOnly.Cfg.GetStatusNetworkList(context.Background(), pmOnly.List); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("ovs-portmap STATUS with OVS stopped: got %v, want code 50", err)
	}
}

// 50 parallel ADDs, then 50 parallel DELs (fewer on a slow
// machine: framework.Load).
func TestBridgeParallel(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	N := framework.Load(50, 6)
	n := framework.NewCNI(t, conflist("1.0.0", "par", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), map[string]any{"createBridge": true})), nil)
	cs := make([]*framework.Container, N)
	for i := range cs {
		cs[i] = framework.NewContainer(t)
	}
	for i, err := range parallel(N, func(i int) error { _, err := n.Add(cs[i], "eth0", nil); return err }) {
		if err != nil {
			t.Errorf("ADD %d: %v", i, err)
		}
	}
	if got := len(framework.PortsOf(t, ovsdb.KeyBridge, br)); got != N {
		t.Errorf("after %d ADDs: %d ports", N, got)
	}
	for i, err := range parallel(N, func(i int) error { return n.Del(cs[i], "eth0", nil) }) {
		if err != nil {
			t.Errorf("DEL %d: %v", i, err)
		}
	}
	if got := framework.PortsOf(t, ovsdb.KeyBridge, br); len(got) != 0 {
		t.Errorf("after %d DELs: ports %v", N, got)
	}
	if veths := framework.OurVeths(t); len(veths) != 0 {
		t.Errorf("after %d DELs: veths %v", N, veths)
	}
}

// createBridge makes the bridge on first use, safely under concurrent ADDs.
func TestBridgeCreateBridge(t *testing.T) {
	requireSandbox(t)
	br := uniq("e2ecr")
	t.Cleanup(func() { framework.DelBridge(br) })
	n := framework.NewCNI(t, conflist("1.0.0", "create", framework.BridgeConf(br, ovsdbAddr, t.TempDir(),
		map[string]any{"createBridge": true, "datapathType": datapath, "isGateway": true})), nil)

	cs := []*framework.Container{framework.NewContainer(t), framework.NewContainer(t), framework.NewContainer(t), framework.NewContainer(t)}
	for i, err := range parallel(len(cs), func(i int) error { _, err := n.Add(cs[i], "eth0", nil); return err }) {
		if err != nil {
			t.Errorf("ADD %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range cs {
			n.Del(c, "eth0", nil)
		}
	})
	if got := framework.Vsctl(t, "--no-headings", "-f", "csv", "--columns=name", "find", "Bridge", "name="+br); got != br {
		t.Fatalf("bridges named %s: %q", br, got)
	}
	if got := framework.Vsctl(t, "get", "Bridge", br, "datapath_type"); got != datapath {
		t.Errorf("datapath_type: got %s, want %s", got, datapath)
	}
	if err := cs[0].Ping("192.0.2.1"); err != nil {
		t.Errorf("ping gateway on the created bridge: %v", err)
	}
}

// Every cniVersion from 0.3.1 to 1.1.0, and a single 0.2.0 config.
func TestBridgeVersions(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	for _, v := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			n := framework.NewCNI(t, conflist(v, "ver", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
			c := framework.NewContainer(t)
			r, err := n.Cfg.AddNetworkList(context.Background(), n.List, c.RT("eth0", nil))
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			if r.Version() != v {
				t.Errorf("result version %s, want %s", r.Version(), v)
			}
			if v != "0.3.1" {
				if err := n.Check(c, "eth0", nil); err != nil {
					t.Errorf("CHECK: %v", err)
				}
			}
			if err := n.Del(c, "eth0", nil); err != nil {
				t.Errorf("DEL: %v", err)
			}
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
				t.Errorf("ports %v left", ports)
			}
		})
	}
	t.Run("0.2.0 single config", func(t *testing.T) {
		conf := framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)
		conf["cniVersion"], conf["name"] = "0.2.0", "v020"
		conf["ipam"].(map[string]any)["ranges"] = []any{[]any{map[string]any{"subnet": "192.0.2.0/24"}}}
		b, _ := json.Marshal(conf)
		nc, err := libcni.ConfFromBytes(b)
		if err != nil {
			t.Fatal(err)
		}
		cfg := libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil)
		c := framework.NewContainer(t)
		r, err := cfg.AddNetwork(context.Background(), nc, c.RT("eth0", nil))
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		if r.Version() != "0.2.0" {
			t.Errorf("result version %s", r.Version())
		}
		r020, err := types020.GetResult(r)
		if err != nil || r020.IP4 == nil || !strings.HasPrefix(r020.IP4.IP.IP.String(), "192.0.2.") {
			t.Errorf("0.2.0 result has no IPv4: %v", r)
		}
		if err := cfg.DelNetwork(context.Background(), nc, c.RT("eth0", nil)); err != nil {
			t.Errorf("DEL: %v", err)
		}
		if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
			t.Errorf("ports %v left", ports)
		}
	})
}

// STATUS with an IPAM plugin whose STATUS does not end within ovs-bridge's
// (a saturated node): the network is not reported unavailable; an IPAM
// plugin that answers code 50 still is (the control).
func TestBridgeStatusSlowIPAM(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	dir := t.TempDir()
	// The plugins run with an empty PATH: absolute paths only.
	script := "#!/bin/sh\n[ \"$CNI_COMMAND\" = STATUS ] || exit 1\n" +
		"if [ -e " + dir + "/fail ]; then echo '{\"cniVersion\":\"1.1.0\",\"code\":50,\"msg\":\"slowipam: store unusable\"}'; exit 1; fi\n" +
		"exec /bin/sleep 60\n"
	if err := os.WriteFile(filepath.Join(dir, "slowipam"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	n := framework.NewCNI(t, conflist("1.1.0", "slowipam", framework.BridgeConf(br, ovsdbAddr, "", map[string]any{"ipam": map[string]any{"type": "slowipam"}})), nil, dir)
	if err := n.Status(context.Background()); err != nil {
		t.Errorf("STATUS with an IPAM plugin that does not answer in time: %v, want success", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.Status(context.Background()); cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "store unusable") {
		t.Errorf("STATUS with an IPAM plugin answering code 50: %v, want its code 50", err)
	}
}
