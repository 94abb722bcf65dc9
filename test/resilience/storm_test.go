package resilience

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// stormStats counts the runtime operations of the storm.
type stormStats struct {
	attempted, succeeded, failedKilled atomic.Int64
	byOp                               sync.Map // "ADD" → *atomic.Int64
}

func (s *stormStats) count(op string) {
	v, _ := s.byOp.LoadOrStore(op, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// A storm: 300 ADD/CHECK/DEL cycles over 60 containers by 8 concurrent
// callers, with a fraction of all plugin invocations SIGKILLed at a random
// point; a killed ADD is followed by the runtime's DEL, a failed DEL is
// retried. Then GC with the live set, minus some live attachments the
// runtime "forgot": the live set must be intact (a TCP connection through
// each live host port from the outside netns works, CHECK passes) and
// everything else gone.
func TestStorm(t *testing.T) {
	requireSandbox(t)
	becomeSubreaper(t)
	h := framework.NewOVSHost(t)
	dataDir := t.TempDir()
	const network = "storm"
	x := &pluginExec{}
	n := newCNI(t, conflist("1.1.0", network,
		framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true}), framework.PortmapConf(ovsdbAddr, nil)), x)
	au := audit{n: node{db: ovsdbAddr, bridge: h.Bridge}, dataDir: dataDir, netw: network, subnets: testSubnets,
		wantMappings: true, allVethsAreOurs: true}
	slots := envInt("OVSFLOW_RS_STORM_CONTAINERS", 60)
	callers := envInt("OVSFLOW_RS_STORM_CALLERS", 8)
	cycles := envInt("OVSFLOW_RS_STORM_CYCLES", 300)
	const killFraction = 0.15

	type slot struct {
		mu   sync.Mutex
		c    *framework.Container
		caps map[string]any
		live bool
		port int
	}
	ss := make([]*slot, slots)
	for i := range ss {
		c := framework.NewContainerID(t, fmt.Sprintf("storm-%02d", i))
		c.ServeTCP(t, 80)
		ss[i] = &slot{c: c, port: 31000 + i, caps: mappings(pm(31000+i, 80, "tcp", ""))}
	}
	t.Cleanup(func() {
		for _, s := range ss {
			n.DelContext(noKill(context.Background()), s.c, "eth0", s.caps)
		}
	})

	seedRnd := newRand(t)
	var rmu sync.Mutex
	rnd := rand.New(rand.NewPCG(seedRnd.Uint64(), seedRnd.Uint64()))
	x.kill = func(plugin, command string) (time.Duration, killMode, bool) {
		rmu.Lock()
		defer rmu.Unlock()
		if rnd.Float64() >= killFraction {
			return 0, 0, false
		}
		typ := x.typical(plugin, command, 100*time.Millisecond)
		return time.Duration(rnd.Int64N(int64(typ) + 1)), killMode(rnd.IntN(2)), true
	}

	var st stormStats
	var hungMu sync.Mutex
	var hung []string
	// op runs one runtime operation; ok reports success.
	op := func(name string, s *slot, ctx context.Context, f func(ctx context.Context) error) bool {
		ctx, rec := recording(ctx)
		st.attempted.Add(1)
		st.count(name)
		err := f(ctx)
		for _, inv := range rec.hung() {
			hungMu.Lock()
			hung = append(hung, fmt.Sprintf("%s %s of %s:\n%s", inv.Plugin, inv.Command, s.c.ID, inv.Stderr))
			hungMu.Unlock()
		}
		switch {
		case err == nil:
			st.succeeded.Add(1)
			return true
		case rec.killed():
			st.failedKilled.Add(1)
		default:
			t.Errorf("%s of %s failed without a kill: %v", name, s.c.ID, err)
		}
		return false
	}
	ctx := context.Background()
	del := func(s *slot) {
		// As a runtime does: retry a failed DEL; the last retries are not killed.
		for try := 0; try < 6; try++ {
			c := ctx
			if try >= 3 {
				c = noKill(ctx)
			}
			if op("DEL", s, c, func(ctx context.Context) error { return n.DelContext(ctx, s.c, "eth0", s.caps) }) {
				s.live = false
				return
			}
		}
		t.Errorf("DEL of %s: still failing after 6 tries", s.c.ID)
	}
	cycle := func(s *slot, r *rand.Rand) {
		if s.live {
			del(s) // the container restarts: its old attachment goes first
		}
		if !op("ADD", s, ctx, func(ctx context.Context) error { _, err := n.AddContext(ctx, s.c, "eth0", s.caps); return err }) {
			del(s) // containerd's teardown after a failed ADD
			return
		}
		s.live = true
		op("CHECK", s, ctx, func(ctx context.Context) error { return n.CheckContext(ctx, s.c, "eth0", s.caps) })
		if r.Float64() < 0.6 {
			del(s)
		}
	}

	var issued atomic.Int64
	start := time.Now()
	parallel(callers, func(w int) error {
		r := rand.New(rand.NewPCG(uint64(w), seedRnd.Uint64()))
		for issued.Add(1) <= int64(cycles) {
			var s *slot
			for {
				s = ss[r.IntN(len(ss))]
				if s.mu.TryLock() {
					break
				}
			}
			cycle(s, r)
			s.mu.Unlock()
		}
		return nil
	})
	stormTime := time.Since(start)
	x.kill = nil
	invs := x.takeLog()
	killed := 0
	for _, inv := range invs {
		if inv.Killed {
			killed++
		}
	}
	for _, hgs := range hung {
		t.Errorf("a plugin hung: %s", hgs)
	}

	// GC with the live set, minus every third live attachment (forgotten by
	// the runtime: the plugins' GC must remove it).
	var valid []types.GCAttachment
	live := map[string]attachment{}
	used := map[string]attachment{}
	forgotten := 0
	for _, s := range ss {
		a := attachment{id: s.c.ID, ifname: "eth0"}
		used[a.key()] = a
		if !s.live {
			continue
		}
		if forgotten*3 < len(live) {
			forgotten++
			s.live = false
			continue
		}
		a.ips = addrsOf(t, dataDir, network, s.c.ID)
		live[a.key()] = a
		valid = append(valid, types.GCAttachment{ContainerID: s.c.ID, IfName: "eth0"})
	}
	if err := n.GC(ctx, t, valid); err != nil {
		t.Errorf("GC: %v", err)
	}
	r := au.run(t, used, live)
	for _, f := range r.torn {
		t.Logf("host-local left an empty reservation %s (killed between creating and writing it)", f)
	}
	if len(r.leaked) > 0 || len(r.missing) > 0 {
		t.Errorf("after GC with %d live attachments: %s", len(live), r)
	}
	// The live set works: TCP through each host port from outside, CHECK.
	traffic := 0
	for _, s := range ss {
		if !s.live {
			continue
		}
		for _, node := range []string{nodeV4, nodeV6} {
			got, err := framework.Dial(h.Outside.NS, "tcp", hp(node, s.port))
			if err != nil || !strings.HasPrefix(got, "hello from "+s.c.ID+" ") {
				t.Errorf("live %s: TCP %s from outside: got %q, %v", s.c.ID, hp(node, s.port), got, err)
				continue
			}
			traffic++
		}
		if err := n.CheckContext(noKill(ctx), s.c, "eth0", s.caps); err != nil {
			t.Errorf("live %s: CHECK after GC: %v", s.c.ID, err)
		}
	}
	survived := 0
	if !t.Failed() {
		survived = killed // the storm as a whole: every kill survived, or none is claimed
	}
	count := func(op string) int64 {
		if v, ok := st.byOp.Load(op); ok {
			return v.(*atomic.Int64).Load()
		}
		return 0
	}
	framework.Figure(t, "storm", "callers", callers, "containers", slots, "cycles", cycles,
		"attempted", st.attempted.Load(), "succeeded", st.succeeded.Load(), "killed", killed, "survived", survived,
		"failed_killed", st.failedKilled.Load(), "invocations", len(invs),
		"add", count("ADD"), "check", count("CHECK"), "del", count("DEL"),
		"live", len(live), "gc_removed", forgotten, "traffic_ok", traffic,
		"leaked", len(r.leaked), "missing", len(r.missing), "hung", len(hung), "hostlocal_torn", len(r.torn),
		"seconds", fmt.Sprintf("%.1f", stormTime.Seconds()))
}
