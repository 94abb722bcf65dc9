package openflow

import (
	"context"
	"encoding/binary"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// FlowStats is a dumped flow with the counters ovs-vswitchd keeps for it:
// what `ovs-ofctl dump-flows` prints as n_packets and n_bytes.
type FlowStats struct {
	Flow
	Packets, Bytes uint64
}

// DumpStats is Dump with the counters of each flow (one OFPMP_FLOW request;
// the counters are those of ofp_flow_stats).
func DumpStats(ctx context.Context, target endpoint.Endpoint, cookie, mask uint64) ([]FlowStats, error) {
	var out []FlowStats
	err := dump(ctx, target, cookie, mask, func(e []byte, f Flow) {
		out = append(out, FlowStats{Flow: f, Packets: binary.BigEndian.Uint64(e[32:]), Bytes: binary.BigEndian.Uint64(e[40:])})
	})
	return out, err
}

// Values read back from a match, for the code that names flows
// (pkg/flows): each returns the field and whether the match has it.

// EthTypeOf returns dl_type.
func (m Match) EthTypeOf() (uint16, bool) { return m.ethType, m.has&hasEthType != 0 }

// IPProtoOf returns nw_proto.
func (m Match) IPProtoOf() (uint8, bool) { return m.ipProto, m.has&hasIPProto != 0 }

// ICMPTypeOf returns icmp_type.
func (m Match) ICMPTypeOf() (uint8, bool) { return m.icmpType, m.has&hasICMPType != 0 }

// TPSrcOf returns tp_src.
func (m Match) TPSrcOf() (uint16, bool) { return m.tpSrc, m.has&hasTPSrc != 0 }

// TPDstOf returns tp_dst.
func (m Match) TPDstOf() (uint16, bool) { return m.tpDst, m.has&hasTPDst != 0 }

// CTTPSrcOf returns ct_tp_src.
func (m Match) CTTPSrcOf() (uint16, bool) { return m.ctTPSrc, m.has&hasCTTPSrc != 0 }

// CTTPDstOf returns ct_tp_dst.
func (m Match) CTTPDstOf() (uint16, bool) { return m.ctTPDst, m.has&hasCTTPDst != 0 }

// CTStateOf returns ct_state's value and mask.
func (m Match) CTStateOf() (value, mask uint32, ok bool) {
	return m.ctState.v, m.ctState.m, m.has&hasCTState != 0
}

// VLANTCIOf returns vlan_tci's value and mask.
func (m Match) VLANTCIOf() (value, mask uint16, ok bool) {
	return m.vlanTCI.v, m.vlanTCI.m, m.has&hasVLAN != 0
}
