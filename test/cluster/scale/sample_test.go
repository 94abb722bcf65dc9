package main

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestReadStatOfThisProcess(t *testing.T) {
	st, ok := readStat(os.Getpid())
	if !ok {
		t.Fatal("readStat of this process: not read")
	}
	if got, want := st.comm, comm(os.Getpid()); got != want {
		t.Errorf("comm: got %q, want %q", got, want)
	}
	if st.start == 0 {
		t.Errorf("starttime: got 0")
	}
}

func TestCPUByName(t *testing.T) {
	before := map[procKey]procTimes{
		{1, 10}: {comm: "containerd", utime: 100, stime: 50, cutime: 10},
		{2, 20}: {comm: "kubelet", utime: 300},
		{3, 30}: {comm: "gone", ppid: 1, utime: 90}, // exited, reaped by containerd: only its time since counts
		{5, 50}: {comm: "shim", ppid: 1, utime: 40, start: 50},
		{6, 60}: {comm: "app", ppid: 5, utime: 20, start: 60}, // its shim exited first: reaped by containerd too
	}
	after := map[procKey]procTimes{
		{1, 10}: {comm: "containerd", utime: 150, stime: 60, cutime: 370}, // + gone's 290 (90 before), shim's 50 (40 before), app's 20 (all before)
		{2, 20}: {comm: "kubelet", utime: 400},
		{4, 40}: {comm: "kubelet", utime: 100}, // new
		{2, 99}: {comm: "pause", utime: 5},     // a reused pid is another process
	}
	got, total := cpuByName(before, after)
	want := []ProcCPU{{"containerd (exited children)", 2.1}, {"kubelet", 2}, {"containerd", 0.6}, {"pause", 0.05}}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if total < 4.74 || total > 4.76 {
		t.Errorf("total: got %v, want 4.75", total)
	}
}

func TestQuantiles(t *testing.T) {
	q := quantiles([]float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10})
	if q.N != 10 || q.Min != 1 || q.Max != 10 || q.P50 != 6 || q.P90 != 9 {
		t.Errorf("got %+v", q)
	}
	if q := quantiles(nil); q.N != 0 {
		t.Errorf("empty: got %+v", q)
	}
}

// threads finds this process's own threads, under its name less digits.
func TestThreadsOfAProcessByName(t *testing.T) {
	self := comm(os.Getpid())
	if self == "" {
		t.Fatal("no comm of this process")
	}
	s := &sampler{}
	got := s.threads(self)
	if len(got) == 0 {
		t.Fatalf("threads(%q): none", self)
	}
	for k, st := range got {
		if st.comm != strings.TrimRight(self, "0123456789") {
			t.Errorf("thread %d: kind %q", k.pid, st.comm)
		}
	}
	if n := len(s.threads("no-such-process-name")); n != 0 {
		t.Errorf("threads of a name nothing has: %d", n)
	}
}
