// Command bench drives this suite's CNI chain and the reference chain through
// the same in-process libcni, interleaved, on one machine, and prints how
// long an ADD and a DEL take as the node fills up, how many ADDs per second 8
// concurrent callers get, each plugin's peak RSS, what a container costs in
// flows, OVSDB rows and netfilter rules, and where the time of our ADD and DEL
// goes. hack/bench.sh builds the plugins, starts the Open vSwitch sandbox and
// runs it inside the sandbox's network namespace; see docs/performance.md.
//
// Chains (each on a node network namespace of its own):
//
//	A  ovs-bridge + host-local + ovs-portmap   the sandbox netns: netdev bridge, node IP on its internal interface
//	B  bridge + host-local + portmap           iptables backend (ipMasq, hairpin, snat), a netns made here
//	C  same as B                               nftables backend, another netns made here
//	F  the Open vSwitch floor (floor.go)       a veth attached with a bare ovs-vsctl add-port to A's bridge, host-local
//
// The last line is
//
//	BENCH add_p50_ratio=R add_p50_ratio_110=R add_p50_ratio_500=R del_p50_ratio=R add_growth_500=G parallel8_ratio=P rss_mb=M
//	      del_p50_ratio_churn=R floor_gap_ms=D floor_gap_ms_200=D failed_ops=K
//
// (one line) with A/B ratios of medians from this run (B = iptables), A's
// ADD p50 minus F's, and the number of ADDs and DELs that failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

var (
	binDir   = flag.String("bin", "", "directory with the plugin binaries (ovs-bridge, ovs-portmap, bridge, portmap, host-local)")
	ovsdbEP  = flag.String("ovsdb", "", "OVSDB endpoint of the sandbox, unix:PATH")
	workDir  = flag.String("work", "", "scratch directory (netns mounts, IPAM data, libcni cache)")
	quick    = flag.Bool("quick", false, "N = 1 and 50 only, parallel phase to 50, fewer repetitions (CI)")
	levelsF  = flag.String("levels", "", "comma-separated N (default 1,10,50,110,200,500; -quick: 1,50)")
	repsF    = flag.Int("reps", 0, "repetitions per N (default: 15 up to N=50, 10 above; -quick: 6)")
	chainsF  = flag.String("chains", "A,B,C,F", "chains to run: A (ours), B (reference, iptables), C (reference, nftables), F (the Open vSwitch floor), P (ours, binaries from -proto)")
	protoDir = flag.String("proto", "", "chain P: ovs-bridge and ovs-portmap from this directory, on a second bridge (to measure a change against A in the same run)")
	callers  = flag.Int("callers", 8, "concurrent callers of the parallel phase and of the fills")
	parN     = flag.Int("parallel-to", -1, "containers added by the parallel phase (default 200; -quick: 50; 0: no parallel phase)")
	replayN  = flag.Int("replay", -1, "repetitions of the step-by-step replay of our ADD/DEL and of the pass with \"logFile\" set (default 10; -quick: 3; 0: neither)")
	floorRep = flag.Int("floor", 20, "repetitions of the start-up (VERSION) measurement per binary")
	shim     = flag.String("shim", "", "rssshim binary: measure peak RSS in a separate pass (hack/bench.sh sets it)")
	rssReps  = flag.Int("rss", 5, "ADD+DEL per chain in the peak-RSS pass")
	churners = flag.Int("churn-callers", 3, "DEL under churn: callers that keep ADDing while DELs are measured (0: no churn scenario)")
	churnRnd = flag.Int("churn-rounds", 0, "DEL under churn: rounds per chain (default 3; -quick: 2)")
	churnDel = flag.Int("churn-dels", 5, "DEL under churn: DELs measured per round")
	mappings = flag.Int("mappings", 2, "port mappings of every container: host ports hostPort, hostPort+1, ..., each TCP, then UDP (2: one host port, TCP and UDP); N containers publish N times this")
	traceF   = flag.Bool("trace", true, "at the first and last N, trace one ADD and DEL of A and F: ovs-vswitchd's reconfigurations, link and OVSDB events")
	coldDial = flag.String("cold-dial", "", "internal: time the first and a second ovsdb.Dial in this fresh process, print them, exit")
)

var started = time.Now()

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, a...))
}

var cleanups []func()

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(1)
}

type levelResult struct {
	n        int
	add, del map[string][]time.Duration
	counts   map[string]float64 // "A flows", "A rows", "B rules", "C lines": totals
	// CPU of ovsdb-server + ovs-vswitchd from the start of A's ADD to the
	// start of its DEL, and from there to the next ADD (their work goes on
	// after the plugin returns; chains B and C cause them none), and while
	// idle, per second.
	ovsAdd, ovsDel []time.Duration
	ovsIdle        time.Duration
	vsShare        float64 // ovs-vswitchd's share of the daemons' CPU over the repetitions
	// ovs-vswitchd's bridge reconfigurations from the start to the return of
	// each ADD and DEL of the chains that touch it (A, F, P).
	reconfAdd, reconfDel map[string][]int
}

type parResult struct {
	addTime, delTime map[string]time.Duration
	n                int
	ovsCPU           map[bool]time.Duration // ovsdb-server + ovs-vswitchd CPU during A's ADDs (true) and DELs
}

func main() {
	flag.Parse()
	if *coldDial != "" {
		coldDialMain(*coldDial)
		return
	}
	if *binDir == "" || *ovsdbEP == "" || *workDir == "" {
		fatalf("-bin, -ovsdb and -work are required (hack/bench.sh sets them)")
	}
	levels := []int{1, 10, 50, 110, 200, 500}
	reps := func(n int) int {
		if n <= 50 {
			return 15
		}
		return 10
	}
	par, replays, churnRounds, churnBase := 200, 10, 3, 20
	if *quick {
		levels, par, replays, churnRounds, churnBase = []int{1, 50}, 50, 3, 2, 10
		reps = func(int) int { return 6 }
	}
	if *churnRnd > 0 {
		churnRounds = *churnRnd
	}
	if *levelsF != "" {
		levels = nil
		for _, f := range strings.Split(*levelsF, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				fatalf("-levels: bad N %q", f)
			}
			levels = append(levels, n)
		}
		slices.Sort(levels)
	}
	if *repsF > 0 {
		r := *repsF
		reps = func(int) int { return r }
	}
	if *parN >= 0 {
		par = *parN
	}
	if *replayN >= 0 {
		replays = *replayN
	}
	want := map[string]bool{}
	for _, k := range strings.Split(*chainsF, ",") {
		want[strings.TrimSpace(k)] = true
	}
	if !want["A"] {
		fatalf("-chains must include A")
	}

	ctx := context.Background()
	work := *workDir
	// iptables-legacy serialises on a lock file; give the reference chain
	// its own so that nothing else on the machine can hold it up (iptables-nft,
	// the Debian default, takes no lock).
	os.Setenv("XTABLES_LOCKFILE", filepath.Join(work, "xtables.lock"))
	nd := &netnsDir{dir: mustMkdir(filepath.Join(work, "netns"))}
	cleanups = append(cleanups, nd.removeAll)
	ex := &timedExec{}

	// Chain A: the node is this process's netns, the sandbox's.
	nodeNS, err := ns.GetCurrentNS()
	if err != nil {
		fatalf("%v", err)
	}
	rundir := filepath.Dir(strings.TrimPrefix(*ovsdbEP, "unix:"))
	target := "unix:" + filepath.Join(rundir, ovsBridge+".mgmt")
	if err := setupOVSNode(*ovsdbEP, nodeA); err != nil {
		fatalf("chain A node: %v", err)
	}
	if *bandwidthF {
		if err := runBandwidth(ctx, os.Stdout, nodeNS, target, work, levels, reps, ex, nd); err != nil {
			fatalf("bandwidth: %v", err)
		}
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		return
	}
	baseFlows, _ := ovsFlowCount(target)
	baseRows, _ := ovsRowCount(*ovsdbEP)
	ovsConf := ovsConflist("bench-ovs", nodeA, *ovsdbEP, mustMkdir(filepath.Join(work, "ipam-A")))
	a, err := newChain("A", "ovs-bridge + host-local + ovs-portmap", nodeNS, ovsConf,
		[]string{*binDir}, mustMkdir(filepath.Join(work, "cache-A")), ex, nd)
	if err != nil {
		fatalf("%v", err)
	}
	chains := []*chain{a}
	if want["P"] {
		if *protoDir == "" {
			fatalf("chain P needs -proto DIR")
		}
		if err := setupOVSNode(*ovsdbEP, nodeP); err != nil {
			fatalf("chain P node: %v", err)
		}
		p, err := newChain("P", "prototype ovs-bridge + host-local + ovs-portmap from "+*protoDir, nodeNS,
			ovsConflist("bench-proto", nodeP, *ovsdbEP, mustMkdir(filepath.Join(work, "ipam-P"))),
			[]string{*protoDir, *binDir}, mustMkdir(filepath.Join(work, "cache-P")), ex, nd)
		if err != nil {
			fatalf("%v", err)
		}
		p.ovs = &nodeP
		p.portShift = 5000
		chains = append(chains, p)
	}
	for _, def := range []struct{ key, backend string }{{"B", "iptables"}, {"C", "nftables"}} {
		if !want[def.key] {
			continue
		}
		node, err := nd.create("node-" + def.key)
		if err != nil {
			fatalf("%v", err)
		}
		if err := setUpLo(node); err != nil {
			fatalf("%v", err)
		}
		ch, err := newChain(def.key, "bridge + host-local + portmap ("+def.backend+")", node,
			refConflist("bench-"+strings.ToLower(def.key), def.backend, mustMkdir(filepath.Join(work, "ipam-"+def.key))),
			[]string{*binDir}, mustMkdir(filepath.Join(work, "cache-"+def.key)), ex, nd)
		if err != nil {
			fatalf("%v", err)
		}
		chains = append(chains, ch)
	}
	if want["F"] {
		probe, err := nd.create("probe-F")
		if err != nil {
			fatalf("%v", err)
		}
		chains = append(chains, &chain{key: "F", name: "the Open vSwitch floor: veth, bare ovs-vsctl add-port to " + ovsBridge + ", host-local (exec)",
			node: nodeNS, netns: nd, probe: probe, mu: &sync.Mutex{},
			floor: newFloorChain(*ovsdbEP, ovsBridge, *binDir, mustMkdir(filepath.Join(work, "ipam-F")))})
	}
	// cni are the chains that run CNI plugins: F takes no part in the
	// parallel phase, the fills, the churn, the host port check or the RSS pass.
	var cni []*chain
	for _, ch := range chains {
		if ch.floor == nil {
			cni = append(cni, ch)
		}
	}
	reconf, err := newReconfCounter(rundir)
	if err != nil {
		logf("no reconfiguration counts: %v", err)
		reconf = nil
	}
	byKey := map[string]*chain{}
	for _, ch := range chains {
		byKey[ch.key] = ch
	}
	logf("chains %s; N = %v; parallel phase to %d with %d callers", *chainsF, levels, par, *callers)

	// 1. Start-up cost of each binary, interleaved.
	floors := map[string][]time.Duration{}
	bins := []string{"ovs-bridge", "ovs-portmap", "host-local", "bridge", "portmap"}
	paths := map[string]string{}
	for _, b := range bins {
		paths[b] = filepath.Join(*binDir, b)
	}
	if want["P"] {
		for _, b := range []string{"ovs-bridge", "ovs-portmap"} {
			bins = append(bins, "P "+b)
			paths["P "+b] = filepath.Join(*protoDir, b)
		}
	}
	for i := 0; i < *floorRep; i++ {
		for _, b := range bins {
			d, err := execFloor(paths[b])
			if err != nil {
				fatalf("%v", err)
			}
			floors[b] = append(floors[b], d)
		}
	}
	var rssP *rssPass
	floorRSS := map[string]int64{}
	rss := map[string]map[string][]int64{}
	if *shim != "" {
		var err error
		if rssP, err = newRSSPass(*shim, *binDir, work); err != nil {
			fatalf("rss pass: %v", err)
		}
		floorRSS = rssP.versionRSS(bins[:5])
	}
	logf("start-up measured")

	// One ADD and DEL per chain first, one at a time: the first ADD of a chain
	// creates what all its containers share (portmap's and ipMasq's top
	// chains, our shared flows), and the reference portmap fails when two
	// first ADDs race to create them ("File exists").
	for _, ch := range chains {
		ex.setTag("warm-up", 0)
		c, _, err := ch.measureAdd(ctx, -1)
		if err != nil {
			fatalf("warm-up: %v", err)
		}
		if _, err := ch.del(ctx, c, probePort); err != nil {
			fatalf("warm-up: %v", err)
		}
	}

	// 2. Parallel phase: `callers` concurrent ADDs from 0 to par containers,
	// then DELs back to 0, in chunks that alternate between the chains.
	pr := parResult{addTime: map[string]time.Duration{}, delTime: map[string]time.Duration{}, n: par, ovsCPU: map[bool]time.Duration{}}
	chunk := 50
	for _, grow := range []bool{true, false} {
		tag := "parallel-del"
		if grow {
			tag = "parallel-add"
		}
		for done := 0; done < par; done += chunk {
			for _, ch := range cni {
				target := min(done+chunk, par)
				if !grow {
					target = max(par-done-chunk, 0)
				}
				ex.setTag(tag, len(ch.attached))
				cpu0 := ovsDaemonsCPU(rundir)
				d, err := ch.parallel(ctx, target, *callers)
				if ch.key == "A" {
					pr.ovsCPU[grow] += ovsDaemonsCPU(rundir) - cpu0
				}
				if err != nil {
					fatalf("parallel phase: %v", err)
				}
				if grow {
					pr.addTime[ch.key] += d
				} else {
					pr.delTime[ch.key] += d
				}
			}
		}
		logf("parallel %s done", tag)
	}

	// 3. DEL under churn.
	var churn *churnResult
	if *churners > 0 {
		var err error
		if churn, err = runChurn(ctx, cni, churnBase, churnRounds, *churnDel, *churners, *callers, ex, target); err != nil {
			fatalf("churn: %v", err)
		}
		logf("DEL under churn measured")
	}

	// 4. Latency of one more ADD and DEL at each N.
	var results []*levelResult
	replayed := map[int]*replayResult{}
	splits := map[int]*logSplit{}
	var traces []*traceResult
	sanity := map[string]string{}
	rp := &replayer{ovsdbEP: *ovsdbEP, target: target, binDir: *binDir, ipamDir: mustMkdir(filepath.Join(work, "ipam-replay")), netns: nd}
	for li, n := range levels {
		for _, ch := range cni {
			ex.setTag("fill", len(ch.attached))
			if _, err := ch.parallel(ctx, n, *callers); err != nil {
				fatalf("filling to %d: %v", n, err)
			}
		}
		logf("N=%d: filled", n)
		if len(sanity) == 0 && n >= 2 {
			// A failed check fails the run (after the report): a chain that
			// does not work is not measured.
			sanity = sanityCheck(cni)
		}
		lr := &levelResult{n: n, add: map[string][]time.Duration{}, del: map[string][]time.Duration{}, counts: map[string]float64{},
			reconfAdd: map[string][]int{}, reconfDel: map[string][]int{}}
		idle0 := ovsDaemonsCPU(rundir)
		time.Sleep(time.Second)
		lr.ovsIdle = ovsDaemonsCPU(rundir) - idle0
		var cpuAdd, cpuDel time.Duration
		vs0, db0 := ovsCPU(rundir)
		for r := 0; r < reps(n); r++ {
			// Rotate the order so that no chain always runs first.
			order := append(append([]*chain(nil), chains[r%len(chains):]...), chains[:r%len(chains)]...)
			probes := make([]*container, len(order))
			addFailed := make([]bool, len(order))
			for i, ch := range order {
				ex.setTag("probe", n)
				if ch.key == "A" {
					now := ovsDaemonsCPU(rundir)
					if r > 0 {
						lr.ovsDel = append(lr.ovsDel, now-cpuDel)
					}
					cpuAdd = now
				}
				rc0 := ch.reconfCount(reconf)
				c, d, err := ch.measureAdd(ctx, r)
				rc1 := ch.reconfCount(reconf)
				probes[i] = c
				if err != nil {
					// Counted; the DEL below cleans up after it, untimed.
					failed.record(fmt.Errorf("N=%d: %w", n, err))
					addFailed[i] = true
					continue
				}
				lr.add[ch.key] = append(lr.add[ch.key], d)
				if rc0 >= 0 && rc1 >= 0 {
					lr.reconfAdd[ch.key] = append(lr.reconfAdd[ch.key], rc1-rc0)
				}
			}
			for i, ch := range order {
				if ch.key == "A" {
					cpuDel = ovsDaemonsCPU(rundir)
					lr.ovsAdd = append(lr.ovsAdd, cpuDel-cpuAdd)
				}
				rc0 := ch.reconfCount(reconf)
				d, err := ch.del(ctx, probes[i], probePort)
				rc1 := ch.reconfCount(reconf)
				if err != nil {
					failed.record(fmt.Errorf("N=%d: %w", n, err))
					continue
				}
				if addFailed[i] {
					continue
				}
				lr.del[ch.key] = append(lr.del[ch.key], d)
				if rc0 >= 0 && rc1 >= 0 {
					lr.reconfDel[ch.key] = append(lr.reconfDel[ch.key], rc1-rc0)
				}
			}
		}
		ex.setTag("", n)
		lr.ovsDel = append(lr.ovsDel, ovsDaemonsCPU(rundir)-cpuDel)
		if vs1, db1 := ovsCPU(rundir); vs1-vs0+db1-db0 > 0 {
			lr.vsShare = float64(vs1-vs0) / float64(vs1-vs0+db1-db0)
		}
		lr.counts = stateCounts(byKey, target, baseFlows, baseRows)
		results = append(results, lr)
		logf("N=%d: %d repetitions measured", n, reps(n))
		if li == len(levels)-1 && rssP != nil {
			for _, ch := range cni {
				m, err := rssP.chainRSS(ctx, ch, ex, *rssReps)
				if err != nil {
					fatalf("N=%d: %v", n, err)
				}
				rss[ch.key] = m
			}
			logf("N=%d: peak RSS measured", n)
		}
		if li == 0 || li == len(levels)-1 {
			if replays > 0 {
				ls, err := runLogPass(ctx, a, ovsConf, ex, replays, filepath.Join(work, "cni.log"))
				if err != nil {
					fatalf("N=%d: %v", n, err)
				}
				splits[n] = ls
				res, err := rp.run(ctx, n, replays, *ovsdbEP)
				if err != nil {
					fatalf("replay at N=%d: %v", n, err)
				}
				replayed[n] = res
				logf("N=%d: replay done", n)
			}
			if *traceF && reconf != nil {
				for _, ch := range chains {
					if ch.key != "A" && ch.key != "F" {
						continue
					}
					tr, err := traceOne(ctx, ch, reconf, *ovsdbEP, ex, n)
					if err != nil {
						fatalf("N=%d: %v", n, err)
					}
					traces = append(traces, tr...)
				}
				logf("N=%d: traces done", n)
			}
		}
	}

	report(os.Stdout, chains, levels, results, pr, ex.all(), bins, paths, floors, floorRSS, rss, replayed, splits, sanity, churn, traces, failed.all())
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(os.Stderr, "load average at the end: %s", la)
	}
	for _, ch := range cni {
		if len(sanity) > 0 && !strings.HasPrefix(sanity[ch.key], "ok") {
			nd.removeAll()
			fatalf("chain %s: host port check: %s", ch.key, sanity[ch.key])
		}
	}
	if errs := failed.all(); len(errs) > 0 {
		nd.removeAll()
		fatalf("%d ADDs or DELs failed (listed in the report)", len(errs))
	}
	nd.removeAll()
}

// reconfCount reads ovs-vswitchd's reconfiguration counter for the chains
// that touch it, -1 for the others.
func (ch *chain) reconfCount(r *reconfCounter) int {
	if ch.key == "A" || ch.key == "F" || ch.key == "P" {
		return r.count()
	}
	return -1
}

// setupOVSNode makes chain A's node: a netdev bridge with the node address
// on its internal interface (docs/design.md, "The node"), forwarding on.
func setupOVSNode(ep string, o ovsNode) error {
	for _, args := range [][]string{
		{"ovs-vsctl", "--db=" + ep, "--timeout=10", "--may-exist", "add-br", o.bridge, "--", "set", "bridge", o.bridge, "datapath_type=netdev"},
		{"ip", "addr", "replace", o.nodeCIDR, "dev", o.bridge},
		{"ip", "link", "set", o.bridge, "up"},
		{"ip", "link", "set", "lo", "up"},
		{"ethtool", "-K", o.bridge, "tx", "off"},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

var flowCountRE = regexp.MustCompile(`flow_count=(\d+)`)

func ovsFlowCount(target string) (float64, error) {
	out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow14", "dump-aggregate", target).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("dump-aggregate: %w: %s", err, out)
	}
	m := flowCountRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("dump-aggregate: no flow_count in %q", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return float64(n), nil
}

// ovsRowCount counts chain A's Port and Interface rows.
func ovsRowCount(ep string) (float64, error) {
	total := 0
	for _, table := range []string{"Port", "Interface"} {
		out, err := exec.Command("ovs-vsctl", "--db="+ep, "--no-headings", "--columns=_uuid", "find", table,
			"external_ids:ovsflow.io/network=bench-ovs").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("list %s: %w: %s", table, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.TrimSpace(l) != "" {
				total++
			}
		}
	}
	return float64(total), nil
}

// stateCounts measures what the attached containers cost in state: flows and
// OVSDB rows for A (above the empty bridge), netfilter rules for B and C.
func stateCounts(byKey map[string]*chain, target string, baseFlows, baseRows float64) map[string]float64 {
	c := map[string]float64{}
	if f, err := ovsFlowCount(target); err == nil {
		c["A flows"] = f - baseFlows
	}
	if r, err := ovsRowCount(*ovsdbEP); err == nil {
		c["A rows"] = r - baseRows
	}
	if b := byKey["B"]; b != nil {
		if out, err := b.inNode("iptables-save"); err == nil {
			n := 0
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "-A ") {
					n++
				}
			}
			c["B rules"] = float64(n)
		}
	}
	if cc := byKey["C"]; cc != nil {
		if out, err := cc.inNode("nft", "list", "ruleset"); err == nil {
			n := 0
			for _, l := range strings.Split(out, "\n") {
				if strings.TrimSpace(l) != "" {
					n++
				}
			}
			c["C lines"] = float64(n)
		}
	}
	return c
}

// sanityCheck makes sure every chain really publishes its host ports, so that
// no chain is fast because it does nothing: a TCP connection to node
// address:hostPort of the first container must reach that container. For A
// it comes from the second container (through the bridge's flows; a
// connection from the node itself never enters Open vSwitch); for B and C
// from the node (through portmap's OUTPUT rules).
func sanityCheck(chains []*chain) map[string]string {
	out := map[string]string{}
	for _, ch := range chains {
		c0, c1 := ch.attached[0], ch.attached[1]
		l, err := serve(c0.ns, ctrPort, c0.id)
		if err != nil {
			out[ch.key] = "could not listen: " + err.Error()
			continue
		}
		from, addr := c1.ns, fmt.Sprintf("%s:%d", nodeA.nodeIP(), c0.hostPort)
		if ch.ovs != nil {
			addr = fmt.Sprintf("%s:%d", ch.ovs.nodeIP(), c0.hostPort+ch.portShift)
		} else if ch.key != "A" {
			from, addr = ch.node, fmt.Sprintf("%s:%d", refGateway, c0.hostPort)
		}
		got, err := dialFrom(from, addr)
		switch {
		case err != nil:
			out[ch.key] = fmt.Sprintf("FAILED: %s: %v", addr, err)
		case got != c0.id:
			out[ch.key] = fmt.Sprintf("FAILED: %s answered %q, want %q", addr, got, c0.id)
		default:
			out[ch.key] = "ok (" + addr + ")"
		}
		l.Close()
	}
	return out
}

// ovsDaemonsCPU is the CPU time ovsdb-server and ovs-vswitchd have used so far.
func ovsDaemonsCPU(rundir string) time.Duration {
	v, d := ovsCPU(rundir)
	return v + d
}

// ovsCPU is the CPU time ovs-vswitchd and ovsdb-server have used so far.
func ovsCPU(rundir string) (vswitchd, ovsdbServer time.Duration) {
	return daemonCPU(rundir, "ovs-vswitchd"), daemonCPU(rundir, "ovsdb-server")
}

func daemonCPU(rundir string, daemon string) time.Duration {
	var total time.Duration
	for _, d := range []string{daemon} {
		pid, err := os.ReadFile(filepath.Join(rundir, d+".pid"))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat")
		if err != nil {
			continue
		}
		// Fields after the ")" that closes the command name: utime and stime
		// are the 12th and 13th, in clock ticks (USER_HZ = 100 on Linux).
		s := string(stat)
		fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fs) > 13 {
			u, _ := strconv.Atoi(fs[11])
			k, _ := strconv.Atoi(fs[12])
			total += time.Duration(u+k) * 10 * time.Millisecond
		}
	}
	return total
}

// coldDialMain is run in a fresh process by the replay: the first Dial of a
// process pays for whatever it sets up with cold caches (reflection, JSON
// codecs, heap growth), as every plugin process does.
func coldDialMain(ep string) {
	ctx := context.Background()
	e, err := endpoint.Parse(ep)
	if err != nil {
		fatalf("%v", err)
	}
	var ds [2]time.Duration
	for i := range ds {
		start := time.Now()
		cli, err := ovsdb.Dial(ctx, e)
		if err != nil {
			fatalf("%v", err)
		}
		cli.Close()
		ds[i] = time.Since(start)
	}
	fmt.Println(ds[0].Microseconds(), ds[1].Microseconds())
}
