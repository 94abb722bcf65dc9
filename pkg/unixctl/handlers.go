package unixctl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNoUpcallHandler says that ovs-vswitchd runs its upcall threads on a
// kernel datapath in per-CPU dispatch with no handler thread at all: a
// packet that misses the datapath's flow cache goes to no one, so the
// kernel datapath forwards nothing new. Open vSwitch 3.1.0 does this when
// it starts within 10 s of the kernel's boot on a machine with at most two
// CPUs configured: its count of usable CPUs stays 0 until 10 s of
// CLOCK_MONOTONIC have passed (ovs-thread.c's count_cpu_cores; fixed in
// 3.1.1 and 3.2.0 by "ovs-thread: Fix cpus not read for the first 10s.",
// https://bugzilla.redhat.com/show_bug.cgi?id=2180460). It mends itself
// on the first reconfiguration after that.
var ErrNoUpcallHandler = errors.New("ovs-vswitchd has no upcall handler thread for its kernel datapath: the datapath forwards no new flow")

// Upcalls is what ovs-vswitchd says of its upcall threads.
type Upcalls struct {
	PerCPU       []string // kernel datapaths in per-CPU dispatch (dpif-netlink/dispatch-mode)
	Handlers     int      // handler threads, every datapath type together (memory/show)
	Revalidators int      // revalidator threads, likewise: 0 while flow-restore-wait holds them
}

// Err is ErrNoUpcallHandler when u shows that state, else nil. Upcall
// threads running (revalidators) with no handler on a per-CPU kernel
// datapath is it; a userspace datapath beside it has handlers of its own,
// which memory/show counts together: it hides the state.
func (u Upcalls) Err() error {
	if len(u.PerCPU) > 0 && u.Revalidators > 0 && u.Handlers == 0 {
		return fmt.Errorf("%w (datapath %s, %d revalidators, 0 handlers)", ErrNoUpcallHandler, strings.Join(u.PerCPU, ", "), u.Revalidators)
	}
	return nil
}

// ReadUpcalls asks the ovs-vswitchd of sock about its upcall threads. Call
// it only where a kernel datapath exists: ovs-vswitchd answers
// dpif-netlink/dispatch-mode only when it can reach the kernel module
// (else the call waits for ctx).
func ReadUpcalls(ctx context.Context, sock string) (Upcalls, error) {
	var u Upcalls
	modes, err := call(ctx, sock, "dpif-netlink/dispatch-mode")
	if err != nil {
		return u, err
	}
	u.PerCPU = PerCPU(modes)
	mem, err := call(ctx, sock, "memory/show")
	if err != nil {
		return u, err
	}
	counts := MemoryCounts(mem)
	u.Handlers, u.Revalidators = counts["handlers"], counts["revalidators"]
	return u, nil
}

// PerCPU are the datapaths that dpif-netlink/dispatch-mode's output
// ("ovs-system: per-cpu dispatch mode", a line each) shows in per-CPU
// dispatch.
func PerCPU(out string) []string {
	var dps []string
	for _, line := range strings.Split(out, "\n") {
		if dp, mode, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(mode, "per-cpu") {
			dps = append(dps, dp)
		}
	}
	return dps
}

// MemoryCounts parses memory/show's output ("handlers:2 ports:3
// revalidators:1 rules:9 udpif keys:0"; a count of 0 is left out): names
// may hold spaces, values do not.
func MemoryCounts(out string) map[string]int {
	counts := map[string]int{}
	rest := strings.TrimSpace(out)
	for rest != "" {
		name, after, ok := strings.Cut(rest, ":")
		if !ok {
			break
		}
		val, next, _ := strings.Cut(after, " ")
		if n, err := strconv.Atoi(val); err == nil {
			counts[strings.TrimSpace(name)] = n
		}
		rest = strings.TrimSpace(next)
	}
	return counts
}
