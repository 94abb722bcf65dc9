package openflow

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// CTFlush selects the conntrack entries of Zone whose original direction
// goes to Dst (when valid), protocol Proto and destination port DstPort
// (when not 0): what `ovs-ofctl ct-flush BRIDGE zone=Z
// ct_nw_dst=A,ct_nw_proto=P,ct_tp_dst=N` removes. The userspace conntrack
// matches partial tuples.
type CTFlush struct {
	Zone    uint16
	Proto   uint8
	Dst     netip.Addr
	DstPort uint16
}

// Tuple renders the tuple as the ovs-ofctl ct-flush argument after the zone.
func (c CTFlush) Tuple() string {
	s := ""
	if c.Dst.IsValid() {
		if c.Dst.Is4() {
			s = "ct_nw_dst=" + c.Dst.String() + ","
		} else {
			s = "ct_ipv6_dst=" + c.Dst.String() + ","
		}
	}
	s += fmt.Sprintf("ct_nw_proto=%d", c.Proto)
	if c.DstPort != 0 {
		s += fmt.Sprintf(",ct_tp_dst=%d", c.DstPort)
	}
	return s
}

// String renders the ovs-ofctl ct-flush arguments: "zone=Z TUPLE".
func (c CTFlush) String() string { return fmt.Sprintf("zone=%d %s", c.Zone, c.Tuple()) }

// Nicira extension message NXT_CT_FLUSH (include/openflow/nicira-ext.h,
// lib/ofp-ct.c; OVS 3.1 and later) and its properties.
const (
	nxtCTFlush       = 32
	nxtCTOrigTuple   = 0
	nxtCTZoneID      = 2
	nxtCTTupleDst    = 1
	nxtCTTupleDstPrt = 3
)

// encode appends an NXT_CT_FLUSH: struct nx_ct_flush (ip_proto, 7 bytes of
// pad), then properties padded to 8 bytes: the original tuple (nested:
// destination as an IPv6 or IPv4-mapped address, destination port) and the
// zone. xid is the message's.
func (c CTFlush) encode(b []byte, xid uint32) []byte {
	start := len(b)
	b = append(b, header(ofptExperimenter, xid, 0)...)
	b = binary.BigEndian.AppendUint32(b, nxVendor)
	b = binary.BigEndian.AppendUint32(b, nxtCTFlush)
	b = append(b, c.Proto, 0, 0, 0, 0, 0, 0, 0)
	if c.Dst.IsValid() || c.DstPort != 0 {
		tuple := len(b)
		b = append(b, 0, nxtCTOrigTuple, 0, 0, 0, 0, 0, 0) // header, pad to 8
		if c.Dst.IsValid() {
			a := c.Dst.As16() // IPv4 as ::ffff:a.b.c.d
			b = prop(b, nxtCTTupleDst, a[:])
		}
		if c.DstPort != 0 {
			b = prop(b, nxtCTTupleDstPrt, be16(c.DstPort))
		}
		binary.BigEndian.PutUint16(b[tuple+2:], uint16(len(b)-tuple))
	}
	b = prop(b, nxtCTZoneID, be16(c.Zone))
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b
}

// prop appends an OpenFlow property: type, length (without the padding),
// value, padding to 8 bytes.
func prop(b []byte, typ uint16, val []byte) []byte {
	start := len(b)
	b = binary.BigEndian.AppendUint16(b, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(val)))
	return pad8(append(b, val...), start)
}

// FlushConntrack removes the conntrack entries each flush selects, on the
// datapath of the bridge behind target, in one exchange: every NXT_CT_FLUSH
// then a barrier. An ovs-vswitchd before 3.1 refuses the message as unknown
// (ConntrackFlushError.Unsupported).
func FlushConntrack(ctx context.Context, target endpoint.Endpoint, flushes ...CTFlush) error {
	if len(flushes) == 0 {
		return nil
	}
	return session(ctx, target, "flushing conntrack", func(s *conn) error {
		return s.flush(hello(), 1, flushes)
	})
}

// flush sends, after prefix (a HELLO on a new connection), one NXT_CT_FLUSH
// per entry with xids from first on, then a barrier, and returns the errors
// of the entries.
func (s *conn) flush(prefix []byte, first uint32, flushes []CTFlush) error {
	if len(flushes) == 0 {
		return nil
	}
	b := prefix
	for i, f := range flushes {
		b = f.encode(b, first+uint32(i))
	}
	barrier := first + uint32(len(flushes))
	b = append(b, header(ofptBarrierReq, barrier, 8)...)
	if err := s.send(b); err != nil {
		return err
	}
	if prefix != nil {
		if err := s.hello(); err != nil {
			return err
		}
	}
	errs, err := s.until(barrier, ofptBarrierReply, func(xid uint32) string {
		if xid >= first && xid < barrier {
			return "ct-flush " + flushes[xid-first].String()
		}
		return fmt.Sprintf("xid %d", xid)
	})
	if err != nil || len(errs) == 0 {
		return err
	}
	return &ConntrackFlushError{Errs: errs}
}
