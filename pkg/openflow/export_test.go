package openflow

// Internals for the tests of package openflow_test, which import pkg/flows
// (itself importing this package) to build the pipeline's corpus.

// FlowMod returns the OFPT_FLOW_MOD of m, with xid 1 as ovs-ofctl
// parse-flow prints it.
func FlowMod(m Mod) []byte {
	b := m.flowMod(nil)
	b[7] = 1
	return b
}

// CTFlushMsg returns the NXT_CT_FLUSH of c with xid 1.
func CTFlushMsg(c CTFlush) []byte { return c.encode(nil, 1) }

// RoundTrip encodes f's match and actions and decodes them again.
func RoundTrip(f Flow) (Match, Actions, error) {
	m, rest, err := decodeMatch(appendMatch(nil, f.Match))
	if err != nil {
		return m, nil, err
	}
	if len(rest) != 0 {
		return m, nil, decodeErr("%d bytes after the match", len(rest))
	}
	as, err := decodeInstructions(encodeInstructions(nil, f.Actions))
	return m, as, err
}

const MaxErrors = maxErrors

// DecodeError decodes the body of an OFPT_ERROR.
func DecodeError(body []byte, what string) error { return decodeError(body, what) }

// DecodeFlowMod decodes the match and instructions of an OFPT_FLOW_MOD, as
// Dump decodes those of a flow stats entry.
func DecodeFlowMod(fm []byte) (Match, Actions, error) {
	m, rest, err := decodeMatch(fm[48:]) // header and the fixed fields
	if err != nil {
		return m, nil, err
	}
	as, err := decodeInstructions(rest)
	return m, as, err
}

// HandFlowMod is FlowMod through this package's encoder in every build (the
// bytes ovs-ofctl and OVS send): what the decode benchmarks read.
func HandFlowMod(m Mod) []byte {
	b := m.flowMod(nil)
	b[7] = 1
	return b
}

// HoldFirstCommit makes each Apply wait, on its first try, before the
// commit until ovs-vswitchd sends something unasked (with a short
// bundle-idle-timeout: that the bundle expired), and counts the tries.
func HoldFirstCommit(tries *int) (restore func()) {
	beforeCommit = func(s *conn, try int) {
		*tries++
		if try == 0 {
			_, _ = s.r.Peek(8)
		}
	}
	return func() { beforeCommit = nil }
}
