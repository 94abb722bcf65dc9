package cli

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// cmdStats: stats [SECONDS] (default 30): the CPU (cores, averaged over
// SECONDS) and memory (RSS) of each container of the harness and of each
// node's pods (kubelet's cgroupRoot /PREFIX/NODE, outside the container's
// cgroup), read from the cgroups (v1: cpuacct and memory).
func cmdStats(e env, args []string) error {
	secs := 30
	if len(args) > 1 {
		return usageError{"stats [SECONDS]"}
	}
	if len(args) == 1 {
		n, err := strconv.Atoi(args[0])
		if err != nil || n < 1 {
			return usageError{"stats: " + args[0] + ": want seconds"}
		}
		secs = n
	}
	eng, names, err := e.listNodes()
	if err != nil {
		return err
	}
	cg := map[string]string{} // what → its cgroup path under each hierarchy
	for _, n := range names {
		out, err := eng.Run("inspect", "-f", "{{.Id}} {{.HostConfig.CgroupParent}}", e.plan.Container(n))
		if err != nil {
			return err
		}
		id, parent, _ := strings.Cut(out, " ")
		if parent == "" {
			parent = "/docker"
		}
		cg[n] = parent + "/" + id
		if pods := "/" + e.plan.Prefix + "/" + n; exists("/sys/fs/cgroup/cpuacct" + pods) {
			cg[n+" pods"] = pods
		}
	}
	whats := make([]string, 0, len(cg))
	for w := range cg {
		whats = append(whats, w)
	}
	sort.Strings(whats)
	u0 := map[string]int64{}
	for _, w := range whats {
		if u0[w], err = cpuUsage(cg[w]); err != nil {
			return err
		}
	}
	t0 := time.Now()
	time.Sleep(time.Duration(secs) * time.Second) // (the window of the average: time is what is measured)
	dt := float64(time.Since(t0).Nanoseconds())
	fmt.Printf("%-10s %8s %9s\n", "WHAT", "CPU", "RSS_MiB")
	var totCPU, totRSS int64
	for _, w := range whats {
		u, err := cpuUsage(cg[w])
		if err != nil {
			return err
		}
		rss, err := totalRSS(cg[w])
		if err != nil {
			return err
		}
		totCPU += u - u0[w]
		totRSS += rss
		fmt.Printf("%-10s %8.3f %9d\n", w, float64(u-u0[w])/dt, rss>>20)
	}
	fmt.Printf("%-10s %8.3f %9d\n", "total", float64(totCPU)/dt, totRSS>>20)
	return nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// cpuUsage is the cgroup's CPU time in ns (cpuacct.usage).
func cpuUsage(cg string) (int64, error) {
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuacct", cg, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// totalRSS is the cgroup's and its children's RSS in bytes (memory.stat's total_rss).
func totalRSS(cg string) (int64, error) {
	f, err := os.Open(filepath.Join("/sys/fs/cgroup/memory", cg, "memory.stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "total_rss" {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no total_rss in memory.stat", cg)
}
