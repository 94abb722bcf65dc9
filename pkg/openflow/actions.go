package openflow

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// Field is an NXM field that move, load and output can address.
type Field struct {
	name  string // NXM name, e.g. NXM_NX_REG0
	class uint16
	field uint8
	bytes uint8
}

// The fields of the pipeline.
var (
	FieldInPort  = Field{"NXM_OF_IN_PORT", classNXM0, 0, 2}
	FieldEthDst  = Field{"NXM_OF_ETH_DST", classNXM0, 1, 6}
	FieldEthSrc  = Field{"NXM_OF_ETH_SRC", classNXM0, 2, 6}
	FieldCTMark  = Field{"NXM_NX_CT_MARK", classNXM1, nxmCTMark, 4}
	FieldCTLabel = Field{"NXM_NX_CT_LABEL", classNXM1, nxmCTLabel, 16}
	// The tunnel metadata of a packet to a flow-based tunnel port
	// (options:remote_ip=flow, options:key=flow): its outer destination
	// (IPv4 or IPv6) and its key (the Geneve VNI, the VXLAN VNI).
	FieldTunID      = Field{"NXM_NX_TUN_ID", classNXM1, nxmTunID, 8}
	FieldTunIPv4Dst = Field{"NXM_NX_TUN_IPV4_DST", classNXM1, nxmTunIPv4Dst, 4}
	FieldTunIPv6Dst = Field{"NXM_NX_TUN_IPV6_DST", classNXM1, nxmTunIPv6Dst, 16}
)

var fixedFields = []Field{FieldInPort, FieldEthDst, FieldEthSrc, FieldCTMark, FieldCTLabel, FieldTunID, FieldTunIPv4Dst, FieldTunIPv6Dst}

// LoadTunDst returns the loads that set a packet's tunnel destination
// (its outer destination address) to a: one load for IPv4, two of 64 bits
// for IPv6 (NXAST_REG_LOAD carries 64 bits).
func LoadTunDst(a netip.Addr) Actions {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return Actions{Load{Value: uint64(binary.BigEndian.Uint32(b[:])), Dst: FieldTunIPv4Dst.All()}}
	}
	b := a.As16()
	return Actions{
		Load{Value: binary.BigEndian.Uint64(b[:8]), Dst: FieldTunIPv6Dst.Bits(64, 127)},
		Load{Value: binary.BigEndian.Uint64(b[8:]), Dst: FieldTunIPv6Dst.Bits(0, 63)},
	}
}

// Reg returns register n (0-15), NXM_NX_REGn.
func Reg(n int) Field {
	return Field{fmt.Sprintf("NXM_NX_REG%d", n), classNXM1, uint8(n), 4}
}

// reg returns the register number of f, or -1.
func (f Field) reg() int {
	if f.class == classNXM1 && f.field < 16 && f.bytes == 4 {
		return int(f.field)
	}
	return -1
}

// header is the field's NXM header (without mask).
func (f Field) header() uint32 {
	return uint32(f.class)<<16 | uint32(f.field)<<9 | uint32(f.bytes)
}

// fieldOf finds the field of an NXM header (the mask bit and length
// ignored), for the decoder.
func fieldOf(hdr uint32) (Field, bool) {
	class, field := uint16(hdr>>16), uint8(hdr>>9&0x7f)
	for _, f := range fixedFields {
		if f.class == class && f.field == field {
			return f, true
		}
	}
	if class == classNXM1 && field < 16 {
		return Reg(int(field)), true
	}
	return Field{}, false
}

// Bits returns bits lo to hi (inclusive) of f.
func (f Field) Bits(lo, hi uint16) Subfield { return Subfield{f, lo, hi - lo + 1} }

// Bit returns bit n of f.
func (f Field) Bit(n uint16) Subfield { return Subfield{f, n, 1} }

// All returns the whole field.
func (f Field) All() Subfield { return Subfield{f, 0, uint16(f.bytes) * 8} }

// Subfield is a bit range of a field: NXM_NX_REG0[0..15].
type Subfield struct {
	Field        Field
	Offset, Bits uint16
}

// String renders FIELD[] for the whole field, FIELD[N] for one bit and
// FIELD[A..B] otherwise.
func (s Subfield) String() string {
	switch {
	case s.Offset == 0 && s.Bits == uint16(s.Field.bytes)*8:
		return s.Field.name + "[]"
	case s.Bits == 1:
		return fmt.Sprintf("%s[%d]", s.Field.name, s.Offset)
	}
	return fmt.Sprintf("%s[%d..%d]", s.Field.name, s.Offset, s.Offset+s.Bits-1)
}

func (s Subfield) valid() bool {
	return s.Field.bytes != 0 && s.Bits > 0 && int(s.Offset)+int(s.Bits) <= int(s.Field.bytes)*8
}

// ofsNbits packs offset and width as NXAST_REG_LOAD and NXAST_OUTPUT_REG do.
func (s Subfield) ofsNbits() uint16 { return s.Offset<<6 | (s.Bits - 1) }

// Action is one OpenFlow action: NORMAL, Output, OutputReg, Move, Load,
// SetField, Resubmit, CT. String renders it in ovs-ofctl syntax; encode
// appends its OpenFlow 1.4 encoding (Nicira extensions where OpenFlow has
// none).
type Action interface {
	String() string
	encode(b []byte) []byte
}

// Actions are the actions of a flow. A GotoTable last becomes the
// goto_table instruction; none at all is "drop".
type Actions []Action

// String renders the actions as after "actions=".
func (as Actions) String() string {
	if len(as) == 0 {
		return "drop"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// OpenFlow 1.4 and Nicira action and instruction codes.
const (
	ofpitGotoTable = 1
	ofpitApply     = 4
	ofpatOutput    = 0
	ofpatSetField  = 25
	ofpatExp       = 0xffff

	nxVendor         = 0x00002320
	nxastRegMove     = 6
	nxastRegLoad     = 7
	nxastResubmitTbl = 14
	nxastOutputReg   = 15
	nxastCT          = 35
	nxastNAT         = 36
	nxCTCommit       = 1
	nxCTRecircNone   = 0xff
	nxNATSrc         = 1
	nxNATDst         = 2
	nxNATIPv4Min     = 1
	nxNATIPv6Min     = 4
	nxNATProtoMin    = 16

	ofp10InPort = 0xfff8 // OFPP_IN_PORT in NXAST_RESUBMIT_TABLE: "this packet's in_port"
)

// Reserved ports.
const (
	PortNormal uint32 = 0xfffffffa
	// PortLocal is the bridge's own port, its internal interface (LOCAL).
	PortLocal uint32 = 0xfffffffe
	// PortMax is the first reserved port number in OpenFlow 1.0 numbering,
	// which ovs-ofctl reads ports in.
	PortMax uint32 = 0xff00
)

// Output sends the packet to Port (PortNormal: the NORMAL action).
type Output struct{ Port uint32 }

// Normal is the NORMAL action.
var Normal = Output{PortNormal}

func (o Output) String() string {
	if o.Port == PortNormal {
		return "NORMAL"
	}
	return "output:" + portName(o.Port)
}

// portName renders an OpenFlow port number as ovs-ofctl reads it: a
// number, or the name of the reserved port LOCAL.
func portName(p uint32) string {
	if p == PortLocal {
		return "LOCAL"
	}
	return fmt.Sprint(p)
}

// encode renders OFPAT_OUTPUT with max_len 0, as ovs-ofctl does for ports
// other than CONTROLLER.
func (o Output) encode(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, ofpatOutput)
	b = binary.BigEndian.AppendUint16(b, 16)
	b = binary.BigEndian.AppendUint32(b, o.Port)
	return append(b, 0, 0, 0, 0, 0, 0, 0, 0)
}

// OutputReg sends the packet to the port number held in Src.
type OutputReg struct{ Src Subfield }

func (o OutputReg) String() string { return "output:" + o.Src.String() }

func (o OutputReg) encode(b []byte) []byte {
	b = nxAction(b, nxastOutputReg, 24)
	b = binary.BigEndian.AppendUint16(b, o.Src.ofsNbits())
	b = binary.BigEndian.AppendUint32(b, o.Src.Field.header())
	b = binary.BigEndian.AppendUint16(b, 0xffff) // max_len, as ovs-ofctl sets it
	return append(b, 0, 0, 0, 0, 0, 0)
}

// Move copies Src to Dst (of the same width).
type Move struct{ Src, Dst Subfield }

func (m Move) String() string { return "move:" + m.Src.String() + "->" + m.Dst.String() }

func (m Move) encode(b []byte) []byte {
	b = nxAction(b, nxastRegMove, 24)
	b = binary.BigEndian.AppendUint16(b, m.Src.Bits)
	b = binary.BigEndian.AppendUint16(b, m.Src.Offset)
	b = binary.BigEndian.AppendUint16(b, m.Dst.Offset)
	b = binary.BigEndian.AppendUint32(b, m.Src.Field.header())
	return binary.BigEndian.AppendUint32(b, m.Dst.Field.header())
}

// Load writes Value to Dst (at most 64 bits wide).
type Load struct {
	Value uint64
	Dst   Subfield
}

func (l Load) String() string { return fmt.Sprintf("load:%d->%s", l.Value, l.Dst) }

// encode renders NXAST_REG_LOAD, which is what ovs-ofctl sends for load:
// (and what makes OVS print it back as load:).
func (l Load) encode(b []byte) []byte {
	b = nxAction(b, nxastRegLoad, 24)
	b = binary.BigEndian.AppendUint16(b, l.Dst.ofsNbits())
	b = binary.BigEndian.AppendUint32(b, l.Dst.Field.header())
	return binary.BigEndian.AppendUint64(b, l.Value)
}

// SetField sets eth_dst or eth_src (Field FieldEthDst or FieldEthSrc) to MAC.
type SetField struct {
	Field Field
	MAC   MAC
}

func (s SetField) oxmName() string {
	if s.Field == FieldEthSrc {
		return "eth_src"
	}
	return "eth_dst"
}

func (s SetField) String() string { return "set_field:" + s.MAC.String() + "->" + s.oxmName() }

func (s SetField) encode(b []byte) []byte {
	f := uint8(oxmEthDst)
	if s.Field == FieldEthSrc {
		f = oxmEthSrc
	}
	b = binary.BigEndian.AppendUint16(b, ofpatSetField)
	b = binary.BigEndian.AppendUint16(b, 16)
	b = oxm(b, classBasic, f, s.MAC[:], nil)
	return append(b, 0, 0) // 4+4+6 = 14, padded to 16
}

// Resubmit looks the packet up again in Table.
type Resubmit struct{ Table uint8 }

func (r Resubmit) String() string { return fmt.Sprintf("resubmit(,%d)", r.Table) }

func (r Resubmit) encode(b []byte) []byte {
	b = nxAction(b, nxastResubmitTbl, 16)
	b = binary.BigEndian.AppendUint16(b, ofp10InPort)
	return append(b, r.Table, 0, 0, 0)
}

// GotoTable continues in Table; it must be the last action (it becomes the
// goto_table instruction).
type GotoTable struct{ Table uint8 }

func (g GotoTable) String() string { return fmt.Sprintf("goto_table:%d", g.Table) }

func (g GotoTable) encode(b []byte) []byte { return b } // an instruction, see encodeInstructions

// CT sends the packet through conntrack: ct(commit,zone=Z,nat(...),exec(...),table=T).
type CT struct {
	Commit bool
	Zone   uint16
	// Table recirculates the packet to that table; nil: no recirculation.
	Table *uint8
	// NAT, when not nil, is nat or nat(src|dst=...).
	NAT *NAT
	// Exec are the actions on the connection (move and load to ct_mark or
	// ct_label).
	Exec Actions
}

// Table is a helper for CT.Table.
func Table(t uint8) *uint8 { return &t }

func (c CT) String() string {
	var args []string
	if c.Commit {
		args = append(args, "commit")
	}
	args = append(args, fmt.Sprintf("zone=%d", c.Zone))
	if c.NAT != nil {
		args = append(args, c.NAT.String())
	}
	if len(c.Exec) > 0 {
		args = append(args, "exec("+c.Exec.String()+")")
	}
	if c.Table != nil {
		args = append(args, fmt.Sprintf("table=%d", *c.Table))
	}
	return "ct(" + strings.Join(args, ",") + ")"
}

func (c CT) encode(b []byte) []byte {
	start := len(b)
	b = nxAction(b, nxastCT, 0)
	flags := uint16(0)
	if c.Commit {
		flags |= nxCTCommit
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint32(b, 0) // zone_src: immediate zone
	b = binary.BigEndian.AppendUint16(b, c.Zone)
	table := uint8(nxCTRecircNone)
	if c.Table != nil {
		table = *c.Table
	}
	b = append(b, table, 0, 0, 0, 0, 0) // recirc_table, pad, alg 0
	if c.NAT != nil {
		b = c.NAT.encode(b)
	}
	for _, a := range c.Exec {
		b = a.encode(b)
	}
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b
}

// NAT is the nat argument of ct: plain "nat" (un-NAT an existing
// connection) without Src or Dst, else nat(src=ADDR[:PORT]) or
// nat(dst=ADDR[:PORT]).
type NAT struct {
	Src, Dst bool
	Addr     netip.Addr // invalid or unspecified: none
	Port     uint16     // 0: none
}

func (n NAT) String() string {
	if !n.Src && !n.Dst {
		return "nat"
	}
	dir := "dst"
	if n.Src {
		dir = "src"
	}
	addr := n.Addr.String()
	if n.Addr.Is6() {
		addr = "[" + addr + "]"
	}
	if !n.Addr.IsValid() {
		addr = "0.0.0.0"
	}
	if n.Port != 0 {
		addr += fmt.Sprintf(":%d", n.Port)
	}
	return "nat(" + dir + "=" + addr + ")"
}

// encode renders NXAST_NAT; like ovs-ofctl it leaves out a zero address or
// port.
func (n NAT) encode(b []byte) []byte {
	start := len(b)
	var flags, present uint16
	switch {
	case n.Src:
		flags = nxNATSrc
	case n.Dst:
		flags = nxNATDst
	}
	var params []byte
	if n.Src || n.Dst {
		switch {
		case n.Addr.Is4() && !n.Addr.IsUnspecified():
			present |= nxNATIPv4Min
			params = n.Addr.AsSlice()
		case n.Addr.Is6() && !n.Addr.IsUnspecified():
			present |= nxNATIPv6Min
			params = n.Addr.AsSlice()
		}
		if n.Port != 0 {
			present |= nxNATProtoMin
			params = binary.BigEndian.AppendUint16(params, n.Port)
		}
	}
	b = nxAction(b, nxastNAT, 0)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, present)
	b = pad8(append(b, params...), start)
	binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	return b
}

// nxAction starts a Nicira extension action of length n (a multiple of 8;
// 0 when the caller patches it).
func nxAction(b []byte, subtype, n uint16) []byte {
	b = binary.BigEndian.AppendUint16(b, ofpatExp)
	b = binary.BigEndian.AppendUint16(b, n)
	b = binary.BigEndian.AppendUint32(b, nxVendor)
	return binary.BigEndian.AppendUint16(b, subtype)
}

// pad8 pads b with zeros to a multiple of 8 bytes from start.
func pad8(b []byte, start int) []byte {
	for (len(b)-start)%8 != 0 {
		b = append(b, 0)
	}
	return b
}

// instructions splits actions as OpenFlow 1.4 carries them: a Meter first
// is the meter instruction, a final GotoTable the goto_table one, every
// other action goes in one apply_actions instruction.
func instructions(as Actions) (meter *Meter, apply Actions, gotoTable *GotoTable) {
	if len(as) > 0 {
		if m, ok := as[0].(Meter); ok {
			meter, as = &m, as[1:]
		}
	}
	if n := len(as); n > 0 {
		if g, ok := as[n-1].(GotoTable); ok {
			gotoTable, as = &g, as[:n-1]
		}
	}
	return meter, as, gotoTable
}

// encodeInstructions renders the actions as ovs-ofctl does for OpenFlow
// 1.4 (instructions): the meter instruction, apply_actions, goto_table, each
// when there is one. No actions is no instruction at all (drop).
func encodeInstructions(b []byte, as Actions) []byte {
	meter, apply, gotoTable := instructions(as)
	if meter != nil {
		b = binary.BigEndian.AppendUint16(b, ofpitMeter)
		b = binary.BigEndian.AppendUint16(b, 8)
		b = binary.BigEndian.AppendUint32(b, meter.ID)
	}
	if len(apply) > 0 {
		start := len(b)
		b = binary.BigEndian.AppendUint16(b, ofpitApply)
		b = append(b, 0, 0, 0, 0, 0, 0)
		for _, a := range apply {
			b = a.encode(b)
		}
		binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
	}
	if gotoTable != nil {
		b = binary.BigEndian.AppendUint16(b, ofpitGotoTable)
		b = binary.BigEndian.AppendUint16(b, 8)
		b = append(b, gotoTable.Table, 0, 0, 0)
	}
	return b
}

// Validate reports actions that OVS would reject or that do not encode:
// subfields out of their field, widths that differ, a load that does not
// fit, reserved ports, a GotoTable other than last, exec actions other
// than move and load. Of the reserved ports, NORMAL and LOCAL are allowed.
func (as Actions) Validate() error {
	var errs []string
	var check func(as Actions, inCT bool)
	check = func(as Actions, inCT bool) {
		for i, a := range as {
			switch a := a.(type) {
			case Output:
				if inCT || a.Port >= PortMax && a.Port != PortNormal && a.Port != PortLocal {
					errs = append(errs, a.String())
				}
			case OutputReg:
				if inCT || !a.Src.valid() {
					errs = append(errs, a.String())
				}
			case Move:
				if !a.Src.valid() || !a.Dst.valid() || a.Src.Bits != a.Dst.Bits {
					errs = append(errs, a.String())
				}
			case Load:
				if !a.Dst.valid() || a.Dst.Bits > 64 || a.Dst.Bits < 64 && a.Value>>a.Dst.Bits != 0 {
					errs = append(errs, a.String())
				}
			case SetField:
				if a.Field != FieldEthDst && a.Field != FieldEthSrc {
					errs = append(errs, a.String())
				}
			case Resubmit:
				if inCT || a.Table == 0xff {
					errs = append(errs, a.String())
				}
			case Meter:
				if inCT || i != 0 || a.ID == 0 || a.ID > MeterMax {
					errs = append(errs, a.String())
				}
			case GotoTable:
				if inCT || i != len(as)-1 || a.Table == 0xff {
					errs = append(errs, a.String())
				}
			case CT:
				if inCT {
					errs = append(errs, a.String())
				}
				if a.NAT != nil && a.NAT.Src && a.NAT.Dst {
					errs = append(errs, a.String())
				}
				check(a.Exec, true)
			default:
				errs = append(errs, fmt.Sprintf("%T", a))
			}
		}
	}
	check(as, false)
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidAction, strings.Join(errs, ", "))
	}
	return nil
}
