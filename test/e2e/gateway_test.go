package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/record"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// A node's pod range changes (its Node re-registered with another): the
// last container of the old range goes (DEL), the next one comes in the new
// range. The old gateway must go with its last container, from the bridge
// interface and from the bridge's record, and no ovs-vswitchd restart and
// reconcile may bring it back: else two gateways with one address sit on
// the shared segment once the old range is another node's. The new one
// stays while a container uses it. A record no port needs (one an earlier
// version left) goes with the next reconcile.
func TestGatewayWithdrawnWithItsRange(t *testing.T) {
	l := newLab(t)
	ipamOf := func(subnet, gw string) map[string]any {
		return map[string]any{"type": "host-local", "dataDir": l.dir,
			"ranges": []any{[]any{map[string]any{"subnet": subnet, "gateway": gw}}}}
	}
	const gwA, gwB, gwOld = "10.10.0.1", "10.20.0.1", "10.30.0.1"
	nA := l.network("range-a", map[string]any{"ipam": ipamOf("10.10.0.0/24", gwA)}, nil)
	nB := l.network("range-b", map[string]any{"ipam": ipamOf("10.20.0.0/24", gwB)}, nil)
	onBridge := func(gw string) bool { return slices.Contains(bridgeAddrs(t, l.Bridge), gw) }
	recorded := func(gw string) bool {
		return strings.Contains(framework.Vsctl(t, "get", "Bridge", l.Bridge, "external_ids"), record.KeyGatewayPrefix+gw+"/24")
	}
	state := func(gw string) string {
		return "on the bridge " + boolStr(onBridge(gw)) + ", recorded " + boolStr(recorded(gw))
	}

	a := framework.NewContainer(t)
	nA.MustAdd(t, a, "eth0", nil)
	if !onBridge(gwA) || !recorded(gwA) {
		t.Fatalf("gateway %s after ADD: %s: the test proves nothing", gwA, state(gwA))
	}
	if err := nA.Del(a, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	b := l.join(nB, "b", nil)
	if onBridge(gwA) || recorded(gwA) {
		t.Errorf("gateway %s after the DEL of its last container: %s; want neither", gwA, state(gwA))
	}
	if !onBridge(gwB) || !recorded(gwB) {
		t.Errorf("gateway %s with a container in its range: %s; want both", gwB, state(gwB))
	}

	// A record left by a version that did not withdraw them.
	framework.Vsctl(t, "set", "Bridge", l.Bridge, `external_ids:"`+record.KeyGatewayPrefix+gwOld+`/24"=1`)
	if _, err := run("ip", "addr", "add", gwOld+"/24", "dev", l.Bridge); err != nil {
		t.Fatal(err)
	}

	restartVswitchd(t, nil)
	l.restoreNode(t)
	reconcileOnce(t)
	for _, gw := range []string{gwA, gwOld} {
		if onBridge(gw) || recorded(gw) {
			t.Errorf("gateway %s after an ovs-vswitchd restart and reconcile: %s; want neither", gw, state(gw))
		}
	}
	if !onBridge(gwB) || !recorded(gwB) {
		t.Errorf("gateway %s after an ovs-vswitchd restart and reconcile: %s; want both", gwB, state(gwB))
	}
	pollUntil(t, "container b pings its gateway "+gwB, func() bool { return b.Ping(gwB) == nil })
}

// reconcileOnce runs `ovs-portmap reconcile` until a pass succeeds (it
// fails until ovs-vswitchd has re-created the bridges), as
// deploy/node-prep.sh does.
func reconcileOnce(t *testing.T) {
	t.Helper()
	var out string
	if err := framework.Wait(20*time.Second, func() (err error) {
		out, err = run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr)
		return err
	}); err != nil {
		t.Fatalf("reconcile: %v: %s", err, out)
	}
	t.Logf("reconcile said: %s", out)
}

func boolStr(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// The withdrawal never takes a gateway from an ADD in flight: each round,
// the DEL of the only container of a range, an ADD of the next one in the
// same range and a reconcile run at once; after the round the new
// container's gateway is on the bridge, recorded, and answers it.
func TestGatewayKeptForConcurrentAdd(t *testing.T) {
	l := newLab(t)
	const gw = "10.40.0.1"
	n := l.network("range-c", map[string]any{"ipam": map[string]any{"type": "host-local", "dataDir": l.dir,
		"ranges": []any{[]any{map[string]any{"subnet": "10.40.0.0/24", "gateway": gw}}}}}, nil)
	prev := framework.NewContainer(t)
	n.MustAdd(t, prev, "eth0", nil)
	for round := 0; round < 8; round++ {
		next := framework.NewContainer(t)
		var wg sync.WaitGroup
		var delErr, addErr, recErr error
		var recOut string
		wg.Add(3)
		go func() { defer wg.Done(); delErr = n.Del(prev, "eth0", nil) }()
		go func() { defer wg.Done(); _, addErr = n.Add(next, "eth0", nil) }()
		go func() {
			defer wg.Done()
			recOut, recErr = run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr)
		}()
		wg.Wait()
		t.Cleanup(func() { n.Del(next, "eth0", nil) })
		if delErr != nil || addErr != nil || recErr != nil {
			t.Fatalf("round %d: DEL %v, ADD %v, reconcile %v: %s", round, delErr, addErr, recErr, recOut)
		}
		ids := framework.Vsctl(t, "get", "Bridge", l.Bridge, "external_ids")
		if !slices.Contains(bridgeAddrs(t, l.Bridge), gw) || !strings.Contains(ids, record.KeyGatewayPrefix+gw+"/24") {
			t.Fatalf("round %d: gateway %s of the container just added: addresses %v, bridge external_ids %s",
				round, gw, bridgeAddrs(t, l.Bridge), ids)
		}
		if err := next.Ping(gw); err != nil {
			t.Fatalf("round %d: the container just added does not reach its gateway: %v", round, err)
		}
		prev = next
	}
}
