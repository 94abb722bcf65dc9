package openflow

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// flowStats renders f as one ofp_flow_stats entry of an OFPMP_FLOW reply.
func flowStats(f Flow) []byte {
	b := make([]byte, 48)
	b[2] = f.Table
	binary.BigEndian.PutUint16(b[12:], f.Priority)
	binary.BigEndian.PutUint16(b[16:], f.HardTimeout)
	binary.BigEndian.PutUint64(b[24:], f.Cookie)
	b = appendMatch(b, f.Match)
	b = encodeInstructions(b, f.Actions)
	binary.BigEndian.PutUint16(b, uint16(len(b)))
	return b
}

func TestDecodeFlowStats(t *testing.T) {
	want := []Flow{
		{Cookie: 1, Table: 2, Priority: 3, HardTimeout: 4, Match: Match{}.InPort(5), Actions: Actions{Normal}},
		{Cookie: 6, Table: 7, Priority: 8, Match: Match{}.Proto(EthIPv6, ProtoUDP).IPDst(Host(netip.MustParseAddr("2001:db8::1"))).TPDst(53),
			Actions: Actions{CT{Commit: true, Zone: 9, NAT: &NAT{Dst: true, Addr: netip.MustParseAddr("2001:db8::2"), Port: 5353}, Table: Table(10),
				Exec: Actions{Move{FieldEthSrc.All(), FieldCTLabel.Bits(0, 47)}}}, GotoTable{11}}},
		{Cookie: 12, Match: Match{}.InPort(PortLocal).EthType(EthIPv4).CTState(CTTrk|CTRpl, CTTrk|CTRpl).CTZone(13).CTMark(1, 1),
			Actions: Actions{Move{FieldCTLabel.Bits(0, 47), FieldEthDst.All()}, Output{PortLocal}}},
	}
	var body []byte
	for _, f := range want {
		body = append(body, flowStats(f)...)
	}
	got, err := decodeFlowStats(body)
	if err != nil || len(got) != len(want) {
		t.Fatalf("got %v, %v", got, err)
	}
	for i := range want {
		if got[i].String() != want[i].String() || got[i].Match != want[i].Match {
			t.Errorf("got %s, want %s", got[i], want[i])
		}
	}
	if _, err := decodeFlowStats(body[:len(body)-1]); err == nil {
		t.Errorf("truncated reply: got no error")
	}
}

// rawFlowStats is one ofp_flow_stats entry (match-all) whose
// apply_actions instruction holds the action bytes as given.
func rawFlowStats(actions []byte) []byte {
	b := flowStats(Flow{})
	b = binary.BigEndian.AppendUint16(b, ofpitApply)
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(actions)))
	b = append(append(b, 0, 0, 0, 0), actions...)
	binary.BigEndian.PutUint16(b, uint16(len(b)))
	return b
}

// rawCT is a ct(zone=1) action whose nested actions are the bytes given.
func rawCT(nested ...byte) []byte {
	b := nxAction(nil, nxastCT, uint16(24+len(nested)))
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 1, nxCTRecircNone, 0, 0, 0, 0, 0)
	return append(b, nested...)
}

// TestDecodeMalformedCT: nested actions of ct() too short for what their
// header says are undecodable flows, never a panic (a dump of a bridge
// where someone else wrote such a flow must still succeed).
func TestDecodeMalformedCT(t *testing.T) {
	nx8 := []byte{0xff, 0xff, 0, 8, 0, 0, 0x23, 0x20} // Nicira action of 8 bytes: no room for its subtype
	nat8 := []byte{0xff, 0xff, 0, 8, 0, 0, 0x23, 0x20}
	nat16 := nxAction(nil, nxastNAT, 16)
	nat16 = append(nat16, 0, 0, 0, 0, 0, 0) // pad, flags 0, range_present 0: ct(nat)
	for _, tt := range []struct {
		name   string
		nested []byte
		ok     bool // decodes (else: one Undecodable flow)
	}{
		{"8-byte Nicira action followed by more bytes", append(append([]byte{}, nx8...), nx8...), false},
		{"8-byte Nicira action followed by a nat", append(append([]byte{}, nx8...), nat16...), false},
		{"8-byte Nicira action alone", nx8, false},
		{"8-byte nat alone", nat8, false},
		{"nat then an 8-byte Nicira action", append(append([]byte{}, nat16...), nx8...), false},
		{"nat alone", nat16, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fl, err := decodeFlowStats(rawFlowStats(rawCT(tt.nested...)))
			if err != nil || len(fl) != 1 {
				t.Fatalf("got %v, %v, want one flow", fl, err)
			}
			_, undecodable := fl[0].Actions[0].(Undecodable)
			if undecodable == tt.ok {
				t.Errorf("got %s, want decodable %v", fl[0], tt.ok)
			}
		})
	}
}

// FuzzDecodeFlowStats feeds arbitrary replies to the decoder: it must not
// panic, and what it decodes must encode and decode to itself.
func FuzzDecodeFlowStats(f *testing.F) {
	f.Add(flowStats(Flow{Cookie: 1, Match: Match{}.Proto(EthIPv4, ProtoTCP).TPDst(80).VLANTCI(0, 0x1000).Reg(1, 1, 1),
		Actions: Actions{Load{1, Reg(1).Bit(0)}, Resubmit{0}, OutputReg{Reg(0).Bits(0, 15)}, SetField{FieldEthDst, MAC{2}}}}))
	f.Add(flowStats(Flow{Match: Match{}.Proto(EthIPv6, ProtoICMPv6).ICMPType(135).ICMPCode(0).NDTarget(netip.IPv6Loopback()).NDSLL(MAC{1}).CTState(CTTrk, CTTrk).CTZone(3)}))
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, err := decodeFlowStats(b)
		if err != nil {
			return
		}
		for _, g := range fl {
			undecodable := false
			for _, a := range g.Actions {
				if _, ok := a.(Undecodable); ok {
					undecodable = true
				}
			}
			if undecodable {
				continue
			}
			again, err := decodeFlowStats(flowStats(g))
			if err != nil || len(again) != 1 || again[0].String() != g.String() || again[0].Match != g.Match {
				t.Fatalf("%s: re-decoded as %v, %v", g, again, err)
			}
		}
	})
}

// FuzzDecodeActions feeds arbitrary action lists, inside a well-formed
// flow stats entry, to the reply decoder: the lengths around them are
// right, so every mutation reaches the action decoders (ct() and what it
// nests included), which must not panic; what decodes must encode and
// decode to itself.
func FuzzDecodeActions(f *testing.F) {
	for _, as := range []Actions{
		{Normal},
		{Load{1, Reg(1).Bit(0)}, Resubmit{0}, OutputReg{Reg(0).Bits(0, 15)}, SetField{FieldEthDst, MAC{2}}, Output{3}},
		{CT{Commit: true, Zone: 64000, NAT: &NAT{Dst: true, Addr: netip.MustParseAddr("192.0.2.2"), Port: 80}, Table: Table(40),
			Exec: Actions{Move{FieldEthSrc.All(), FieldCTLabel.Bits(0, 47)}, Load{1, FieldCTLabel.Bits(48, 63)}}}},
		{CT{Zone: 64001, NAT: &NAT{}, Table: Table(43)}},
		{CT{Zone: 1, Exec: Actions{Load{1, FieldCTLabel.Bits(0, 15)}}}},
		{CT{Commit: true, Zone: 64002, NAT: &NAT{Src: true, Addr: netip.MustParseAddr("2001:db8::1")}}},
	} {
		var b []byte
		for _, a := range as {
			b = a.encode(b)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, actions []byte) {
		if len(actions) > 0xff00 {
			return // beyond the 16-bit length of a flow stats entry
		}
		fl, err := decodeFlowStats(rawFlowStats(actions))
		if err != nil || len(fl) != 1 {
			t.Fatalf("got %v, %v, want one flow", fl, err)
		}
		g := fl[0]
		if len(g.Actions) == 1 {
			if _, ok := g.Actions[0].(Undecodable); ok {
				return
			}
		}
		again, err := decodeFlowStats(flowStats(g))
		if err != nil || len(again) != 1 || again[0].String() != g.String() {
			t.Fatalf("%s: re-decoded as %v, %v", g, again, err)
		}
	})
}

// TestDiff covers what the real-OVS test cannot produce: a changed cookie
// and hard timeout, and duplicates among the wanted flows.
func TestDiff(t *testing.T) {
	m := Match{}.InPort(1)
	base := Flow{Cookie: 1, Priority: 5, Match: m, Actions: Actions{Normal}}
	cookie, timeout := base, base
	cookie.Cookie = 2
	timeout.HardTimeout = 10
	for _, tt := range []struct {
		name      string
		want, got []Flow
		changed   int
	}{
		{"equal, wanted twice", []Flow{base, base}, []Flow{base}, 0},
		{"cookie", []Flow{base}, []Flow{cookie}, 1},
		{"hard timeout", []Flow{base}, []Flow{timeout}, 1},
	} {
		err := Diff(tt.want, tt.got)
		d, _ := err.(*DiffError)
		switch {
		case tt.changed == 0 && err != nil:
			t.Errorf("%s: got %v, want nil", tt.name, err)
		case tt.changed > 0 && (d == nil || len(d.Changed) != tt.changed || len(d.Missing)+len(d.Extra) != 0):
			t.Errorf("%s: got %v, want %d changed", tt.name, err, tt.changed)
		}
	}
}
