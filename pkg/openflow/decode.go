package openflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// ErrDecode says that a message from ovs-vswitchd holds something this
// package does not decode (a field or action the pipeline never writes).
var ErrDecode = errors.New("cannot decode")

// Undecodable stands for the match and actions of a dumped flow that this
// package does not decode (ErrDecode): Dump still returns the flow, with its
// cookie, table and priority, so that a dump never fails on a flow someone
// else wrote; it renders as "undecodable(REASON)" and does not encode.
type Undecodable struct{ Reason string }

func (u Undecodable) String() string       { return "undecodable(" + u.Reason + ")" }
func (Undecodable) encode(b []byte) []byte { return b }

func decodeErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrDecode, fmt.Sprintf(format, a...))
}

// decodeFlowStats decodes the body of an OFPMP_FLOW reply (after the
// multipart header): ofp_flow_stats entries.
func decodeFlowStats(body []byte) ([]Flow, error) {
	var out []Flow
	if err := eachFlowStats(body, func(_ []byte, f Flow) { out = append(out, f) }); err != nil {
		return nil, err
	}
	return out, nil
}

// eachFlowStats decodes the entries of an OFPMP_FLOW reply's body and
// passes each to each with its bytes, once all of them decoded.
func eachFlowStats(body []byte, each func(entry []byte, f Flow)) error {
	type entry struct {
		raw []byte
		f   Flow
	}
	var out []entry
	for len(body) > 0 {
		if len(body) < 56 {
			return decodeErr("flow stats of %d bytes", len(body))
		}
		n := int(binary.BigEndian.Uint16(body))
		if n < 56 || n > len(body) {
			return decodeErr("flow stats length %d of %d", n, len(body))
		}
		e := body[:n]
		body = body[n:]
		f := Flow{
			Table:       e[2],
			Priority:    binary.BigEndian.Uint16(e[12:]),
			HardTimeout: binary.BigEndian.Uint16(e[16:]),
			Cookie:      binary.BigEndian.Uint64(e[24:]),
		}
		m, rest, err := decodeMatch(e[48:])
		if err == nil {
			f.Match = m
			f.Actions, err = decodeInstructions(rest)
		}
		if err != nil {
			// Not written by this package (someone else used the cookie):
			// kept, so that its cookie counts and it differs from any flow
			// that can be wanted.
			f.Match, f.Actions = Match{}, Actions{Undecodable{err.Error()}}
		}
		out = append(out, entry{e, f})
	}
	for _, e := range out {
		each(e.raw, e.f)
	}
	return nil
}

// decodeMatch decodes an ofp_match (OXM) and returns what follows its
// padding.
func decodeMatch(b []byte) (Match, []byte, error) {
	var m Match
	if len(b) < 4 || binary.BigEndian.Uint16(b) != 1 {
		return m, nil, decodeErr("match other than OXM")
	}
	n := int(binary.BigEndian.Uint16(b[2:]))
	padded := (n + 7) / 8 * 8
	if n < 4 || padded > len(b) {
		return m, nil, decodeErr("match length %d", n)
	}
	oxms, rest := b[4:n], b[padded:]
	// Prerequisites first: the meaning of tp_*, icmp_* and the address
	// fields depends on them.
	type tlv struct {
		class     uint16
		field     uint8
		val, mask []byte
	}
	var tlvs []tlv
	for len(oxms) > 0 {
		if len(oxms) < 4 {
			return m, nil, decodeErr("truncated OXM")
		}
		h := binary.BigEndian.Uint32(oxms)
		l := int(h & 0xff)
		if 4+l > len(oxms) {
			return m, nil, decodeErr("OXM %#x of length %d", h, l)
		}
		t := tlv{class: uint16(h >> 16), field: uint8(h >> 9 & 0x7f), val: oxms[4 : 4+l]}
		if h&0x100 != 0 {
			t.val, t.mask = t.val[:l/2], t.val[l/2:]
		}
		oxms = oxms[4+l:]
		if t.class == classBasic && t.field == oxmEthType && len(t.val) == 2 {
			m = m.EthType(binary.BigEndian.Uint16(t.val))
			continue
		}
		if t.class == classBasic && t.field == oxmIPProto && len(t.val) == 1 {
			m = m.IPProto(t.val[0])
			continue
		}
		tlvs = append(tlvs, t)
	}
	var vlanVID, vlanPCP *masked16
	for _, t := range tlvs {
		if err := m.decodeField(t.class, t.field, t.val, t.mask, &vlanVID, &vlanPCP); err != nil {
			return m, nil, err
		}
	}
	if vlanVID != nil || vlanPCP != nil {
		// OpenFlow 1.2+ has vlan_vid (with OFPVID_PRESENT 0x1000, the
		// CFI bit's place in the TCI) and vlan_pcp where NXM has vlan_tci:
		// fold them back into the one field ovs-ofctl shows.
		var v, mk uint16
		if vlanVID != nil {
			v, mk = vlanVID.v&0x1fff, vlanVID.m&0x1fff
		}
		if vlanPCP != nil {
			v, mk = v|vlanPCP.v<<13, mk|vlanPCP.m<<13|0x1000
			v |= 0x1000
		}
		m = m.VLANTCI(v, mk)
	}
	return m, rest, nil
}

func (m *Match) decodeField(class uint16, field uint8, val, mask []byte, vid, pcp **masked16) error {
	bad := func() error { return decodeErr("OXM class %#x field %d of %d bytes", class, field, len(val)) }
	if mask != nil && len(mask) != len(val) {
		return bad()
	}
	mac := func() (MAC, error) {
		var a MAC
		if len(val) != 6 || mask != nil {
			return a, bad()
		}
		copy(a[:], val)
		return a, nil
	}
	pfx := func() (netip.Prefix, error) {
		a, ok := netip.AddrFromSlice(val)
		if !ok {
			return netip.Prefix{}, bad()
		}
		bits := a.BitLen()
		if mask != nil {
			bits = 0
			for _, c := range mask {
				for i := 7; i >= 0 && c&(1<<i) != 0; i-- {
					bits++
				}
			}
		}
		return netip.PrefixFrom(a, bits), nil
	}
	u := func() uint64 {
		var n uint64
		for _, c := range val {
			n = n<<8 | uint64(c)
		}
		return n
	}
	um := func() uint64 {
		if mask == nil {
			return 1<<(8*len(val)) - 1
		}
		var n uint64
		for _, c := range mask {
			n = n<<8 | uint64(c)
		}
		return n
	}
	var err error
	var a MAC
	switch {
	case class == classBasic && field == oxmInPort && len(val) == 4 && mask == nil:
		*m = m.InPort(uint32(u()))
	case class == classNXM0 && field == 0 && len(val) == 2 && mask == nil: // NXM_OF_IN_PORT
		*m = m.InPort(uint32(u()))
	case class == classNXM1 && field < 16 && len(val) == 4:
		*m = m.Reg(int(field), uint32(u()), uint32(um()))
	case class == classNXM1 && (field == nxmTunIPv4Src && len(val) == 4 || field == nxmTunIPv6Src && len(val) == 16) && mask == nil:
		a, _ := netip.AddrFromSlice(val)
		*m = m.TunSrc(a)
	case (class == classNXM1 && field == nxmTunID || class == classBasic && field == oxmTunnelID) && len(val) == 8 && mask == nil:
		*m = m.TunID(u())
	case class == classNXM0 && field == nxmVLANTCI && len(val) == 2:
		*m = m.VLANTCI(uint16(u()), uint16(um()))
	case class == classBasic && field == oxmVLANVID && len(val) == 2:
		*vid = &masked16{uint16(u()), uint16(um())}
	case class == classBasic && field == oxmVLANPCP && len(val) == 1:
		*pcp = &masked16{uint16(u()), uint16(um())}
	case class == classBasic && field == oxmEthDst, class == classNXM0 && field == 1:
		a, err = mac()
		*m = m.EthDst(a)
	case class == classBasic && field == oxmEthSrc, class == classNXM0 && field == 2:
		a, err = mac()
		*m = m.EthSrc(a)
	case class == classNXM1 && field == nxmCTState && len(val) == 4:
		*m = m.CTState(uint32(u()), uint32(um()))
	case class == classNXM1 && field == nxmCTZone && len(val) == 2 && mask == nil:
		*m = m.CTZone(uint16(u()))
	case class == classNXM1 && field == nxmCTMark && len(val) == 4:
		*m = m.CTMark(uint32(u()), uint32(um()))
	case class == classNXM1 && field == nxmIPFrag && len(val) == 1:
		*m = m.IPFrag(uint8(u()), uint8(um()))
	case class == classNXM1 && field == nxmCTNWProto && len(val) == 1 && mask == nil:
		*m = m.CTNWProto(val[0])
	case class == classNXM1 && field == nxmCTTPSrc && len(val) == 2 && mask == nil:
		*m = m.CTTPSrc(uint16(u()))
	case class == classNXM1 && field == nxmCTTPDst && len(val) == 2 && mask == nil:
		*m = m.CTTPDst(uint16(u()))
	case class == classBasic && (field == oxmIPv4Src || field == oxmIPv6Src) && (len(val) == 4 || len(val) == 16):
		p, e := pfx()
		*m, err = m.IPSrc(p), e
	case class == classBasic && (field == oxmIPv4Dst || field == oxmIPv6Dst) && (len(val) == 4 || len(val) == 16):
		p, e := pfx()
		*m, err = m.IPDst(p), e
	case class == classBasic && field == oxmARPSPA && len(val) == 4:
		p, e := pfx()
		*m, err = m.ARPSPA(p), e
	case class == classBasic && field == oxmARPTPA && len(val) == 4:
		p, e := pfx()
		*m, err = m.ARPTPA(p), e
	case class == classBasic && field == oxmARPSHA:
		a, err = mac()
		*m = m.ARPSHA(a)
	case class == classBasic && field == oxmARPTHA:
		a, err = mac()
		*m = m.ARPTHA(a)
	case class == classBasic && field >= oxmTCPSrc && field <= oxmSCTPSrc+1 && len(val) == 2 && mask == nil:
		if base := l4Base(m.ipProto); field == base {
			*m = m.TPSrc(uint16(u()))
		} else if field == base+1 {
			*m = m.TPDst(uint16(u()))
		} else {
			return bad()
		}
	case class == classBasic && (field == oxmICMPv4 || field == oxmICMPv6) && len(val) == 1 && mask == nil:
		*m = m.ICMPType(val[0])
	case class == classBasic && (field == oxmICMPv4+1 || field == oxmICMPv6+1) && len(val) == 1 && mask == nil:
		*m = m.ICMPCode(val[0])
	case class == classBasic && field == oxmNDTarget && len(val) == 16 && mask == nil:
		*m = m.NDTarget(netip.AddrFrom16([16]byte(val)))
	case class == classBasic && field == oxmNDSLL:
		a, err = mac()
		*m = m.NDSLL(a)
	case class == classBasic && field == oxmNDTLL:
		a, err = mac()
		*m = m.NDTLL(a)
	default:
		return bad()
	}
	return err
}

// decodeInstructions decodes apply_actions and goto_table instructions into
// Actions (a goto_table last).
func decodeInstructions(b []byte) (Actions, error) {
	var out Actions
	var gotoTable *GotoTable
	for len(b) > 0 {
		typ, in, rest, err := nextTLV(b, 8, 1, "instruction")
		if err != nil {
			return nil, err
		}
		switch typ {
		case ofpitApply:
			as, err := decodeActions(in[8:], false)
			if err != nil {
				return nil, err
			}
			out = append(out, as...)
		case ofpitGotoTable:
			gotoTable = &GotoTable{in[4]}
		case ofpitMeter:
			out = append(Actions{Meter{binary.BigEndian.Uint32(in[4:])}}, out...)
		default:
			return nil, decodeErr("instruction type %d", typ)
		}
		b = rest
	}
	if gotoTable != nil {
		out = append(out, *gotoTable)
	}
	return out, nil
}

func decodeActions(b []byte, inCT bool) (Actions, error) {
	var out Actions
	for len(b) > 0 {
		typ, a, rest, err := nextTLV(b, 8, 8, "action")
		if err != nil {
			return nil, err
		}
		as, err := decodeAction(typ, a)
		if err != nil {
			return nil, err
		}
		out = append(out, as...)
		b = rest
	}
	return out, nil
}

// nextTLV splits the first instruction or action (16-bit type, then 16-bit
// length of the whole entry, a multiple of align) off b.
func nextTLV(b []byte, min, align int, what string) (typ uint16, entry, rest []byte, err error) {
	if len(b) < min {
		return 0, nil, nil, decodeErr("truncated %s", what)
	}
	typ, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
	if n < 8 || n%align != 0 || n > len(b) {
		return 0, nil, nil, decodeErr("%s length %d", what, n)
	}
	return typ, b[:n], b[n:], nil
}

func subfield(hdr uint32, ofs, nbits uint16) (Subfield, error) {
	f, ok := fieldOf(hdr)
	s := Subfield{f, ofs, nbits}
	if !ok || !s.valid() {
		return s, decodeErr("NXM field %#x[%d+%d]", hdr, ofs, nbits)
	}
	return s, nil
}

func decodeAction(typ uint16, a []byte) (Actions, error) {
	be16 := func(i int) uint16 { return binary.BigEndian.Uint16(a[i:]) }
	be32 := func(i int) uint32 { return binary.BigEndian.Uint32(a[i:]) }
	// ofsNbits is the subfield of a reg_load or output_reg: ofs_nbits at
	// 10, the field's header at 12.
	ofsNbits := func() (Subfield, error) { on := be16(10); return subfield(be32(12), on>>6, on&0x3f+1) }
	switch typ {
	case ofpatOutput:
		if len(a) < 16 {
			return nil, decodeErr("output of %d bytes", len(a))
		}
		return Actions{Output{be32(4)}}, nil
	case ofpatSetField:
		if len(a) < 8 {
			return nil, decodeErr("set_field of %d bytes", len(a))
		}
		h := be32(4)
		l := int(h & 0xff)
		if 8+l > len(a) || h&0x100 != 0 {
			return nil, decodeErr("set_field OXM %#x", h)
		}
		val := a[8 : 8+l]
		class, field := uint16(h>>16), uint8(h>>9&0x7f)
		if class == classBasic && (field == oxmEthDst || field == oxmEthSrc) && l == 6 {
			f := FieldEthDst
			if field == oxmEthSrc {
				f = FieldEthSrc
			}
			return Actions{SetField{f, MAC(val)}}, nil
		}
		return nil, decodeErr("set_field of OXM %#x", h)
	case ofpatExp:
	default:
		return nil, decodeErr("action type %d", typ)
	}
	if len(a) < 10 || be32(4) != nxVendor {
		return nil, decodeErr("experimenter action %#x", be32(4))
	}
	switch sub := be16(8); sub {
	case nxastRegMove:
		if len(a) < 24 {
			break
		}
		nbits, sofs, dofs := be16(10), be16(12), be16(14)
		src, err := subfield(be32(16), sofs, nbits)
		if err != nil {
			return nil, err
		}
		dst, err := subfield(be32(20), dofs, nbits)
		if err != nil {
			return nil, err
		}
		return Actions{Move{src, dst}}, nil
	case nxastRegLoad:
		if len(a) < 24 {
			break
		}
		dst, err := ofsNbits()
		if err != nil {
			return nil, err
		}
		return Actions{Load{binary.BigEndian.Uint64(a[16:]), dst}}, nil
	case nxastOutputReg:
		if len(a) < 24 {
			break
		}
		src, err := ofsNbits()
		if err != nil {
			return nil, err
		}
		return Actions{OutputReg{src}}, nil
	case nxastResubmitTbl:
		if len(a) < 16 || be16(10) != ofp10InPort {
			break
		}
		return Actions{Resubmit{a[12]}}, nil
	case nxastCT:
		if len(a) < 24 {
			break
		}
		c := CT{Commit: be16(10)&nxCTCommit != 0, Zone: be16(16)}
		if be16(10)&^nxCTCommit != 0 || be32(12) != 0 || be16(22) != 0 {
			return nil, decodeErr("ct with flags %#x, zone_src %#x or alg %d", be16(10), be32(12), be16(22))
		}
		if a[18] != nxCTRecircNone {
			c.Table = Table(a[18])
		}
		nested, err := decodeNested(a[24:], &c)
		if err != nil {
			return nil, err
		}
		c.Exec = nested
		return Actions{c}, nil
	default:
		return nil, decodeErr("Nicira action %d", sub)
	}
	return nil, decodeErr("Nicira action %d of %d bytes", be16(8), len(a))
}

// decodeNested decodes the actions inside ct(): nat into c.NAT, the rest
// (exec) returned.
func decodeNested(b []byte, c *CT) (Actions, error) {
	var exec Actions
	for len(b) > 0 {
		// The same framing as any action list: an entry may be as short as
		// 8 bytes, so look at a Nicira subtype only where there is one
		// (decodeAction and decodeNAT check the rest of the length).
		typ, a, rest, err := nextTLV(b, 8, 8, "ct action")
		if err != nil {
			return nil, err
		}
		b = rest
		if typ == ofpatExp && len(a) >= 10 && binary.BigEndian.Uint32(a[4:]) == nxVendor && binary.BigEndian.Uint16(a[8:]) == nxastNAT {
			nat, err := decodeNAT(a)
			if err != nil {
				return nil, err
			}
			c.NAT = &nat
			continue
		}
		as, err := decodeAction(typ, a)
		if err != nil {
			return nil, err
		}
		exec = append(exec, as...)
	}
	return exec, nil
}

func decodeNAT(a []byte) (NAT, error) {
	if len(a) < 16 {
		return NAT{}, decodeErr("nat of %d bytes", len(a))
	}
	flags, present := binary.BigEndian.Uint16(a[12:]), binary.BigEndian.Uint16(a[14:])
	var n NAT
	switch flags {
	case 0:
	case nxNATSrc:
		n.Src = true
	case nxNATDst:
		n.Dst = true
	default:
		return n, decodeErr("nat flags %#x", flags)
	}
	p := a[16:]
	take := func(k int) ([]byte, error) {
		if len(p) < k {
			return nil, decodeErr("truncated nat")
		}
		v := p[:k]
		p = p[k:]
		return v, nil
	}
	if present&^(nxNATIPv4Min|nxNATIPv6Min|nxNATProtoMin) != 0 {
		return n, decodeErr("nat range %#x", present)
	}
	switch {
	case present&nxNATIPv4Min != 0:
		v, err := take(4)
		if err != nil {
			return n, err
		}
		n.Addr = netip.AddrFrom4([4]byte(v))
	case present&nxNATIPv6Min != 0:
		v, err := take(16)
		if err != nil {
			return n, err
		}
		n.Addr = netip.AddrFrom16([16]byte(v))
	}
	if n.Addr.IsUnspecified() {
		n.Addr = netip.Addr{} // a zero address is none, as encode writes it
	}
	if present&nxNATProtoMin != 0 {
		v, err := take(2)
		if err != nil {
			return n, err
		}
		n.Port = binary.BigEndian.Uint16(v)
	}
	return n, nil
}
