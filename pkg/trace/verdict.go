package trace

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// WipedVerdict is the verdict when the bridge has no flow of the
// attachment at all (ovs-vswitchd restarted, someone deleted them).
const WipedVerdict = "no flow of this attachment on the bridge: run reconcile"

// WipedHostPortsVerdict is the verdict of a host-port question when the
// attachment's port security flows are there but its host-port flows are
// not.
const WipedHostPortsVerdict = "no host-port flow of this attachment on the bridge: run reconcile"

// The action patterns, compiled on first use (see stepLine).
var (
	natDst = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`nat\(dst=([^)]+)\)`) })
	natSrc = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`nat\(src=([^)]+)\)`) })
	zoneOf = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`zone=(\d+)`) })
	// ofproto/trace prints an output to LOCAL as "LOCAL".
	output = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(?:output:(\d+|LOCAL)|(LOCAL))$`) })
	tunSet = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^(set_field|load):(\S+)->(tun_dst|tun_ipv6_dst|tun_id|NXM_NX_TUN_IPV4_DST\[\]|NXM_NX_TUN_ID\[\])$`)
	})
)

// Verdict says in one line what the trace of probe p shows: the
// translations on the way and where the packet went, or the flow that
// dropped it, named by the declared flows (what pkg/flows builds from the
// attachment's record; flows.Name).
func Verdict(p Probe, r Answer, declared []flows.Flow) string {
	var parts []string
	for _, st := range r.Steps {
		for _, a := range st.Actions {
			if !strings.HasPrefix(a, "ct(") {
				continue
			}
			zone := ""
			if z := zoneOf().FindStringSubmatch(a); z != nil {
				zone = ", zone " + z[1]
			}
			if m := natDst().FindStringSubmatch(a); m != nil {
				from := p.Packet.Dst.String()
				if p.Packet.DstPort != 0 {
					from = fmt.Sprintf("%s:%d", bracket(p.Packet.Dst.String()), p.Packet.DstPort)
				}
				parts = append(parts, fmt.Sprintf("DNAT %s -> %s%s", from, m[1], zone))
			}
			if m := natSrc().FindStringSubmatch(a); m != nil {
				parts = append(parts, fmt.Sprintf("SNAT %s -> %s%s", p.Packet.Src, m[1], zone))
			}
		}
	}
	if len(r.Steps) == 0 {
		return p.Prefix + "no flow was traced: " + strings.Join(r.Datapath, "; ")
	}
	last := r.Steps[len(r.Steps)-1]
	where := fmt.Sprintf("table %d, priority %d", last.Table, last.Priority)
	if last.NoMatch {
		return p.Prefix + fmt.Sprintf("dropped: no flow matched in table %d", last.Table)
	}
	// Into a tunnel, ofproto/trace goes on with the outer packet in the
	// bridge that routes it: the flow that decided is the one that
	// output to the tunnel port.
	tunnelled := false
	if p.TunnelPort != 0 {
		port := fmt.Sprint(p.TunnelPort)
		if i := slices.IndexFunc(r.Steps, func(st Step) bool { return outputPort(st) == port }); i >= 0 {
			last, tunnelled = r.Steps[i], true
			where = fmt.Sprintf("table %d, priority %d", last.Table, last.Priority)
		}
	}
	name := nameOf(last, declared)
	dp := ""
	if len(r.Datapath) > 0 {
		dp = r.Datapath[len(r.Datapath)-1]
	}
	var out string
	switch {
	case tunnelled:
		out = fmt.Sprintf("into tunnel %s (port %d)", p.TunnelName, p.TunnelPort)
		dst, id := tunnelFields(last, r.Final)
		if dst != "" {
			out += ", tun_dst " + dst
		}
		if id != "" {
			out += ", tun_id " + id
		}
		// The outer packet's own fate is the underlay's.
		dp = ""
	case dropped(last):
		return p.Prefix + fmt.Sprintf("dropped by %s (%s)", name, where)
	case p.Ask.Question == FromTunnel && outputPort(last) == "LOCAL":
		out = "to LOCAL, the node routes it to the pod"
	case outputPort(last) != "":
		out = "output port " + outputPort(last)
	case slices.Contains(last.Actions, "NORMAL"):
		out = "NORMAL: " + normalResult(last)
		if p.Ask.Learned != "" && strings.HasPrefix(out, "NORMAL: to the learned port") {
			out += " " + p.Ask.Learned
		}
	case dp == "drop":
		out = "dropped"
	default:
		out = "datapath actions " + dp
	}
	if dp == "drop" && !strings.HasPrefix(out, "dropped") {
		out += " (dropped in the datapath)"
	}
	parts = append(parts, fmt.Sprintf("%s (%s, %s)", out, name, where))
	return p.Prefix + strings.Join(parts, ", ")
}

// bracket puts an IPv6 address in brackets, as before a port.
func bracket(a string) string {
	if strings.Contains(a, ":") {
		return "[" + a + "]"
	}
	return a
}

// dropped reports whether the step's flow drops the packet: no actions,
// which ofproto/trace prints as "drop".
func dropped(st Step) bool {
	return len(st.Actions) == 0 || len(st.Actions) == 1 && st.Actions[0] == "drop"
}

// outputPort returns the port of the step's output action, if any.
func outputPort(st Step) string {
	for _, a := range st.Actions {
		if m := output().FindStringSubmatch(a); m != nil {
			return m[1] + m[2]
		}
	}
	return ""
}

// tunnelFields returns the outer destination and the key the packet
// entered the tunnel with: set by the step's actions (set_field, or load
// of an IPv4 address), else as the final flow of the first pass has them
// (an IPv6 tun_dst, loaded in two halves).
func tunnelFields(st Step, final []string) (dst, id string) {
	for _, a := range st.Actions {
		m := tunSet().FindStringSubmatch(a)
		if m == nil {
			continue
		}
		v := m[2]
		switch m[3] {
		case "tun_dst", "tun_ipv6_dst":
			dst = v
		case "NXM_NX_TUN_IPV4_DST[]":
			if n, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32); err == nil {
				dst = netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}).String()
			}
		case "tun_id", "NXM_NX_TUN_ID[]":
			id = v
		}
	}
	if len(final) > 0 {
		for _, f := range strings.Split(final[0], ",") {
			k, v, _ := strings.Cut(f, "=")
			if a, err := netip.ParseAddr(v); err == nil && a.IsUnspecified() {
				continue // the other family's
			}
			switch {
			case dst == "" && (k == "tun_dst" || k == "tun_ipv6_dst"):
				dst = v
			case id == "" && k == "tun_id":
				id = v
			}
		}
	}
	return dst, id
}

// normalResult says what NORMAL did, from ofproto/trace's note under it.
func normalResult(st Step) string {
	for _, a := range st.Actions {
		if n, ok := strings.CutPrefix(a, "-> "); ok {
			switch {
			case strings.Contains(n, "flooding"):
				return "flooded (no learned MAC for the destination)"
			case strings.Contains(n, "forwarding to learned port"):
				return "to the learned port"
			}
			return n
		}
	}
	return "switched"
}

// nameOf names the flow of step st: the declared flow with its cookie,
// table and priority and, when several have them, the same match fields.
func nameOf(st Step, declared []flows.Flow) string {
	c := flows.Cookie(st.Cookie)
	if !c.IsOurs() {
		if st.Cookie == 0 && st.Table == 0 && st.Priority == 0 {
			return "the bridge's own NORMAL flow"
		}
		return fmt.Sprintf("a flow of someone else (cookie 0x%x)", st.Cookie)
	}
	var cands []flows.Flow
	for _, f := range declared {
		if f.Cookie == st.Cookie && f.Table == st.Table && f.Priority == st.Priority {
			cands = append(cands, f)
		}
	}
	if len(cands) == 0 {
		if flows.GroupOf(c) == flows.GroupTombstone {
			return flows.Name(openflow.Flow{Cookie: st.Cookie})
		}
		return fmt.Sprintf("a flow of cookie %s that the records do not declare (stale: run reconcile)", c)
	}
	want := fields(st.Match)
	best, score := cands[0], -1
	for _, f := range cands {
		got := fields(f.Match.String())
		n := 0
		for k := range got {
			if want[k] {
				n++
			}
		}
		if len(got) == len(want) && n == len(want) {
			return flows.Name(f)
		}
		if n > score {
			best, score = f, n
		}
	}
	return flows.Name(best)
}

// fields is the set of a match's comma-separated fields.
func fields(m string) map[string]bool {
	out := map[string]bool{}
	for _, f := range strings.Split(m, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out[f] = true
		}
	}
	return out
}
