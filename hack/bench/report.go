package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// pct is the nearest-rank percentile (the method of ../shared/perf-baseline.md).
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	if k < 0 {
		k = 0
	}
	return s[k]
}

func pctI(vs []int64, p float64) int64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]int64(nil), vs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	if k < 0 {
		k = 0
	}
	return s[k]
}

func maxI(vs []int64) int64 {
	var m int64
	for _, v := range vs {
		m = max(m, v)
	}
	return m
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d.Microseconds())/1000) }

func ms2(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }

func mib(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }

func ratio(a, b time.Duration) string {
	if a == 0 || b == 0 {
		return "na"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

// table prints a Markdown table.
type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) print(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.head, " | "))
	seps := make([]string, len(t.head))
	for i := range seps {
		seps[i] = "---"
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
}

func report(w io.Writer, chains []*chain, levels []int, results []*levelResult, pr parResult, calls []call, bins []string, paths map[string]string,
	floors map[string][]time.Duration, floorRSS map[string]int64, rss map[string]map[string][]int64, replays map[int]*replayResult, splits map[int]*logSplit, sanity map[string]string,
	churn *churnResult, traces []*traceResult, errs []error) {
	first, last := results[0], results[len(results)-1]
	keys := make([]string, len(chains))
	for i, ch := range chains {
		keys[i] = ch.key
	}
	fmt.Fprintf(w, "\n## Chains\n\n")
	if *mappings != 2 {
		fmt.Fprintf(w, "Every container publishes %d port mappings (%d host ports, TCP and UDP): N containers attached hold N × %d.\n\n", *mappings, portsPer(), *mappings)
	}
	for _, ch := range chains {
		check := sanity[ch.key]
		switch {
		case ch.floor != nil:
			check = "none (no host ports)"
		case check == "":
			check = "not run (it needs N ≥ 2)"
		}
		fmt.Fprintf(w, "- %s: %s; host port check: %s\n", ch.key, ch.name, check)
	}
	fmt.Fprintln(w)

	for _, op := range []string{"ADD", "DEL"} {
		fmt.Fprintf(w, "## %s latency of one more container with N attached (ms, libcni in-process, p50 / p90)\n\n", op)
		t := &table{head: []string{"N", "reps"}}
		for _, k := range keys {
			t.head = append(t.head, k+" p50", k+" p90")
		}
		for _, k := range keys[1:] {
			t.head = append(t.head, "A/"+k+" p50")
		}
		for _, lr := range results {
			m := lr.add
			if op == "DEL" {
				m = lr.del
			}
			row := []string{strconv.Itoa(lr.n), strconv.Itoa(len(m["A"]))}
			for _, k := range keys {
				row = append(row, ms(pct(m[k], 50)), ms(pct(m[k], 90)))
			}
			for _, k := range keys[1:] {
				row = append(row, ratio(pct(m["A"], 50), pct(m[k], 50)))
			}
			t.add(row...)
		}
		t.print(w)
	}

	goalsTable(w, results, pr, floors, rss)
	floorTable(w, results)
	churnTable(w, churn, results, calls)

	if pr.n > 0 {
		parallelTable(w, keys, pr)
	}

	fmt.Fprintf(w, "## Plugin processes: wall time of the measured container (p50 ms) and peak RSS (MiB, separate pass at N=%d)\n\n", last.n)
	fmt.Fprintf(w, "A main plugin's peak RSS is the larger of its own and its IPAM delegate's (wait4 reports both); host-local's own row is its call from the main plugin.\n\n")
	fmt.Fprintf(w, "CPU is user+system of the process and the programs it ran (IPAM, nft): on 2 cores it bounds the parallel rate.\n\n")
	t := &table{head: []string{"chain", "plugin", "command", fmt.Sprintf("wall N=%d", first.n), fmt.Sprintf("wall N=%d", last.n), fmt.Sprintf("CPU N=%d", last.n), "RSS p50", "RSS max"}}
	type pk struct{ chain, plugin, command string }
	var order []pk
	wall := map[pk]map[int][]time.Duration{}
	cpu := map[pk][]time.Duration{}
	for _, c := range calls {
		k := pk{c.chain, c.plugin, c.command}
		if _, ok := wall[k]; !ok {
			order = append(order, k)
			wall[k] = map[int][]time.Duration{}
		}
		if c.tag == "probe" {
			wall[k][c.level] = append(wall[k][c.level], c.wall)
			if c.level == last.n {
				cpu[k] = append(cpu[k], c.cpu)
			}
		}
	}
	for _, ch := range chains {
		if ch.floor == nil {
			order = append(order, pk{ch.key, "host-local", "ADD"}, pk{ch.key, "host-local", "DEL"})
		}
	}
	slices.SortStableFunc(order, func(a, b pk) int { return strings.Compare(a.chain, b.chain) })
	var rssA int64
	for _, k := range order {
		r := rss[k.chain][k.plugin+" "+k.command]
		if k.chain == "A" {
			rssA = max(rssA, maxI(r))
		}
		wa, wb, cp := "–", "–", "–"
		if v := wall[k][first.n]; len(v) > 0 {
			wa, wb, cp = ms(pct(v, 50)), ms(pct(wall[k][last.n], 50)), ms(pct(cpu[k], 50))
		}
		t.add(k.chain, k.plugin, k.command, wa, wb, cp, mib(pctI(r, 50)), mib(maxI(r)))
	}
	t.print(w)

	fmt.Fprintf(w, "## State per container (totals above the empty node / per container)\n\n")
	t = &table{head: []string{"N", "A flows", "A OVSDB rows (Port+Interface)", "B iptables rules (-A)", "C nft ruleset lines",
		"A: OVS daemons CPU per ADD / DEL ms", "of which ovs-vswitchd", "OVS daemons idle CPU ms/s"}}
	for _, lr := range results {
		n := float64(lr.n)
		cell := func(k string) string {
			v, ok := lr.counts[k]
			if !ok {
				return "–"
			}
			return fmt.Sprintf("%.0f / %.1f", v, v/n)
		}
		t.add(strconv.Itoa(lr.n), cell("A flows"), cell("A rows"), cell("B rules"), cell("C lines"),
			fmt.Sprintf("%s / %s", ms(mean(lr.ovsAdd)), ms(mean(lr.ovsDel))), fmt.Sprintf("%.0f %%", 100*lr.vsShare), ms(lr.ovsIdle))
	}
	t.print(w)

	fmt.Fprintf(w, "## Process start-up alone (CNI_COMMAND=VERSION, p50 of %d)\n\n", len(floors["ovs-bridge"]))
	t = &table{head: []string{"binary", "size MB", "start-up ms", "peak RSS MiB"}}
	for _, b := range bins {
		size := "?"
		if fi, err := os.Stat(paths[b]); err == nil {
			size = fmt.Sprintf("%.1f", float64(fi.Size())/1e6)
		}
		rss := "–"
		if v, ok := floorRSS[b]; ok {
			rss = mib(v)
		}
		t.add(b, size, ms2(pct(floors[b], 50)), rss)
	}
	t.print(w)

	var levelsS []int
	for n := range splits {
		levelsS = append(levelsS, n)
	}
	slices.Sort(levelsS)
	if len(levelsS) > 0 {
		fmt.Fprintf(w, "## Inside and outside our plugin processes (chain A, a pass with \"logFile\" set; p50 ms)\n\n")
		fmt.Fprintf(w, "\"inside\" is the command function's own time as pkg/cnilog logs it; \"outside\" = wall − inside: exec, Go runtime start, package init, skel, exit.\n")
		fmt.Fprintf(w, "\"revalidation\" is the part of inside that ovs-portmap's ADD waits for ovs-vswitchd's revalidation round (its log line notes it): ovs-vswitchd starts a round at most every 5 ms, and ovs-bridge's changes just before started one.\n\n")
		t = &table{head: []string{"plugin", "command", "N", "wall", "inside", "of which revalidation", "outside", "CPU"}}
		for _, n := range levelsS {
			ls := splits[n]
			for _, k := range []string{"ovs-bridge ADD", "ovs-portmap ADD", "ovs-portmap DEL", "ovs-bridge DEL"} {
				f := strings.Fields(k)
				in, reval, out := "–", "–", "–"
				if len(ls.inside[k]) > 0 {
					in = ms(pct(ls.inside[k], 50))
					out = ms(pct(ls.wall[k], 50) - pct(ls.inside[k], 50))
				}
				if len(ls.reval[k]) > 0 {
					reval = ms(pct(ls.reval[k], 50))
				}
				t.add(f[0], f[1], strconv.Itoa(n), ms(pct(ls.wall[k], 50)), in, reval, out, ms(pct(ls.cpu[k], 50)))
			}
		}
		t.print(w)
	}

	var levelsR []int
	for n := range replays {
		levelsR = append(levelsR, n)
	}
	slices.Sort(levelsR)
	if len(levelsR) > 0 {
		fmt.Fprintf(w, "## Where our time goes: the plugins' own ADD and DEL in-process, ovs-bridge's named steps (p50 ms)\n\n")
		fmt.Fprintf(w, "\"ours\" is this suite's own code, protocol round trips and helper programs; \"ovs-vswitchd\" is waiting for it; \"other\" is host-local or the kernel.\n")
		fmt.Fprintf(w, "An OpenFlow call counts as ours up to what the same call costs right after, ovs-vswitchd idle again (\"more measurements\"), the rest as waiting for ovs-vswitchd.\n\n")
		head := []string{"step", "whose"}
		for _, n := range levelsR {
			head = append(head, fmt.Sprintf("N=%d", n))
		}
		for _, op := range []string{"ADD", "DEL"} {
			t = &table{head: append([]string{op}, head[1:]...)}
			phases, pick := addPhases, func(r *replayResult) map[phase][]time.Duration { return r.add }
			if op == "DEL" {
				phases, pick = delPhases, func(r *replayResult) map[phase][]time.Duration { return r.del }
			}
			start := pct(floors["ovs-bridge"], 50) + pct(floors["ovs-portmap"], 50)
			t.add(append([]string{"process start-up, ovs-bridge + ovs-portmap (VERSION)", "ours"}, repeat(ms(start), len(levelsR))...)...)
			// Split: our own work; ovs-vswitchd (the ofport wait, the next_cfg
			// wait, and the part of each ovs-ofctl call above what the same
			// call costs once ovs-vswitchd is idle again); the rest (IPAM,
			// kernel).
			sums := make([]time.Duration, len(levelsR))
			oursSums := make([]time.Duration, len(levelsR))
			vsSums := make([]time.Duration, len(levelsR))
			for _, p := range phases {
				whose := "other"
				if p.ours {
					whose = "ours"
				}
				if p == phOFPort || p == phSync {
					whose = "ovs-vswitchd"
				}
				if ofCall[p] {
					whose = "ours + ovs-vswitchd"
				}
				row := []string{p.name, whose}
				for i, n := range levelsR {
					v := pct(pick(replays[n])[p], 50)
					sums[i] += v
					switch {
					case ofCall[p]:
						idle := min(v, pct(replays[n].extra[bundleAgain], 50))
						oursSums[i] += idle
						vsSums[i] += v - idle
					case whose == "ovs-vswitchd":
						vsSums[i] += v
					case p.ours:
						oursSums[i] += v
					}
					row = append(row, ms(v))
				}
				t.add(row...)
			}
			sumRow := []string{"**sum of steps + start-ups**", ""}
			oursRow := []string{"of which ours (OpenFlow calls at their cost with ovs-vswitchd idle)", "ours"}
			vsRow := []string{"of which waiting for ovs-vswitchd", "ovs-vswitchd"}
			otherRow := []string{"of which IPAM and kernel", "other"}
			measRow := []string{"measured chain " + op + " p50 (libcni, same N)", ""}
			for i, n := range levelsR {
				sumRow = append(sumRow, ms(sums[i]+start))
				oursRow = append(oursRow, ms(oursSums[i]+start))
				vsRow = append(vsRow, ms(vsSums[i]))
				otherRow = append(otherRow, ms(sums[i]-oursSums[i]-vsSums[i]))
				for _, lr := range results {
					if lr.n == n {
						m := lr.add
						if op == "DEL" {
							m = lr.del
						}
						measRow = append(measRow, ms(pct(m["A"], 50)))
					}
				}
			}
			t.add(sumRow...)
			t.add(oursRow...)
			t.add(vsRow...)
			t.add(otherRow...)
			t.add(measRow...)
			if op == "DEL" {
				row := []string{phVswitchdDel.name, "other"}
				for _, n := range levelsR {
					row = append(row, ms(pct(replays[n].del[phVswitchdDel], 50)))
				}
				t.add(row...)
			}
			t.print(w)
		}
		t = &table{head: append([]string{"more measurements", ""}, head[2:]...)}
		for _, k := range []string{coldConnect, dialConnect, rawConnect, rawSchema, rawBridgeAll, rawBridgeFew, bundleAgain, rawOpenFlow, ofBlocked} {
			row := []string{k, ""}
			for _, n := range levelsR {
				row = append(row, ms2(pct(replays[n].extra[k], 50)))
			}
			t.add(row...)
		}
		t.print(w)
	}

	// The BENCH line.
	p50 := func(lr *levelResult, m func(*levelResult) map[string][]time.Duration, k string) time.Duration {
		return pct(m(lr)[k], 50)
	}
	adds := func(lr *levelResult) map[string][]time.Duration { return lr.add }
	dels := func(lr *levelResult) map[string][]time.Duration { return lr.del }
	var at1, at500 *levelResult
	for _, lr := range results {
		if lr.n == 1 {
			at1 = lr
		}
		if lr.n == 500 {
			at500 = lr
		}
	}
	get := func(lr *levelResult, m func(*levelResult) map[string][]time.Duration, a, b string) string {
		if lr == nil {
			return "na"
		}
		return ratio(p50(lr, m, a), p50(lr, m, b))
	}
	growth := "na"
	if at1 != nil && at500 != nil {
		growth = ratio(p50(at500, adds, "A"), p50(at1, adds, "A"))
	}
	parRatio := "na"
	if pr.addTime["A"] > 0 && pr.addTime["B"] > 0 {
		parRatio = fmt.Sprintf("%.2f", pr.addTime["B"].Seconds()/pr.addTime["A"].Seconds())
	}
	var at110, at200 *levelResult
	for _, lr := range results {
		switch lr.n {
		case 110:
			at110 = lr
		case 200:
			at200 = lr
		}
	}
	gap := func(lr *levelResult) string {
		if lr == nil || len(lr.add["A"]) == 0 || len(lr.add["F"]) == 0 {
			return "na"
		}
		return ms(p50(lr, adds, "A") - p50(lr, adds, "F"))
	}
	rssMB := "na" // no peak-RSS pass (-rss 0)
	if rssA > 0 {
		rssMB = mib(rssA)
	}
	churnRatio := "na"
	if churn != nil {
		churnRatio = ratio(pct(churn.del["A"], 50), pct(churn.del["B"], 50))
	}
	traceTables(w, traces)
	fmt.Fprintf(w, "## Failed operations: %d\n\n", len(errs))
	for i, e := range errs {
		if i == 20 {
			fmt.Fprintf(w, "- ... and %d more\n", len(errs)-i)
			break
		}
		fmt.Fprintf(w, "- %v\n", e)
	}
	if len(errs) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "BENCH add_p50_ratio=%s add_p50_ratio_110=%s add_p50_ratio_500=%s del_p50_ratio=%s add_growth_500=%s parallel8_ratio=%s rss_mb=%s"+
		" del_p50_ratio_churn=%s floor_gap_ms=%s floor_gap_ms_200=%s failed_ops=%d\n",
		get(at1, adds, "A", "B"), get(at110, adds, "A", "B"), get(at500, adds, "A", "B"), get(at1, dels, "A", "B"), growth, parRatio, rssMB,
		churnRatio, gap(at1), gap(at200), len(errs))
}

// floorTable compares chain A with the Open vSwitch floor (chain F) at each
// N, with the bridge reconfigurations ovs-vswitchd ran while each operation
// was under way (the ones it waited for, and any that others started
// meanwhile).
func floorTable(w io.Writer, results []*levelResult) {
	if len(results) == 0 || len(results[0].add["F"]) == 0 {
		return
	}
	fmt.Fprintf(w, "## Against the Open vSwitch floor: chain A and chain F (bare veth + ovs-vsctl add-port + host-local), p50 ms\n\n")
	fmt.Fprintf(w, "F is what any plugin must pay on this ovs-vswitchd: a veth (container end up in its netns, host end isolated and up), a bare `ovs-vsctl add-port` to A's bridge (it waits until ovs-vswitchd has applied it) and the host-local exec; DEL: `ovs-vsctl del-port` (waits too), the veth deleted, host-local. No flows.\n\n")
	fmt.Fprintf(w, "\"reconf\" is ovs-vswitchd's bridge_reconfigure counter from the start to the return of the operation, p50 (max) over the repetitions; it includes reconfigurations still running from the operation before (the trace below starts from a quiet ovs-vswitchd).\n\n")
	t := &table{head: []string{"N", "A ADD", "F ADD", "gap A−F", "A/F", "reconf A ADD", "reconf F ADD", "A DEL", "F DEL", "gap A−F", "reconf A DEL", "reconf F DEL"}}
	rc := func(vs []int) string {
		if len(vs) == 0 {
			return "–"
		}
		v := make([]int64, len(vs))
		for i, x := range vs {
			v[i] = int64(x)
		}
		return fmt.Sprintf("%d (%d)", pctI(v, 50), maxI(v))
	}
	for _, lr := range results {
		aa, fa, ad, fd := pct(lr.add["A"], 50), pct(lr.add["F"], 50), pct(lr.del["A"], 50), pct(lr.del["F"], 50)
		t.add(strconv.Itoa(lr.n), ms(aa), ms(fa), ms(aa-fa), ratio(aa, fa), rc(lr.reconfAdd["A"]), rc(lr.reconfAdd["F"]),
			ms(ad), ms(fd), ms(ad-fd), rc(lr.reconfDel["A"]), rc(lr.reconfDel["F"]))
	}
	t.print(w)
}

// churnTable prints the DEL-under-churn scenario, with each chain's DEL at
// the level closest to the churn's N without churn, and the plugin
// processes' share.
func churnTable(w io.Writer, c *churnResult, results []*levelResult, calls []call) {
	if c == nil {
		return
	}
	var ref *levelResult
	for _, lr := range results {
		if ref == nil || abs(lr.n-30) < abs(ref.n-30) {
			ref = lr
		}
	}
	fmt.Fprintf(w, "## DEL under churn: one DEL at a time while %d callers keep ADDing to the same chain (ms, libcni in-process)\n\n", c.churners)
	walls := map[string]map[string][]time.Duration{}
	for _, cl := range calls {
		if cl.tag == "churn" && cl.command == "DEL" {
			if walls[cl.chain] == nil {
				walls[cl.chain] = map[string][]time.Duration{}
			}
			walls[cl.chain][cl.plugin] = append(walls[cl.chain][cl.plugin], cl.wall)
		}
	}
	t := &table{head: []string{"chain", "DELs", "p50", "p90", "A/x p50", "N during the DELs", "churn ADDs/s", fmt.Sprintf("DEL p50 without churn, N=%d", refN(ref)), "plugin processes' DEL wall p50 under churn"}}
	keys := make([]string, 0, len(c.del))
	for k := range c.del {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		rate := 0.0
		if c.busy[k] > 0 {
			rate = float64(c.adds[k]) / c.busy[k].Seconds()
		}
		var plugins []string
		for pl, ws := range walls[k] {
			plugins = append(plugins, fmt.Sprintf("%s %s", pl, ms(pct(ws, 50))))
		}
		slices.Sort(plugins)
		without := "–"
		if ref != nil {
			without = ms(pct(ref.del[k], 50))
		}
		t.add(k, strconv.Itoa(len(c.del[k])), ms(pct(c.del[k], 50)), ms(pct(c.del[k], 90)), ratio(pct(c.del["A"], 50), pct(c.del[k], 50)),
			fmt.Sprintf("%d–%d", c.minN[k], c.maxN[k]), fmt.Sprintf("%.1f", rate), without, strings.Join(plugins, ", "))
	}
	t.print(w)
	if len(c.ofChurn) > 0 && len(c.ofQuiet) > 0 {
		fmt.Fprintf(w, "One OpenFlow request to chain A's bridge (a cookie delete and its barrier, as each of our DELs sends twice), every 20 ms: p50 %s, p90 %s ms with the node quiet (%d requests, 1 s before each round); p50 %s, p90 %s ms during chain A's churn rounds (%d requests).\n\n",
			ms(pct(c.ofQuiet, 50)), ms(pct(c.ofQuiet, 90)), len(c.ofQuiet), ms(pct(c.ofChurn, 50)), ms(pct(c.ofChurn, 90)), len(c.ofChurn))
	}
}

func abs(x int) int { return max(x, -x) }

func refN(lr *levelResult) int {
	if lr == nil {
		return 0
	}
	return lr.n
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}

// traceTables prints the trace pass: the counts, then each timeline.
func traceTables(w io.Writer, traces []*traceResult) {
	if len(traces) == 0 {
		return
	}
	fmt.Fprintf(w, "## ovs-vswitchd's reconfigurations in one ADD and one DEL, traced (ovs-vswitchd quiet before each)\n\n")
	fmt.Fprintf(w, "\"in all\" are the bridge reconfigurations from the start of the operation until ovs-vswitchd was quiet again for 0.5 s; \"seen ending before the return\" those whose main loop iteration the poll saw end while the operation was under way (it waited for them or ran alongside them; when the loop is stuck for longer than the operation, none is seen). The pass polls ovs-vswitchd every 2 ms: its times are not the benchmark's.\n\n")
	t := &table{head: []string{"chain", "op", "N", "wall ms", "reconfigurations in all", "seen ending before the return"}}
	for _, tr := range traces {
		t.add(tr.chain, tr.op, strconv.Itoa(tr.n), ms(tr.wall), strconv.Itoa(tr.during+tr.after), strconv.Itoa(tr.during))
	}
	t.print(w)
	for _, tr := range traces {
		fmt.Fprintf(w, "### Timeline: chain %s %s at N=%d\n\n", tr.chain, tr.op, tr.n)
		t := &table{head: []string{"ms", "event"}}
		for _, e := range tr.events {
			t.add(ms(e.rel), e.what)
		}
		t.print(w)
	}
}

// goalsTable holds the run against docs/performance.md's goals (issue
// figures a node's chain should reach): chain A against the Open vSwitch
// floor (F) and the reference chain (B) at each N, 8 callers against B,
// each plugin's start-up against the reference bridge's, chain A's peak
// RSS per plugin.
// parallelTable is the parallel phase's: each chain's ADD and DEL rates.
func parallelTable(w io.Writer, keys []string, pr parResult) {
	fmt.Fprintf(w, "## Parallel: %d concurrent callers, 0 → %d containers and back\n\n", *callers, pr.n)
	t := &table{head: []string{"chain", "ADDs/s", "DELs/s", "ADD ratio A/x"}}
	rate := func(d time.Duration) float64 {
		if d == 0 {
			return 0
		}
		return float64(pr.n) / d.Seconds()
	}
	for _, k := range keys {
		if pr.addTime[k] == 0 {
			continue
		}
		t.add(k, fmt.Sprintf("%.1f", rate(pr.addTime[k])), fmt.Sprintf("%.1f", rate(pr.delTime[k])),
			fmt.Sprintf("%.2f", rate(pr.addTime["A"])/rate(pr.addTime[k])))
	}
	t.print(w)
	if pr.ovsCPU[true] > 0 {
		fmt.Fprintf(w, "ovsdb-server + ovs-vswitchd CPU during A's parallel phase: %.1f ms per ADD, %.1f ms per DEL.\n\n",
			float64(pr.ovsCPU[true].Microseconds())/1000/float64(pr.n), float64(pr.ovsCPU[false].Microseconds())/1000/float64(pr.n))
	}
}

func goalsTable(w io.Writer, results []*levelResult, pr parResult, floors map[string][]time.Duration, rss map[string]map[string][]int64) {
	fmt.Fprintf(w, "## Against the goals (medians of this run; lower is better but for the callers)\n\n")
	t := &table{head: []string{"figure", "goal"}}
	for _, lr := range results {
		t.head = append(t.head, fmt.Sprintf("N=%d", lr.n))
	}
	row := func(name, goal, op, other string) {
		r := []string{name, goal}
		for _, lr := range results {
			m := lr.add
			if op == "DEL" {
				m = lr.del
			}
			if len(m["A"]) == 0 || len(m[other]) == 0 {
				r = append(r, "–")
				continue
			}
			r = append(r, ratio(pct(m["A"], 50), pct(m[other], 50)))
		}
		t.add(r...)
	}
	row("ADD / the floor (chain F)", "≤ 1.35", "ADD", "F")
	row("DEL / the floor", "≤ 1.2", "DEL", "F")
	row("ADD / the reference chain (B, iptables)", "≤ 0.3", "ADD", "B")
	row("DEL / the reference chain", "≤ 0.25", "DEL", "B")
	t.print(w)
	t = &table{head: []string{"figure", "goal", "this run"}}
	if pr.addTime["A"] > 0 && pr.addTime["B"] > 0 {
		t.add(fmt.Sprintf("%d callers: A's ADD rate / B's", *callers), "≥ 4", fmt.Sprintf("%.2f", pr.addTime["B"].Seconds()/pr.addTime["A"].Seconds()))
	}
	if ref := floors["bridge"]; len(ref) > 0 {
		for _, b := range []string{"ovs-bridge", "ovs-portmap"} {
			if v := floors[b]; len(v) > 0 {
				t.add(b+" start-up (VERSION) / the reference bridge's", "≤ 1", ratio(pct(v, 50), pct(ref, 50)))
			}
		}
	}
	for _, p := range []string{"ovs-bridge", "ovs-portmap"} {
		var peak int64
		for cmd, v := range rss["A"] {
			if strings.HasPrefix(cmd, p+" ") {
				peak = max(peak, maxI(v))
			}
		}
		if peak > 0 {
			t.add(p+" peak RSS (chain A, MiB)", "≤ 8", mib(peak))
		}
	}
	t.print(w)
}
