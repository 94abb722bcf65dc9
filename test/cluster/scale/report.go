package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// printReport prints the Markdown tables of the runs in files, in their order.
func printReport(w io.Writer, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("-report: no JSON file given")
	}
	var runs []*Result
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("reading run: %w", err)
		}
		r := &Result{}
		if err := json.Unmarshal(b, r); err != nil {
			return fmt.Errorf("run %s: %w", f, err)
		}
		runs = append(runs, r)
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }

	p("### Scale-up to all Ready and scale-down to all gone (s from the first scale request)\n\n")
	p("| chain | nodes × pods | scale requests answered | all Ready | Ready p50 / p90 | all gone | gone p50 / p90 | hostPorts answering | Warning events |\n")
	p("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		ru, rd := r.Up.Milestones["Ready"], r.Down.Milestones["gone"]
		p("| %s | %d × %d | %.1f | **%.1f** | %.1f / %.1f | **%.1f** | %.1f / %.1f | %d / %d | %s |\n",
			r.Chain, len(r.Nodes), r.PodsPerNode, r.Up.Requests, r.Up.All, ru.P50, ru.P90,
			r.Down.All, rd.P50, rd.P90, r.HostPorts.OK, r.Up.Pods, orNone(reasons(r.Failures)))
	}
	for _, r := range runs {
		for _, f := range r.Failures {
			p("\n- %s: %s", r.Chain, f)
		}
		for _, e := range r.HostPorts.Errors {
			p("\n- %s: hostPort: %s", r.Chain, e)
		}
	}
	p("\n")

	p("\n### The pods' milestones on the way (s from the first scale request, p50 / max over the pods)\n\n")
	p("| chain | created | scheduled | sandbox ready | Ready | terminating | gone |\n|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		q := func(t Timing, m string) string {
			x, ok := t.Milestones[m]
			if !ok || x.N == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f / %.1f", x.P50, x.Max)
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n", r.Chain, q(r.Up, "created"), q(r.Up, "scheduled"),
			q(r.Up, "sandbox ready"), q(r.Up, "Ready"), q(r.Down, "terminating"), q(r.Down, "gone"))
	}
	p("\n")
	for _, r := range runs {
		c, okc := r.Up.Milestones["created"]
		t, okt := r.Down.Milestones["terminating"]
		if okc && okt && c.N > 0 && t.N > 0 {
			p("- %s: the control plane's own pace: the last pod created at %.1f s, the last marked for deletion at %.1f s; no chain has all Ready or all gone sooner.\n", r.Chain, c.Max, t.Max)
		}
	}

	p("\n### kubelet's runtime operations and containerd's sandbox network set-up and teardown (the CNI chain's ADD and DEL) (mean s, all nodes; count, and how many of them kubelet counted as failed)\n\n")
	ops := []struct{ phase, op string }{
		{"up", "run_podsandbox"}, {"up", "sandbox_create_network"}, {"up", "create_container"}, {"up", "start_container"},
		{"down", "stop_container"}, {"down", "stop_podsandbox"}, {"down", "sandbox_delete_network"},
	}
	p("| chain |")
	for _, o := range ops {
		p(" %s |", o.op)
	}
	p("\n|---|%s\n", strings.Repeat("---|", len(ops)))
	for _, r := range runs {
		p("| %s |", r.Chain)
		for _, o := range ops {
			t := r.Up
			if o.phase == "down" {
				t = r.Down
			}
			d, ok := t.Kubelet[o.op]
			if !ok {
				d, ok = t.Containerd[o.op]
			}
			switch {
			case ok && d.Errors > 0:
				p(" %.2f (%d, %d failed) |", d.Mean, d.Count, d.Errors)
			case ok:
				p(" %.2f (%d) |", d.Mean, d.Count)
			default:
				p(" – |")
			}
		}
		p("\n")
	}

	for _, r := range runs {
		var any bool
		for _, ph := range r.Phases {
			any = any || len(ph.Agent) > 0
		}
		if !any {
			continue
		}
		p("\n### The node agent (%s): CPU (cores, CPU time / wall time) and RSS (MiB), per node\n\n", r.Chain)
		p("| phase | wall (s) | node | CPU | RSS max | RSS at end |\n|---|---|---|---|---|---|\n")
		for _, ph := range r.Phases {
			for _, a := range ph.Agent {
				p("| %s | %.0f | %s | %.4f | %.1f | %.1f |\n", ph.Name, ph.Seconds, a.Node, a.Cores, a.RSSMaxMiB, a.RSSEndMiB)
			}
		}
	}

	phases := []string{"scale-up"}
	if len(runs) > 0 {
		// The idle phase with every pod, when the run had one: the
		// chains' steady cost.
		idle := fmt.Sprintf("idle, %d pods per node", runs[0].PodsPerNode)
		for _, ph := range runs[0].Phases {
			if ph.Name == idle {
				phases = append(phases, idle)
			}
		}
	}
	phases = append(phases, "scale-down")
	for _, phase := range phases {
		when := "during the " + phase
		if strings.HasPrefix(phase, "idle, ") {
			when = "idle with all pods (" + strings.TrimPrefix(phase, "idle, ") + ")"
		}
		p("\n### CPU-seconds of the harness's processes %s, by process\n\n", when)
		var names []string
		best := map[string]float64{}
		byRun := make([]map[string]float64, len(runs))
		phs := make([]*Phase, len(runs))
		for i, r := range runs {
			byRun[i] = map[string]float64{}
			for k := range r.Phases {
				if r.Phases[k].Name == phase {
					phs[i] = &r.Phases[k]
				}
			}
			if phs[i] == nil {
				continue
			}
			for _, c := range phs[i].CPU {
				byRun[i][c.Name] = c.Seconds
				if _, ok := best[c.Name]; !ok {
					names = append(names, c.Name)
				}
				best[c.Name] = max(best[c.Name], c.Seconds)
			}
		}
		slices.SortFunc(names, func(x, y string) int {
			if best[x] != best[y] {
				if best[x] > best[y] {
					return -1
				}
				return 1
			}
			return strings.Compare(x, y)
		})
		const top = 14
		p("| process |")
		for _, r := range runs {
			p(" %s |", r.Chain)
		}
		p("\n|---|%s\n", strings.Repeat("---|", len(runs)))
		for i, n := range names {
			if i == top {
				break
			}
			p("| %s |", n)
			for j := range runs {
				if phs[j] == nil {
					p(" – |")
					continue
				}
				p(" %.1f |", byRun[j][n])
			}
			p("\n")
		}
		if len(names) > top {
			p("| the others |")
			for j := range runs {
				rest := 0.0
				for _, n := range names[top:] {
					rest += byRun[j][n]
				}
				if phs[j] == nil {
					p(" – |")
					continue
				}
				p(" %.1f |", rest)
			}
			p("\n")
		}
		p("| **total** |")
		for j := range runs {
			if phs[j] != nil {
				p(" **%.1f** |", phs[j].CPUTotal)
			} else {
				p(" – |")
			}
		}
		p("\n| wall × CPUs |")
		for j, r := range runs {
			if phs[j] != nil {
				p(" %.1f × %d = %.1f |", phs[j].Seconds, r.Machine.CPUs, phs[j].Seconds*float64(r.Machine.CPUs))
			} else {
				p(" – |")
			}
		}
		p("\n")
		for j, r := range runs {
			if phs[j] == nil || len(phs[j].Vswitchd) == 0 {
				continue
			}
			var parts []string
			for _, c := range phs[j].Vswitchd {
				parts = append(parts, fmt.Sprintf("%s %.1f", c.Name, c.Seconds))
			}
			p("\n- %s: ovs-vswitchd by thread (every node's; its main thread is named ovs-vswitchd): %s", r.Chain, strings.Join(parts, ", "))
		}
		if !strings.HasPrefix(phase, "idle, ") {
			for j, r := range runs {
				if phs[j] == nil || r.Machine.CPUs == 0 || phs[j].Seconds == 0 {
					continue
				}
				rest := nodeOwn(byRun[j], phs[j].CPUTotal)
				alone := rest / float64(r.Machine.CPUs)
				p("\n- %s: the node's own work (neither the CNI chain nor Open vSwitch nor the node agent): %.1f CPU-seconds, %.1f s on %d CPUs alone, %.2f of the phase's %.1f s",
					r.Chain, rest, alone, r.Machine.CPUs, alone/phs[j].Seconds, phs[j].Seconds)
			}
		}
		p("\n")
	}
	p("\n\"containerd (exited children)\": the processes containerd ran and reaped, the CNI plugins (and the shims' launchers).\n")
	p("\"node-init.sh (exited children)\": node-init.sh is the node container's PID 1, which reaps the pods' shims once they exit (their CPU in the phase, with that of runc and the pods' processes they reaped).\n")
	return nil
}

// networkProcs are the processes of the network: the CNI chain (the
// plugins containerd runs and reaps, with the shims' launchers, which
// makes nodeOwn a little low) and Open vSwitch and the node agent.
var networkProcs = []string{"containerd (exited children)", "ovs-vswitchd", "ovsdb-server", "ovsflow-agent"}

// nodeOwn is what a phase's processes took that is not the network's
// (networkProcs): kubelet, containerd, the shims and runc, the control
// plane, the pods. Whatever the network costs, a phase cannot end sooner
// than this work alone on the node's CPUs.
func nodeOwn(cpu map[string]float64, total float64) float64 {
	for _, n := range networkProcs {
		total -= cpu[n]
	}
	return total
}

// reasons: "Reason: N" of each "Reason: N (message)".
func reasons(f []string) []string {
	var out []string
	for _, s := range f {
		r, _, _ := strings.Cut(s, " (")
		out = append(out, r)
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
