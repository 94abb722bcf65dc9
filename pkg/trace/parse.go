package trace

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Step is one flow (or table miss) a pass of the trace went through.
type Step struct {
	Pass     int // 0 for the first pass, one more per recirculation
	Table    uint8
	Priority uint16
	Cookie   uint64
	Match    string // as ofproto/trace prints it
	NoMatch  bool   // the table had no matching flow
	Actions  []string
}

// Answer is ofproto/trace's answer, read.
type Answer struct {
	Steps []Step
	// Datapath holds the datapath actions of each pass, Final the flow at
	// the end of each (the fields the actions set: a tunnel's tun_dst and
	// tun_id).
	Datapath []string
	Final    []string
}

// stepLine is compiled on first use: ovs-portmap's CNI commands, which
// link this package, never pay for it.
var stepLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\s*(\d+)\. (?:(.*?),? ?priority (\d+)(?:, cookie (0x[0-9a-f]+))?|(No match\.?))\s*$`)
})

// Parse reads ofproto/trace's text.
func Parse(out string) Answer {
	var r Answer
	pass := 0
	cur := -1 // index of the current step
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "recirc(") {
			pass++
			cur = -1
			continue
		}
		if s, ok := strings.CutPrefix(line, "Datapath actions: "); ok {
			r.Datapath = append(r.Datapath, strings.TrimSpace(s))
			cur = -1
			continue
		}
		if s, ok := strings.CutPrefix(line, "Final flow: "); ok {
			r.Final = append(r.Final, strings.TrimSpace(s))
			cur = -1
			continue
		}
		if m := stepLine().FindStringSubmatch(line); m != nil {
			t, _ := strconv.Atoi(m[1])
			st := Step{Pass: pass, Table: uint8(t)}
			if m[5] != "" {
				st.NoMatch = true
			} else {
				p, _ := strconv.Atoi(m[3])
				st.Priority = uint16(p)
				st.Match = strings.TrimSuffix(m[2], ",")
				if m[4] != "" {
					st.Cookie, _ = strconv.ParseUint(m[4][2:], 16, 64)
				}
			}
			r.Steps = append(r.Steps, st)
			cur = len(r.Steps) - 1
			continue
		}
		if cur >= 0 && strings.HasPrefix(line, "    ") {
			if a := strings.TrimSpace(line); a != "" {
				r.Steps[cur].Actions = append(r.Steps[cur].Actions, a)
			}
			continue
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "Megaflow") {
			cur = -1
		}
	}
	return r
}
