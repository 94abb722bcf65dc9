package openflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrPrerequisite says that a match lacks the ethertype or protocol
	// one of its fields needs.
	ErrPrerequisite = errors.New("match field without its prerequisite")
	// ErrInvalidAction says that an action cannot be encoded or OVS would
	// reject it.
	ErrInvalidAction = errors.New("invalid action")
)

// Flow is one OpenFlow flow.
type Flow struct {
	Cookie   uint64
	Table    uint8
	Priority uint16
	// HardTimeout removes the flow after that many seconds (0: never).
	HardTimeout uint16
	Match       Match
	Actions     Actions
}

// String renders the flow as one line of an ovs-ofctl add-flows file:
// "cookie=0x...,table=N,priority=P[,hard_timeout=T],MATCH,actions=ACTIONS".
func (f Flow) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cookie=0x%016x,table=%d,priority=%d,", f.Cookie, f.Table, f.Priority)
	if f.HardTimeout != 0 {
		fmt.Fprintf(&b, "hard_timeout=%d,", f.HardTimeout)
	}
	if m := f.Match.String(); m != "" {
		b.WriteString(m)
		b.WriteByte(',')
	}
	b.WriteString("actions=")
	b.WriteString(f.Actions.String())
	return b.String()
}

// Validate reports what in f OVS would reject or this package cannot encode.
func (f Flow) Validate() error {
	var errs []error
	if f.Table == 0xff {
		errs = append(errs, fmt.Errorf("table 255"))
	}
	if err := f.Match.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := f.Actions.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("flow %q: %w", f, err)
	}
	return nil
}

// Delete removes the flows whose cookie matches Cookie under Mask, in every
// table, and whose match has at least the fields of Match, with its values
// (ovs-ofctl del-flows BRIDGE cookie=V/M[,MATCH]; not strict).
type Delete struct {
	Cookie, Mask uint64
	Match        Match
}

// String renders "cookie=V/M[,MATCH]", the mask -1 when all ones, as
// ovs-ofctl reads it.
func (d Delete) String() string {
	s := "cookie=" + cookieMask(d.Cookie, d.Mask)
	if m := d.Match.String(); m != "" {
		s += "," + m
	}
	return s
}

func cookieMask(v, m uint64) string {
	if m == ^uint64(0) {
		return fmt.Sprintf("0x%016x/-1", v)
	}
	return fmt.Sprintf("0x%016x/0x%016x", v, m)
}

// Mod is one entry of a Bundle: a Flow (added, replacing a flow with the
// same table, priority and match) or a Delete.
type Mod interface {
	// Line renders the entry as a line of an add-flows file ("add FLOW"
	// or "delete cookie=V/M").
	Line() string
	flowMod(b []byte) []byte
}

// Line renders "add " and the flow.
func (f Flow) Line() string { return "add " + f.String() }

// Line renders "delete " and the cookie match.
func (d Delete) Line() string { return "delete " + d.String() }

// Bundle is a list of flow changes applied as one transaction (see Apply).
type Bundle []Mod

// String renders the bundle as the input of `ovs-ofctl --bundle add-flows
// BRIDGE -`: one line per entry.
func (b Bundle) String() string {
	var s strings.Builder
	for _, m := range b {
		s.WriteString(m.Line())
		s.WriteByte('\n')
	}
	return s.String()
}

// OpenFlow 1.4 flow_mod constants.
const (
	ofpfcAdd       = 0
	ofpfcDelete    = 3
	ofpttAll       = 0xff
	ofppAny        = 0xffffffff
	ofpgAny        = 0xffffffff
	ofpNoBuffer    = 0xffffffff
	ofpDefaultPrio = 0x8000
)

func (f Flow) flowMod(b []byte) []byte {
	return flowModMsg(b, f.Cookie, 0, f.Table, ofpfcAdd, f.HardTimeout, f.Priority, f.Match, f.Actions)
}

func (d Delete) flowMod(b []byte) []byte {
	return flowModMsg(b, d.Cookie, d.Mask, ofpttAll, ofpfcDelete, 0, ofpDefaultPrio, d.Match, nil)
}

// flowModMsg appends an OFPT_FLOW_MOD (OpenFlow 1.4 section 7.3.4.1) with
// xid 0, no idle timeout, no flags, no buffer and no out_port/out_group
// filter.
func flowModMsg(b []byte, cookie, mask uint64, table, cmd uint8, hardTimeout, prio uint16, m Match, as Actions) []byte {
	start := len(b)
	b = append(b, version, ofptFlowMod, 0, 0, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, cookie)
	b = binary.BigEndian.AppendUint64(b, mask)
	b = append(b, table, cmd, 0, 0) // idle timeout 0
	b = binary.BigEndian.AppendUint16(b, hardTimeout)
	b = binary.BigEndian.AppendUint16(b, prio)
	b = binary.BigEndian.AppendUint32(b, ofpNoBuffer)
	b = binary.BigEndian.AppendUint32(b, ofppAny)
	b = binary.BigEndian.AppendUint32(b, ofpgAny)
	b = append(b, 0, 0, 0, 0) // flags, importance
	b = appendMatch(b, m)
	b = encodeInstructions(b, as)
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b
}

// appendMatch appends an ofp_match of type OFPMT_OXM, padded to 8 bytes.
func appendMatch(b []byte, m Match) []byte {
	start := len(b)
	b = append(b, 0, 1, 0, 0) // OFPMT_OXM, length
	b = m.Encode(b)
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return pad8(b, start)
}
