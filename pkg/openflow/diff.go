package openflow

import (
	"fmt"
	"slices"
	"strings"
)

// DiffError lists how the flows installed differ from the flows wanted.
type DiffError struct {
	Missing []Flow    // wanted, not installed
	Extra   []Flow    // installed, not wanted
	Changed [][2]Flow // same table, priority and match: {wanted, installed}
}

func (e *DiffError) Error() string {
	var lines []string
	for _, f := range e.Missing {
		lines = append(lines, "-"+f.String())
	}
	for _, f := range e.Extra {
		lines = append(lines, "+"+f.String())
	}
	for _, p := range e.Changed {
		lines = append(lines, "-"+p[0].String(), "+"+p[1].String())
	}
	return fmt.Sprintf("installed flows differ from the expected ones (- expected, + installed):\n%s", strings.Join(lines, "\n"))
}

// flowKey identifies a flow in a table as OpenFlow does: a flow added with
// the same table, priority and match replaces it.
type flowKey struct {
	table uint8
	prio  uint16
	match Match
}

// Diff compares the flows wanted with the flows installed (decoded by Dump)
// the way `ovs-ofctl diff-flows` does: both sides become sets keyed by
// table, priority and match; a key on one side only is a missing or an
// extra flow, and a key on both whose cookie, hard timeout or actions
// differ is a changed flow. Every one of the three is reported, so it is as
// strict as diff-flows.
//
// Both sides are canonical values, not text: Match is a comparable value
// whose builders and decoder normalise what OVS normalises (a prefix is
// masked, an all-ones mask is an exact match, a zero-length prefix or a
// zero mask is no field, vlan_vid/vlan_pcp fold into vlan_tci, the
// prerequisites eth_type and ip_proto are fields like any other), and
// actions compare by their rendering, which is a function of their decoded
// value. It returns nil or a *DiffError.
func Diff(want, got []Flow) error {
	// A later flow with the same key replaces an earlier one, as in a bundle.
	w := make(map[flowKey]Flow, len(want))
	var order []flowKey
	for _, f := range want {
		k := flowKey{f.Table, f.Priority, f.Match}
		if _, ok := w[k]; !ok {
			order = append(order, k)
		}
		w[k] = f
	}
	g := make(map[flowKey]Flow, len(got))
	e := &DiffError{}
	for _, f := range got {
		k := flowKey{f.Table, f.Priority, f.Match}
		g[k] = f
		if _, ok := w[k]; !ok {
			e.Extra = append(e.Extra, f)
		}
	}
	for _, k := range order {
		f := w[k]
		h, ok := g[k]
		switch {
		case !ok:
			e.Missing = append(e.Missing, f)
		case h.Cookie != f.Cookie || h.HardTimeout != f.HardTimeout || h.Actions.String() != f.Actions.String():
			e.Changed = append(e.Changed, [2]Flow{f, h})
		}
	}
	if len(e.Missing)+len(e.Extra)+len(e.Changed) == 0 {
		return nil
	}
	slices.SortFunc(e.Extra, func(a, b Flow) int { return strings.Compare(a.String(), b.String()) })
	return e
}
