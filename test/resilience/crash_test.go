package resilience

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

var testSubnets = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8:c::/64")}

// envInt reads a tuning knob of the suite (hack/resilience.sh sets none).
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// newRand returns a seeded generator and logs the seed (OVSFLOW_RS_SEED
// replays a run).
func newRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("OVSFLOW_RS_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (OVSFLOW_RS_SEED=%d replays it)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// addrsOf lists the IPs host-local holds for container id.
func addrsOf(t testing.TB, dataDir, network, id string) []netip.Addr {
	var ips []netip.Addr
	for ip, holder := range allocations(t, dataDir, network) {
		if holder == id {
			ips = append(ips, netip.MustParseAddr(ip))
		}
	}
	return ips
}

// A plugin SIGKILLed at a random point of ADD (a delay drawn between 0 and
// the plugin's typical ADD duration), followed by the runtime's DEL of the
// whole chain as containerd does after a failed ADD, leaves nothing: no port,
// veth, flow, nft element or IP allocation.
func TestCrashDuringAdd(t *testing.T) {
	requireSandbox(t)
	becomeSubreaper(t)
	h := framework.NewOVSHost(t)
	dataDir := t.TempDir()
	x := &pluginExec{}
	const network = "crash"
	n := newCNI(t, conflist("1.0.0", network,
		framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true}), framework.PortmapConf(ovsdbAddr, nil)), x)
	caps := mappings(pm(8080, 80, "tcp", ""), pm(5353, 53, "udp", ""))
	au := audit{n: node{db: ovsdbAddr, bridge: h.Bridge}, dataDir: dataDir, netw: network, subnets: testSubnets,
		wantMappings: true, allVethsAreOurs: true}
	ctx := context.Background()
	used := map[string]attachment{}

	trial := func(fn func(c *framework.Container)) {
		nsh, err := testutils.NewNS()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { nsh.Close(); _ = testutils.UnmountNS(nsh) }()
		c := &framework.Container{ID: uniq("crash-"), NS: nsh}
		used[c.ID+"/eth0"] = attachment{id: c.ID, ifname: "eth0"}
		fn(c)
	}
	// Warm-up: the typical duration of each plugin's ADD, and a check that
	// an undisturbed ADD/DEL leaves nothing.
	for i := 0; i < 6; i++ {
		trial(func(c *framework.Container) {
			if _, err := n.AddContext(ctx, c, "eth0", caps); err != nil {
				t.Fatalf("warm-up ADD: %v", err)
			}
			if err := n.DelContext(ctx, c, "eth0", nil); err != nil {
				t.Fatalf("warm-up DEL: %v", err)
			}
		})
	}
	x.takeLog()
	if r := au.run(t, used, nil); len(r.leaked) > 0 {
		t.Fatalf("undisturbed ADD/DEL: %s", r)
	}
	typical := map[string]time.Duration{
		"ovs-bridge":  x.typical("ovs-bridge", "ADD", 100*time.Millisecond),
		"ovs-portmap": x.typical("ovs-portmap", "ADD", 50*time.Millisecond),
	}
	t.Logf("typical ADD: ovs-bridge %s, ovs-portmap %s", typical["ovs-bridge"], typical["ovs-portmap"])

	rnd := newRand(t)
	trials := envInt("OVSFLOW_RS_CRASH_TRIALS", 240)
	attempted, killed, leakedTrials, leakedObjects, delFailures, torn, survived := 0, map[string]int{}, 0, 0, 0, 0, 0
	start := time.Now()
	for i := 0; i < trials; i++ {
		target := []string{"ovs-bridge", "ovs-portmap"}[i%2]
		mode := killMode((i / 2) % 2)
		delay := time.Duration(rnd.Int64N(int64(typical[target]) + 1))
		trial(func(c *framework.Container) {
			attempted++
			x.kill = func(plugin, command string) (time.Duration, killMode, bool) {
				return delay, mode, plugin == target && command == "ADD"
			}
			_, addErr := n.AddContext(ctx, c, "eth0", caps)
			x.kill = nil
			wasKilled := false
			for _, inv := range x.takeLog() {
				if inv.Plugin == target && inv.Command == "ADD" && inv.Killed {
					wasKilled = true
					killed[target]++
				}
			}
			if addErr != nil && !wasKilled {
				t.Errorf("trial %d (%s killed after %s, %s): ADD failed without a kill: %v", i, target, delay, mode, addErr)
			}
			a := attachment{id: c.ID, ifname: "eth0", ips: addrsOf(t, dataDir, network, c.ID)}
			used[a.key()] = a
			// The runtime's DEL; containerd retries a failed DEL.
			var delErr error
			for try := 0; try < 3; try++ {
				if delErr = n.DelContext(ctx, c, "eth0", caps); delErr == nil {
					break
				}
			}
			if delErr != nil {
				delFailures++
				t.Errorf("trial %d (%s killed after %s, %s): DEL: %v", i, target, delay, mode, delErr)
			}
			r := au.run(t, map[string]attachment{a.key(): a}, nil)
			for _, f := range r.torn {
				torn++
				t.Logf("trial %d (%s killed=%v after %s, %s): host-local left an empty reservation %s (killed between creating and writing it); removed", i, target, wasKilled, delay, mode, f)
				os.Remove(f)
			}
			if wasKilled && len(r.leaked) == 0 && delErr == nil {
				survived++
			}
			if len(r.leaked) > 0 {
				leakedTrials++
				leakedObjects += len(r.leaked)
				t.Errorf("trial %d (%s killed=%v after %s, %s; ADD error %v): %s", i, target, wasKilled, delay, mode, addErr, r)
				// Clean up by hand so that the next trials start clean.
				cleanupAttachment(t, au.n, a)
			}
		})
	}
	if r := au.run(t, used, nil); len(r.leaked) > 0 {
		t.Errorf("after %d trials: %s", trials, r)
	}
	framework.Figure(t, "crash", "attempted", attempted, "killed", killed["ovs-bridge"]+killed["ovs-portmap"],
		"survived", survived, "killed_bridge", killed["ovs-bridge"], "killed_portmap", killed["ovs-portmap"],
		"leaked", leakedObjects, "leaked_trials", leakedTrials, "del_failures", delFailures, "hostlocal_torn", torn,
		"typical_add_bridge_ms", ms(typical["ovs-bridge"]), "typical_add_portmap_ms", ms(typical["ovs-portmap"]),
		"seconds", fmt.Sprintf("%.1f", time.Since(start).Seconds()))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

// cleanupAttachment removes by hand what a leaking trial left, so that one
// leak is reported once and does not spill into the next trials.
func cleanupAttachment(t testing.TB, n node, a attachment) {
	for _, row := range n.rows(t, "Port") {
		if row.ExternalIDs["ovsflow.io/container-id"] == a.id {
			run("ovs-vsctl", "--db="+n.db, "--if-exists", "del-port", row.Name)
		}
	}
	n.cmd("ip", "link", "del", a.veth())
	run("ovs-ofctl", "--timeout=10", "-O", "OpenFlow14", "del-flows", n.ofTarget(), flows.AttachmentCookie(a.id, a.ifname).AttachmentDelete().String())
	for _, e := range n.nftElements(t) {
		if a.hasIP(e.ContainerIP) {
			t.Logf("leftover nft element %s (not removed)", e.Text)
		}
	}
}
