package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The nodes are containers of this host, and their pods processes of this
// host: the node agent and every process of the harness are in this host's
// /proc. CPU times in /proc/PID/stat are in clock ticks of USER_HZ, 100 on
// Linux.
const (
	procRoot = "/proc"
	userHZ   = 100
	every    = 500 * time.Millisecond // the agent's sampling period
)

// Phase: what the sampler saw between two instants.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	// Agent: each node agent process over the phase.
	Agent []AgentFigures `json:"agent,omitempty"`
	// CPU: CPU-seconds of the harness's processes by name, most first.
	CPU      []ProcCPU `json:"cpu,omitempty"`
	CPUTotal float64   `json:"cpuTotal"`
	// Vswitchd: ovs-vswitchd's CPU-seconds by thread kind (its threads'
	// names less their numbers), every node's summed: on the netdev
	// datapath the main thread both forwards the packets of the ports and
	// reconfigures the bridge on every change of the database.
	Vswitchd []ProcCPU `json:"vswitchdThreads,omitempty"`
}

// AgentFigures of one node's agent over a phase.
type AgentFigures struct {
	Node      string  `json:"node"`
	PID       int     `json:"pid"`
	Cores     float64 `json:"cores"` // CPU time / wall time
	RSSMaxMiB float64 `json:"rssMaxMiB"`
	RSSEndMiB float64 `json:"rssEndMiB"`
	Samples   int     `json:"samples"`
}

// ProcCPU: the CPU-seconds of the processes of one name; "NAME (exited
// children)" are those of the children that exited and were reaped by
// them (for containerd: the CNI plugins it ran).
type ProcCPU struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

type agentSample struct {
	t      time.Time
	node   string
	pid    int
	start  uint64 // starttime: a restarted agent is another process
	cpu    float64
	rssKiB int64
}

type sampler struct {
	agent   string
	nodes   []string
	cgroups []string
	mu      sync.Mutex
	samples []agentSample
	procs   map[int]string // agent pid -> node
	stopc   chan struct{}
	done    chan struct{}
}

type phaseStart struct {
	name  string
	t     time.Time
	first int // the index of the phase's first agent sample
	procs map[procKey]procTimes
	// threads: ovs-vswitchd's threads (procKey.pid is the thread's ID).
	threads map[procKey]procTimes
}

func startSampler(agent string, nodes, cgroups []string) *sampler {
	s := &sampler{agent: agent, nodes: nodes, cgroups: cgroups, procs: map[int]string{}, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if agent == "" {
			return
		}
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			s.sampleAgents()
			select {
			case <-tick.C:
			case <-s.stopc:
				return
			}
		}
	}()
	return s
}

func (s *sampler) stop() {
	close(s.stopc)
	<-s.done
}

func (s *sampler) begin(name string) phaseStart {
	s.mu.Lock()
	first := len(s.samples)
	s.mu.Unlock()
	s.sampleAgents()
	return phaseStart{name: name, t: time.Now(), first: first, procs: s.snapshot(), threads: s.threads("ovs-vswitchd")}
}

func (s *sampler) end(b phaseStart) Phase {
	procs, threads := s.snapshot(), s.threads("ovs-vswitchd")
	now := time.Now()
	s.sampleAgents()
	ph := Phase{Name: b.name, Seconds: now.Sub(b.t).Seconds()}
	ph.CPU, ph.CPUTotal = cpuByName(b.procs, procs)
	ph.Vswitchd, _ = cpuByName(b.threads, threads)
	s.mu.Lock()
	defer s.mu.Unlock()
	first := map[string]agentSample{}
	last := map[string]agentSample{}
	maxRSS := map[string]int64{}
	n := map[string]int{}
	for _, x := range s.samples[b.first:] {
		if f, ok := first[x.node]; !ok || f.pid != x.pid || f.start != x.start {
			// The first sample of the process that is the node's agent at the end counts.
			first[x.node] = x
		}
		last[x.node] = x
		maxRSS[x.node] = max(maxRSS[x.node], x.rssKiB)
		n[x.node]++
	}
	for node, l := range last {
		f := first[node]
		wall := l.t.Sub(f.t).Seconds()
		a := AgentFigures{Node: node, PID: l.pid, RSSMaxMiB: float64(maxRSS[node]) / 1024, RSSEndMiB: float64(l.rssKiB) / 1024, Samples: n[node]}
		if wall > 0 {
			a.Cores = (l.cpu - f.cpu) / wall
		}
		ph.Agent = append(ph.Agent, a)
	}
	slices.SortFunc(ph.Agent, func(x, y AgentFigures) int { return strings.Compare(x.Node, y.Node) })
	return ph
}

// sampleAgents reads the CPU time and RSS of every node agent process,
// looking the processes up again when one is gone.
func (s *sampler) sampleAgents() {
	if s.agent == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var got []agentSample
	lost := len(s.procs) == 0
	for pid, node := range s.procs {
		x, ok := readAgent(pid, node, now)
		if !ok {
			lost = true
			continue
		}
		got = append(got, x)
	}
	if lost {
		got = got[:0]
		s.procs = map[int]string{}
		for _, pid := range pids() {
			if comm(pid) != s.agent {
				continue
			}
			// Only the agents of this cluster's nodes: other clusters may run on this host.
			node := nodeName(pid)
			if !slices.Contains(s.nodes, node) || !s.inCgroups(pid) {
				continue
			}
			if x, ok := readAgent(pid, node, now); ok {
				s.procs[pid] = node
				got = append(got, x)
			}
		}
	}
	s.samples = append(s.samples, got...)
}

func readAgent(pid int, node string, now time.Time) (agentSample, bool) {
	st, ok := readStat(pid)
	if !ok {
		return agentSample{}, false
	}
	status, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return agentSample{}, false
	}
	var rss int64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				rss, _ = strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return agentSample{t: now, node: node, pid: pid, start: st.start, cpu: float64(st.utime+st.stime) / userHZ, rssKiB: rss}, true
}

// nodeName: the agent's NODE_NAME (the DaemonSet's downward API).
func nodeName(pid int) string {
	env, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "environ"))
	if err != nil {
		return ""
	}
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("NODE_NAME=")); ok {
			return string(v)
		}
	}
	return ""
}

func pids() []int {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func comm(pid int) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

type procTimes struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime uint64
	start                        uint64
}

type procKey struct {
	pid   int
	start uint64
}

func readStat(pid int) (procTimes, bool) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procTimes{}, false
	}
	return parseStat(b)
}

// parseStat reads a process's or thread's stat file (proc(5)).
func parseStat(b []byte) (procTimes, bool) {
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procTimes{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 20 {
		return procTimes{}, false
	}
	u := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
	// f[0] is field 3 of proc(5): utime is field 14, starttime 22.
	return procTimes{comm: string(b[open+1 : end]), ppid: int(u(1)), utime: u(11), stime: u(12), cutime: u(13), cstime: u(14), start: u(19)}, true
}

// snapshot: the CPU times of every process whose cgroup path holds one of
// the harness's cgroup substrings.
func (s *sampler) snapshot() map[procKey]procTimes {
	out := map[procKey]procTimes{}
	if len(s.cgroups) == 0 {
		return out
	}
	for _, pid := range pids() {
		if !s.inCgroups(pid) {
			continue
		}
		if st, ok := readStat(pid); ok {
			out[procKey{pid, st.start}] = st
		}
	}
	return out
}

// threads: the CPU times of the threads of the harness's processes named
// name, each under its kind: the thread's name less its trailing digits
// (handler12: handler).
func (s *sampler) threads(name string) map[procKey]procTimes {
	out := map[procKey]procTimes{}
	for _, pid := range pids() {
		if comm(pid) != name || !s.inCgroups(pid) {
			continue
		}
		dir := filepath.Join(procRoot, strconv.Itoa(pid), "task")
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
			if err != nil {
				continue
			}
			if st, ok := parseStat(b); ok {
				st.comm = strings.TrimRight(st.comm, "0123456789")
				tid, _ := strconv.Atoi(e.Name())
				out[procKey{tid, st.start}] = st
			}
		}
	}
	return out
}

// inCgroups: the process is in one of the harness's cgroups (any, when none is given).
func (s *sampler) inCgroups(pid int) bool {
	if len(s.cgroups) == 0 {
		return true
	}
	cg, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return false
	}
	for _, m := range s.cgroups {
		if strings.Contains(string(cg), m) {
			return true
		}
	}
	return false
}

// cpuByName: CPU-seconds between two snapshots by process name: a process
// in both counts its difference, one only in the second all its time. A
// process that ended in between counts when its parent reaped it (its
// parent's "exited children"), less what it had used before the first
// snapshot when it was there already.
func cpuByName(before, after map[procKey]procTimes) ([]ProcCPU, float64) {
	by := map[string]float64{}
	byPID := map[int]procTimes{}
	for k, a := range after {
		byPID[k.pid] = a
		b := before[k] // zero when the process is new
		by[a.comm] += float64(a.utime+a.stime-b.utime-b.stime) / userHZ
		if c := float64(a.cutime+a.cstime-b.cutime-b.cstime) / userHZ; c > 0 {
			by[a.comm+" (exited children)"] += c
		}
	}
	beforePID := map[int]procTimes{}
	for k, b := range before {
		beforePID[k.pid] = b
	}
	for k, b := range before {
		if _, ok := after[k]; ok {
			continue
		}
		if r, ok := reaper(b, beforePID, byPID); ok {
			n := r.comm + " (exited children)"
			by[n] = max(0, by[n]-float64(b.utime+b.stime+b.cutime+b.cstime)/userHZ)
		}
	}
	var out []ProcCPU
	total := 0.0
	for n, v := range by {
		if v > 0 {
			out = append(out, ProcCPU{n, v})
			total += v
		}
	}
	slices.SortFunc(out, func(x, y ProcCPU) int {
		if x.Seconds != y.Seconds {
			if x.Seconds > y.Seconds {
				return -1
			}
			return 1
		}
		return strings.Compare(x.Name, y.Name)
	})
	return out, total
}

// reaper is the process of after that reaped p, which ended between the
// snapshots: its parent, or, when the parent ended too, the nearest
// ancestor still there. An orphan goes to the nearest subreaper or the
// namespace's init: a pod's processes whose shim exited first are reaped by
// the node container's PID 1, as the shim is. An ancestor's pid held by
// another process in after (a reused pid) is not that ancestor.
func reaper(p procTimes, before, after map[int]procTimes) (procTimes, bool) {
	pid := p.ppid
	for range 64 { // a loop in the recorded parents cannot hold us
		a, alive := after[pid]
		b, known := before[pid]
		switch {
		case alive && (!known || a.start == b.start):
			return a, true
		case !known:
			return procTimes{}, false
		}
		pid = b.ppid
	}
	return procTimes{}, false
}

func numCPU() int { return runtime.NumCPU() }
