package e2e

import (
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// sandboxOVSDB stops (up false) or starts the sandbox's ovsdb-server; its
// database stays in the run directory, and ovs-vswitchd reconnects.
func sandboxOVSDB(t *testing.T, up bool) {
	t.Helper()
	verb := "stop-ovsdb"
	if up {
		verb = "start-ovsdb"
	}
	if out, err := exec.Command(filepath.Join(repoRoot, "hack", "ovs-sandbox.sh"), verb, sandboxNS).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", verb, err, out)
	}
}

// A DEL that meets ovsdb-server stopped after the sandbox's netns went (a
// reboot, a netns lost behind the runtime's back) cannot know what is left
// of the attachment: each plugin fails with code 11 and releases nothing,
// the address included. Once ovsdb-server is back, the runtime's retry
// succeeds and leaves nothing of the attachment: port, flows, QoS rows,
// nft elements, address; and a new sandbox takes the same host port.
func TestDelOVSDBUnreachable(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	dataDir := t.TempDir()
	const network = "delna"
	bridge := framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true})
	portmap := map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"portMappings": true}}
	bandwidth := map[string]any{"type": "ovs-bandwidth", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"bandwidth": true}}
	n := framework.NewCNI(t, conflist("1.1.0", network, bridge, portmap, bandwidth), nil)

	c := framework.NewContainer(t)
	caps := mappings(pm(8195, 80, "tcp", ""))
	maps.Copy(caps, framework.Limits(bwRate, bwBurst, bwRate, bwBurst))
	r := n.MustAdd(t, c, "eth0", caps)
	v4 := framework.AddrOf(t, r, false)
	cookie := flows.AttachmentCookie(c.ID, "eth0")
	// This attachment's element: host port 8195 to v4 port 80 (other
	// tests' attachments may hold the same address on their own bridges).
	hostports := func() string {
		out, _ := run("nft", "list", "map", "ip", "ovsflow_hostport", "hostports")
		return out
	}
	nftHolds := func() bool {
		return strings.Contains(hostports(), ". 8195 : "+v4+" . 80")
	}
	if len(framework.PortsOf(t, ovsdb.KeyContainerID, c.ID)) != 1 || len(h.FlowsOf(t, cookie)) == 0 || !nftHolds() ||
		!slices.Contains(allocations(t, dataDir, network), v4) {
		t.Fatalf("after ADD: ports %v, flows %v, nft element %v, allocations %v: the test proves nothing",
			framework.PortsOf(t, ovsdb.KeyContainerID, c.ID), h.FlowsOf(t, cookie), nftHolds(), allocations(t, dataDir, network))
	}
	wantLimits(h, t, c, "eth0")

	sandboxOVSDB(t, false)
	down := true
	t.Cleanup(func() {
		if down {
			sandboxOVSDB(t, true)
		}
	})
	// The sandbox's netns goes, and with it the veth pair.
	c.NS.Close()
	if err := testutils.UnmountNS(c.NS); err != nil {
		t.Fatal(err)
	}
	veth := c.HostVeth("eth0")
	if !framework.Until(30*time.Second, func() bool { return !link.Exists(veth) }) {
		t.Fatalf("host veth %s still there after its netns was deleted", veth)
	}

	for _, p := range []map[string]any{bandwidth, portmap, bridge} {
		one := framework.NewCNI(t, conflist("1.1.0", network, p), nil)
		err := one.Del(c, "eth0", caps)
		if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "ovsdb unreachable") || !strings.Contains(err.Error(), c.ID) {
			t.Errorf("%s DEL with ovsdb-server stopped: got %v (code %d), want code 11 naming ovsdb and %s", p["type"], err, cniCode(err), c.ID)
		}
	}
	if err := n.Del(c, "eth0", caps); cniCode(err) != types.ErrTryAgainLater {
		t.Errorf("DEL of the chain with ovsdb-server stopped: got %v (code %d), want code 11", err, cniCode(err))
	}
	if !slices.Contains(allocations(t, dataDir, network), v4) {
		t.Errorf("address %s released by a DEL that failed: %v", v4, allocations(t, dataDir, network))
	}
	if !nftHolds() {
		t.Errorf("nft element of %s removed by a DEL that failed", v4)
	}

	sandboxOVSDB(t, true)
	down = false
	if err := n.Del(c, "eth0", caps); err != nil {
		t.Fatalf("DEL retried with ovsdb-server back: %v", err)
	}
	if ps := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ps) != 0 {
		t.Errorf("ports left: %v", ps)
	}
	if fl := h.FlowsOf(t, cookie); len(fl) != 0 {
		t.Errorf("flows left: %v", fl)
	}
	wantNoLimits(h, t, c, "eth0", "")
	if nftHolds() {
		t.Errorf("nft element of %s left:\n%s", v4, hostports())
	}
	if got := allocations(t, dataDir, network); slices.Contains(got, v4) {
		t.Errorf("address %s still allocated: %v", v4, got)
	}
	// A DEL once everything is gone still succeeds.
	if err := n.Del(c, "eth0", caps); err != nil {
		t.Errorf("DEL again: %v", err)
	}

	// The host port is free: a new sandbox takes it and answers.
	next := framework.NewContainer(t)
	nextCaps := mappings(pm(8195, 80, "tcp", ""))
	n.MustAdd(t, next, "eth0", nextCaps)
	t.Cleanup(func() { n.Del(next, "eth0", nextCaps) })
	next.ServeTCP(t, 80)
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8195), next, outsideV4)
}
