package openflow

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// flowMod is one compiled line of a bundle.
type flowMod struct {
	line int    // 1-based line number in the bundle text
	text string // the line as written
	msg  []byte // a complete OFPT_FLOW_MOD; send patches the xid
}

// OpenFlow 1.4 constants used by the compiler (openflow-1.4.h).
const (
	ofpfcAdd          = 0
	ofpfcDelete       = 3
	ofpfcDeleteStrict = 4

	ofpttAll         = 0xff
	ofppAny          = 0xffffffff
	ofppNormal       = 0xfffffffa
	ofpgAny          = 0xffffffff
	ofpNoBuffer      = 0xffffffff
	ofpDefaultPrio   = 0x8000
	ofppMax          = 0xff00 // first reserved port number (OpenFlow 1.0 numbering)
	ofp10InPort      = 0xfff8 // OFPP_IN_PORT in NXAST_RESUBMIT_TABLE
	ofpitGotoTable   = 1
	ofpitApply       = 4
	ofpatOutput      = 0
	ofpatSetField    = 25
	ofpatExperimentr = 0xffff

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

	classNXM0  = 0x0000 // NXM_OF_*
	classNXM1  = 0x0001 // NXM_NX_*
	classBasic = 0x8000 // OXM_OF_*
)

// matchFields are the match keys with their OXM (OpenFlow 1.4 section
// 7.2.3.7; NXM1 for registers and conntrack), value kind, prerequisite rank
// (see field) and the eth_type they need. tp_* and icmp_* take their field
// number from the protocol (transport and icmp below).
var matchFields = map[string]matchField{
	"in_port":  {classBasic, 0, 'p', 0, 0},
	"vlan_tci": {classNXM0, 4, 'w', 0, 0},
	"dl_dst":   {classBasic, 3, 'm', 0, 0}, "eth_dst": {classBasic, 3, 'm', 0, 0},
	"dl_src": {classBasic, 4, 'm', 0, 0}, "eth_src": {classBasic, 4, 'm', 0, 0},
	"ct_state": {classNXM1, 105, 's', 0, 0},
	"ct_mark":  {classNXM1, 107, 'r', 0, 0},
	"ct_zone":  {classNXM1, 106, 'w', 0, 0},
	"nw_src":   {classBasic, 11, '4', 3, 0x0800}, "nw_dst": {classBasic, 12, '4', 3, 0x0800},
	"arp_spa": {classBasic, 22, '4', 3, 0x0806}, "arp_tpa": {classBasic, 23, '4', 3, 0x0806},
	"arp_sha": {classBasic, 24, 'm', 3, 0x0806}, "arp_tha": {classBasic, 25, 'm', 3, 0x0806},
	"ipv6_src": {classBasic, 26, '6', 3, 0x86dd}, "ipv6_dst": {classBasic, 27, '6', 3, 0x86dd},
	"nd_target": {classBasic, 31, '6', 5, 0x86dd},
	"nd_sll":    {classBasic, 32, 'm', 5, 0x86dd}, "nd_tll": {classBasic, 33, 'm', 5, 0x86dd},
	"tp_src": {classBasic, 0, 't', 4, 0}, "tp_dst": {classBasic, 1, 't', 4, 0},
	"icmp_type": {classBasic, 0, 'i', 4, 0}, "icmp_code": {classBasic, 1, 'i', 4, 0},
}

type matchField struct {
	class uint16
	field uint8
	kind  byte // p port, m MAC, s ct_state, r 32-bit and w 16-bit V[/M], 4 and 6 address[/len], t and i 8- or 16-bit number
	rank  int
	eth   uint16
}

// transport and icmp give the OXM of tp_src and icmp_type (+1 for tp_dst
// and icmp_code) by ip_proto and eth_type.
var (
	transport = map[uint8]uint8{6: 13, 17: 15, 132: 17}
	icmp      = map[[2]uint16]uint8{{0x0800, 1}: 19, {0x86dd, 58}: 29}
)

// protocols maps the protocol keywords to eth_type and ip_proto.
var protocols = map[string][2]uint16{
	"ip": {0x0800, 0}, "ipv6": {0x86dd, 0}, "arp": {0x0806, 0},
	"icmp": {0x0800, 1}, "tcp": {0x0800, 6}, "udp": {0x0800, 17}, "sctp": {0x0800, 132},
	"icmp6": {0x86dd, 58}, "tcp6": {0x86dd, 6}, "udp6": {0x86dd, 17}, "sctp6": {0x86dd, 132},
}

// ctFlags are the ct_state bits (NXM_NX_CT_STATE).
var ctFlags = map[string]uint32{
	"new": 0x01, "est": 0x02, "rel": 0x04, "rpl": 0x08,
	"inv": 0x10, "trk": 0x20, "snat": 0x40, "dnat": 0x80,
}

// nxmFields are the fields that move, load and output may reference.
var nxmFields = map[string]nxmField{
	"NXM_OF_IN_PORT": {classNXM0, 0, 2}, "NXM_OF_ETH_DST": {classNXM0, 1, 6}, "NXM_OF_ETH_SRC": {classNXM0, 2, 6},
	"NXM_NX_CT_MARK": {classNXM1, 107, 4}, "NXM_NX_CT_LABEL": {classNXM1, 108, 16},
}

type nxmField struct {
	class uint16
	field uint8
	bytes int
}

func init() {
	for i := range 16 {
		nxmFields["NXM_NX_REG"+strconv.Itoa(i)] = nxmField{classNXM1, uint8(i), 4}
		matchFields["reg"+strconv.Itoa(i)] = matchField{classNXM1, uint8(i), 'r', 0, 0}
	}
}

// unsupported returns ErrUnsupported wrapped with what was not understood.
func unsupported(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, a...))
}

// compile turns the text of an add-flows file into flow_mods, one per line.
func compile(bundle string) ([]flowMod, error) {
	var mods []flowMod
	for i, text := range strings.Split(bundle, "\n") {
		text = strings.TrimSpace(text)
		if text == "" || text[0] == '#' {
			continue
		}
		msg, err := compileLine(text)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", i+1, text, err)
		}
		mods = append(mods, flowMod{i + 1, text, msg})
	}
	return mods, nil
}

func compileLine(text string) ([]byte, error) {
	verb, flow, _ := strings.Cut(text, " ")
	flow = strings.TrimSpace(flow)
	if strings.ContainsAny(flow, " \t") {
		return nil, unsupported("blank inside the flow")
	}
	switch verb {
	case "add":
		return compileAdd(flow)
	case "delete":
		return compileDelete(flow)
	case "delete_strict":
		return compileDeleteStrict(flow)
	}
	return nil, unsupported("verb %q", verb)
}

// compileDelete accepts exactly "cookie=V/M": every flow whose cookie
// matches, in every table.
func compileDelete(flow string) ([]byte, error) {
	v, ok := strings.CutPrefix(flow, "cookie=")
	if !ok || strings.Contains(v, ",") {
		return nil, unsupported("delete other than cookie=VALUE/MASK")
	}
	c, m, ok := strings.Cut(v, "/")
	if !ok {
		return nil, unsupported("delete by cookie without a mask")
	}
	cookie, err := parseNum(c, 64)
	if err != nil {
		return nil, fmt.Errorf("cookie: %w", err)
	}
	mask, err := parseNum(m, 64)
	if m == "-1" { // strtoull("-1") as ovs-ofctl reads it
		mask, err = ^uint64(0), nil
	}
	if err != nil {
		return nil, fmt.Errorf("cookie mask: %w", err)
	}
	return flowModMsg(cookie, mask, ofpttAll, ofpfcDelete, 0, ofpDefaultPrio, nil, nil), nil
}

// compileDeleteStrict accepts exactly
// "cookie=V/M,table=N,priority=N,in_port=N": the one flow of that table,
// priority and in_port match (and nothing else), if its cookie matches.
func compileDeleteStrict(flow string) ([]byte, error) {
	parts := strings.Split(flow, ",")
	if len(parts) != 4 {
		return nil, unsupported("delete_strict other than cookie=V/M,table=N,priority=N,in_port=N")
	}
	var vals [4]string
	for i, key := range []string{"cookie=", "table=", "priority=", "in_port="} {
		v, ok := strings.CutPrefix(parts[i], key)
		if !ok {
			return nil, unsupported("delete_strict other than cookie=V/M,table=N,priority=N,in_port=N")
		}
		vals[i] = v
	}
	del, err := compileDelete("cookie=" + vals[0])
	if err != nil {
		return nil, err
	}
	table, err := parseNum(vals[1], 8)
	if err == nil && table == ofpttAll {
		err = unsupported("table=255")
	}
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	prio, err := parseNum(vals[2], 16)
	if err != nil {
		return nil, fmt.Errorf("priority: %w", err)
	}
	port, err := parsePortNum(vals[3])
	if err != nil {
		return nil, fmt.Errorf("in_port: %w", err)
	}
	cookie, mask := binary.BigEndian.Uint64(del[8:]), binary.BigEndian.Uint64(del[16:])
	return flowModMsg(cookie, mask, uint8(table), ofpfcDeleteStrict, 0, uint16(prio),
		oxm(classBasic, 0, binary.BigEndian.AppendUint32(nil, port), nil), nil), nil
}

// flowModMsg renders an OFPT_FLOW_MOD (OpenFlow 1.4 section 7.3.4.1) with
// xid 0, no timeouts, no flags, no buffer and no out_port/out_group filter.
func flowModMsg(cookie, mask uint64, table, cmd uint8, hardTimeout, prio uint16, oxms, instructions []byte) []byte {
	b := make([]byte, 8, 64+len(oxms)+len(instructions))
	b[0], b[1] = version, ofptFlowMod
	b = binary.BigEndian.AppendUint64(b, cookie)
	b = binary.BigEndian.AppendUint64(b, mask)
	b = append(b, table, cmd, 0, 0) // idle timeout 0
	b = binary.BigEndian.AppendUint16(b, hardTimeout)
	b = binary.BigEndian.AppendUint16(b, prio)
	b = binary.BigEndian.AppendUint32(b, ofpNoBuffer)
	b = binary.BigEndian.AppendUint32(b, ofppAny)
	b = binary.BigEndian.AppendUint32(b, ofpgAny)
	b = append(b, 0, 0, 0, 0)               // flags, importance
	b = binary.BigEndian.AppendUint16(b, 1) // OFPMT_OXM
	b = binary.BigEndian.AppendUint16(b, uint16(4+len(oxms)))
	b = pad8(append(b, oxms...))
	b = append(b, instructions...)
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// match is what the match part of an add line sets besides the OXM fields.
type match struct {
	cookie uint64
	table  uint8
	prio   uint16
	// hardTimeout removes the flow after that many seconds (0: never).
	hardTimeout uint16
	ethType     uint16
	proto       uint8
	icmpType    int // -1: not matched
	icmpCode    int
	oxms        [6][]byte // by prerequisite rank, see fieldOXM
}

func compileAdd(flow string) ([]byte, error) {
	matchPart, actions, ok := strings.Cut(flow, "actions=")
	if !ok || matchPart != "" && !strings.HasSuffix(matchPart, ",") {
		return nil, unsupported("flow without actions=")
	}
	m := match{prio: ofpDefaultPrio, icmpType: -1, icmpCode: -1}
	var fields [][2]string
	seen := map[string]bool{}
	for _, it := range strings.Split(strings.TrimSuffix(matchPart, ","), ",") {
		if it == "" && matchPart == "" {
			continue
		}
		k, v, hasValue := strings.Cut(it, "=")
		if seen[k] || (!hasValue && m.ethType != 0) {
			return nil, unsupported("%q given twice", k)
		}
		seen[k] = true
		var err error
		var n uint64
		switch p, isProto := protocols[k]; {
		case !hasValue && isProto:
			m.ethType, m.proto = p[0], uint8(p[1])
		case !hasValue:
			return nil, unsupported("keyword %q", k)
		case k == "cookie":
			if strings.Contains(v, "/") {
				return nil, unsupported("cookie mask on add")
			}
			m.cookie, err = parseNum(v, 64)
		case k == "table":
			if n, err = parseNum(v, 8); err == nil && n == ofpttAll {
				return nil, unsupported("table=255")
			}
			m.table = uint8(n)
		case k == "priority":
			n, err = parseNum(v, 16)
			m.prio = uint16(n)
		case k == "hard_timeout":
			n, err = parseNum(v, 16)
			m.hardTimeout = uint16(n)
		case k == "dl_type" && m.ethType == 0:
			n, err = parseNum(v, 16)
			m.ethType = uint16(n)
		default:
			fields = append(fields, [2]string{k, v})
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	if m.ethType != 0 {
		m.oxms[1] = oxm(classBasic, 5, binary.BigEndian.AppendUint16(nil, m.ethType), nil)
	}
	if m.proto != 0 {
		m.oxms[2] = oxm(classBasic, 10, []byte{m.proto}, nil)
	}
	for _, kv := range fields {
		if err := m.field(kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("%s: %w", kv[0], err)
		}
	}
	if m.oxms[5] != nil && (m.icmpCode != 0 || m.icmpType != 135 && m.icmpType != 136 ||
		seen["nd_sll"] && m.icmpType != 135 || seen["nd_tll"] && m.icmpType != 136) {
		return nil, unsupported("nd_target, nd_sll or nd_tll without icmp_type=135/136,icmp_code=0")
	}
	instructions, err := compileInstructions(actions)
	if err != nil {
		return nil, fmt.Errorf("actions: %w", err)
	}
	return flowModMsg(m.cookie, 0, m.table, ofpfcAdd, m.hardTimeout, m.prio, bytes.Join(m.oxms[:], nil), instructions), nil
}

// field adds the OXM of one "key=value" match. OVS checks prerequisites in
// the order it reads the match, so OXMs are emitted by rank: metadata (0),
// eth_type (1), ip_proto (2), L3 (3), L4 (4), nd_target (5).
func (m *match) field(k, v string) error {
	f, ok := matchFields[k]
	if !ok {
		return unsupported("match field %q", k)
	}
	if f.eth != 0 && f.eth != m.ethType || f.rank == 5 && m.proto != 58 {
		return unsupported("%s without its protocol", k)
	}
	var (
		val, mask []byte
		n         uint64
		err       error
	)
	switch f.kind {
	case 'p':
		var port uint32
		port, err = parsePortNum(v)
		val = binary.BigEndian.AppendUint32(nil, port)
	case 'm':
		val, err = parseMAC(v)
	case 's':
		val, mask, err = parseCTState(v)
	case 'r':
		val, mask, err = parseMasked(v, 32)
	case 'w':
		val, mask, err = parseMasked(v, 16)
	case '4', '6':
		val, mask, err = parsePrefix(v, f.kind == '6')
	case 't':
		if f.field += transport[m.proto]; f.field < 13 || m.ethType == 0x0806 {
			return unsupported("%s without tcp, udp or sctp", k)
		}
		n, err = parseNum(v, 16)
		val = binary.BigEndian.AppendUint16(nil, uint16(n))
	case 'i':
		if f.field += icmp[[2]uint16{m.ethType, uint16(m.proto)}]; f.field < 19 {
			return unsupported("%s without icmp or icmp6", k)
		}
		n, err = parseNum(v, 8)
		val = []byte{uint8(n)}
		if k == "icmp_type" {
			m.icmpType = int(n)
		} else {
			m.icmpCode = int(n)
		}
	}
	if err != nil {
		return err
	}
	m.oxms[f.rank] = append(m.oxms[f.rank], oxm(f.class, f.field, val, mask)...)
	return nil
}

// oxm renders one OXM TLV; a nil or all-ones mask is an exact match, an
// all-zeros mask no match at all (ovs-ofctl drops such fields too).
func oxm(class uint16, field uint8, val, mask []byte) []byte {
	if mask != nil && bytes.Count(mask, []byte{0xff}) == len(mask) {
		mask = nil
	}
	if mask != nil && bytes.Count(mask, []byte{0}) == len(mask) {
		return nil
	}
	n := len(val)
	hasMask := uint32(0)
	if mask != nil {
		n, hasMask = 2*n, 1
		for i := range val {
			val[i] &= mask[i]
		}
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(class)<<16|uint32(field)<<9|hasMask<<8|uint32(n))
	return append(append(b, val...), mask...)
}

// parseNum reads a number as ovs-ofctl's strtoull(s, 0) does, without the
// octal form: decimal or 0x-prefixed hexadecimal, fitting in bits.
func parseNum(s string, bits int) (uint64, error) {
	var (
		n   uint64
		err error
	)
	switch {
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		n, err = strconv.ParseUint(s[2:], 16, bits)
	case len(s) > 1 && s[0] == '0' && s[1] >= '0' && s[1] <= '9':
		return 0, unsupported("octal number %q", s)
	default:
		n, err = strconv.ParseUint(s, 10, bits)
	}
	if err != nil {
		return 0, fmt.Errorf("malformed %d-bit number %q", bits, s)
	}
	return n, nil
}

// parsePortNum reads a port number below the reserved ones. ovs-ofctl reads
// port numbers in decimal only; names and reserved ports are not compiled.
func parsePortNum(s string) (uint32, error) {
	if s == "" || s[0] < '0' || s[0] > '9' || strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		return 0, unsupported("port %q", s)
	}
	n, err := parseNum(s, 32)
	if err == nil && n >= ofppMax {
		return 0, unsupported("reserved port %s", s)
	}
	return uint32(n), err
}

// parseMasked reads "V" or "V/M".
func parseMasked(s string, bits int) (val, mask []byte, err error) {
	v, m, hasMask := strings.Cut(s, "/")
	n, err := parseNum(v, bits)
	if err != nil {
		return nil, nil, err
	}
	val = binary.BigEndian.AppendUint64(nil, n)[8-bits/8:]
	if hasMask {
		if n, err = parseNum(m, bits); err != nil {
			return nil, nil, err
		}
		mask = binary.BigEndian.AppendUint64(nil, n)[8-bits/8:]
	}
	return val, mask, nil
}

// parseMAC reads xx:xx:xx:xx:xx:xx.
func parseMAC(s string) ([]byte, error) {
	if strings.Contains(s, "/") {
		return nil, unsupported("masked MAC %q", s)
	}
	mac, err := net.ParseMAC(s)
	if err != nil || len(s) != 17 || s[2] != ':' {
		return nil, fmt.Errorf("malformed MAC %q", s)
	}
	return mac, nil
}

// parsePrefix reads an address or an address/prefix-length of one family.
func parsePrefix(s string, v6 bool) (val, mask []byte, err error) {
	if strings.Contains(s, "%") {
		return nil, nil, fmt.Errorf("malformed address %q", s)
	}
	addr, bits, hasLen := strings.Cut(s, "/")
	if hasLen && strings.ContainsAny(bits, ".:") {
		return nil, nil, unsupported("netmask %q", bits)
	}
	var p netip.Prefix
	if hasLen {
		p, err = netip.ParsePrefix(s)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(addr); err == nil {
			p, err = a.Prefix(a.BitLen())
		}
	}
	if err != nil || p.Addr().Is6() != v6 || p.Addr().Zone() != "" {
		return nil, nil, fmt.Errorf("malformed address %q", s)
	}
	m := net.CIDRMask(p.Bits(), p.Addr().BitLen())
	return p.Masked().Addr().AsSlice(), m, nil
}

// parseCTState reads "+flag-flag...".
func parseCTState(s string) (val, mask []byte, err error) {
	var v, m uint32
	for s != "" {
		if s[0] != '+' && s[0] != '-' {
			return nil, nil, unsupported("ct_state %q", s)
		}
		end := strings.IndexAny(s[1:], "+-") + 1
		if end == 0 {
			end = len(s)
		}
		f, ok := ctFlags[s[1:end]]
		if !ok || m&f != 0 {
			return nil, nil, unsupported("ct_state flag %q", s[:end])
		}
		m |= f
		if s[0] == '+' {
			v |= f
		}
		s = s[end:]
	}
	if m == 0 {
		return nil, nil, unsupported("empty ct_state")
	}
	return binary.BigEndian.AppendUint32(nil, v), binary.BigEndian.AppendUint32(nil, m), nil
}

func pad8(b []byte) []byte {
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	return b
}
