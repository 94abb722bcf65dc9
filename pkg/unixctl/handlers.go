package unixctl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNoUpcallHandler says that a kernel datapath lost every upcall it made
// for a while: each packet that missed its flow cache went to no
// ovs-vswitchd handler, so it forwards no new flow. Open vSwitch 3.1.0
// does this when it starts within 10 s of the kernel's boot on a machine
// of at most two CPUs (per-CPU upcall dispatch): its count of usable CPUs
// stays 0 until 10 s of CLOCK_MONOTONIC have passed (ovs-thread.c's
// count_cpu_cores), it starts no handler, and the handlers it starts after
// those 10 s are not given the datapath's upcalls either, until it is
// restarted (fixed in 3.1.1 and 3.2.0 by "ovs-thread: Fix cpus not read
// for the first 10s.", https://bugzilla.redhat.com/show_bug.cgi?id=2180460;
// docs/resilience.md).
var ErrNoUpcallHandler = errors.New("the kernel datapath lost every upcall: ovs-vswitchd handles none of them, and the datapath forwards no new flow")

// Lookups are a datapath's lookup counters (dpctl/show's "lookups:" line):
// packets that hit its flow cache, that missed it (an upcall each), and the
// upcalls that reached no handler.
type Lookups struct {
	Hit, Missed, Lost uint64
}

// ReadLookups asks the ovs-vswitchd of sock for its datapaths' lookup
// counters, by datapath name ("system@ovs-system").
func ReadLookups(ctx context.Context, sock string) (map[string]Lookups, error) {
	out, err := call(ctx, sock, "dpctl/show")
	if err != nil {
		return nil, err
	}
	return ParseLookups(out)
}

// ParseLookups parses dpctl/show's output: a datapath's name on a line of
// its own, then its indented lines, "lookups: hit:H missed:M lost:L" one of
// them.
func ParseLookups(out string) (map[string]Lookups, error) {
	dps := map[string]Lookups{}
	dp := ""
	for _, line := range strings.Split(out, "\n") {
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
			dp = strings.TrimSuffix(strings.TrimSpace(line), ":")
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "lookups:" {
			continue
		}
		var l Lookups
		for _, f := range fields[1:] {
			name, val, _ := strings.Cut(f, ":")
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("dpctl/show: datapath %q: lookups %q: %w", dp, f, err)
			}
			switch name {
			case "hit":
				l.Hit = n
			case "missed":
				l.Missed = n
			case "lost":
				l.Lost = n
			}
		}
		dps[dp] = l
	}
	return dps, nil
}

// UpcallVerdict is what two readings of a datapath's lookups, before and
// after, say of its upcalls in between.
type UpcallVerdict int

const (
	NoMiss  UpcallVerdict = iota // nothing missed the flow cache: nothing to say
	Handled                      // some upcalls reached a handler
	AllLost                      // every upcall was lost
)

// Verdict compares two readings of one datapath. A counter that went back
// is a new datapath: nothing to say.
func Verdict(before, after Lookups) UpcallVerdict {
	if after.Missed <= before.Missed || after.Lost < before.Lost {
		return NoMiss
	}
	if after.Lost-before.Lost >= after.Missed-before.Missed {
		return AllLost
	}
	return Handled
}
