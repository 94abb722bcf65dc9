package resilience

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// GC cleans up after a DEL that was killed and never retried (the runtime
// lost the container) once the port is already gone: ovs-bridge's DEL
// detaches the port first and deletes the host veth after, so a kill in
// between leaves a veth (and its container end, and the IP allocation) that
// no Port row points to. The same state follows an ADD killed after the veth
// was created and before the port was attached. The port's removal is done
// here with ovs-vsctl, which is exactly what DEL's transaction does.
func TestGCAfterInterruptedDel(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	dataDir := t.TempDir()
	const network = "gcdel"
	n := newCNI(t, conflist("1.1.0", network,
		framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true}), framework.PortmapConf(ovsdbAddr, nil)), nil)
	ctx := context.Background()
	c := framework.NewContainer(t)
	caps := mappings(pm(8680, 80, "tcp", ""))
	if _, err := n.AddContext(ctx, c, "eth0", caps); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	a := attachment{id: c.ID, ifname: "eth0"}
	t.Cleanup(func() { n.DelContext(ctx, c, "eth0", caps) })
	// ovs-portmap's DEL ran; ovs-bridge's DEL was killed right after its
	// port transaction.
	pmConf := must(json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": network, "type": "ovs-portmap", "ovsdb": ovsdbAddr}))
	if _, err := invokePlugin(&pluginExec{}, "ovs-portmap", "DEL", pmConf,
		map[string]string{"CNI_CONTAINERID": c.ID, "CNI_IFNAME": "eth0", "CNI_NETNS": c.NS.Path()}); err != nil {
		t.Fatalf("ovs-portmap DEL: %v", err)
	}
	// ovs-bridge's DEL withdraws the attachment's flows, then detaches the
	// port, then deletes the veth: it was killed after the second step.
	if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "del-flows", h.OFTarget(), flows.AttachmentCookie(c.ID, "eth0").AttachmentDelete().String()); err != nil {
		t.Fatal(err)
	}
	framework.Vsctl(t, "del-port", h.Bridge, a.veth())

	if err := n.GC(ctx, t, nil); err != nil {
		t.Fatalf("GC: %v", err)
	}
	au := audit{n: node{db: ovsdbAddr, bridge: h.Bridge}, dataDir: dataDir, netw: network, subnets: testSubnets, allVethsAreOurs: true}
	r := au.run(t, map[string]attachment{a.key(): a}, nil)
	if len(r.leaked) > 0 {
		t.Errorf("GC with no valid attachment, after a DEL interrupted between the port and the veth: %s", r)
	}
	framework.Figure(t, "gc_interrupted_del", "leaked", len(r.leaked))
}
