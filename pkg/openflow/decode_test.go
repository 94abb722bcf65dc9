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
