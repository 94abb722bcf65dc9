package openflow

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// MAC is an Ethernet address.
type MAC [6]byte

// MACFrom converts a 48-bit net.HardwareAddr; any other length gives the
// zero MAC and false.
func MACFrom(hw net.HardwareAddr) (MAC, bool) {
	var m MAC
	if len(hw) != 6 {
		return m, false
	}
	copy(m[:], hw)
	return m, true
}

// String renders xx:xx:xx:xx:xx:xx.
func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// HardwareAddr returns m as a net.HardwareAddr, for the netlink side.
func (m MAC) HardwareAddr() net.HardwareAddr { return net.HardwareAddr(m[:]) }

// IsZero reports whether m is 00:00:00:00:00:00, which stands for no MAC.
func (m MAC) IsZero() bool { return m == MAC{} }

// ParseMAC parses a 48-bit MAC in any form net.ParseMAC reads.
func ParseMAC(s string) (MAC, error) {
	hw, err := net.ParseMAC(s)
	if err != nil {
		return MAC{}, err
	}
	m, ok := MACFrom(hw)
	if !ok {
		return MAC{}, fmt.Errorf("MAC %q is not 48 bits", s)
	}
	return m, nil
}

// MarshalText renders m as String does, so that JSON holds it as text.
func (m MAC) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses what MarshalText renders (ParseMAC).
func (m *MAC) UnmarshalText(b []byte) error {
	v, err := ParseMAC(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Ethernet types and IP protocols of the keywords ovs-ofctl knows
// (ip, ipv6, arp, icmp, tcp6, ...).
const (
	EthIPv4 uint16 = 0x0800
	EthARP  uint16 = 0x0806
	EthIPv6 uint16 = 0x86dd

	ProtoICMP   uint8 = 1
	ProtoTCP    uint8 = 6
	ProtoUDP    uint8 = 17
	ProtoICMPv6 uint8 = 58
	ProtoSCTP   uint8 = 132
	ProtoVRRP   uint8 = 112
)

// CT state flags (NXM_NX_CT_STATE).
const (
	CTNew  uint32 = 0x01
	CTEst  uint32 = 0x02
	CTRel  uint32 = 0x04
	CTRpl  uint32 = 0x08
	CTInv  uint32 = 0x10
	CTTrk  uint32 = 0x20
	CTSNAT uint32 = 0x40
	CTDNAT uint32 = 0x80
)

var ctFlagNames = []string{"new", "est", "rel", "rpl", "inv", "trk", "snat", "dnat"}

// Match is the match of a flow: a comparable value built with the methods
// below (each returns the match with one more field), so that the same
// fields compare equal however they were built or decoded. Its fields
// render in one fixed order, which is the order pkg/flows writes them in.
// Prerequisites are the caller's: a field of a protocol needs EthType (and
// IPProto) set, as OVS demands; Encode emits OXMs in prerequisite order.
type Match struct {
	has            uint32 // bits of the optional fields set
	ethType        uint16
	ipProto        uint8
	inPort         uint32
	regs           [16]masked32
	vlanTCI        masked16
	ethDst, ethSrc MAC
	ctState        masked32
	ctZone         uint16
	ctMark         masked32
	ctNWProto      uint8
	ctTPSrc        uint16
	ctTPDst        uint16
	ipSrc, ipDst   netip.Prefix // nw_* or ipv6_* by family
	ipFrag         masked8
	arpSHA, arpTHA MAC
	arpSPA, arpTPA netip.Prefix
	tpSrc, tpDst   uint16
	icmpType       uint8
	icmpCode       uint8
	ndTarget       netip.Addr
	ndSLL, ndTLL   MAC
	tunSrc         netip.Addr // tun_src or tun_ipv6_src by family
	tunID          uint64
}

type masked32 struct{ v, m uint32 }
type masked16 struct{ v, m uint16 }
type masked8 struct{ v, m uint8 }

const (
	hasEthType = 1 << iota
	hasIPProto
	hasInPort
	hasVLAN
	hasEthDst
	hasEthSrc
	hasCTState
	hasCTZone
	hasARPSHA
	hasARPTHA
	hasTPSrc
	hasTPDst
	hasICMPType
	hasICMPCode
	hasNDSLL
	hasNDTLL
	hasRegs // any of regs; which by mask
	hasIPFrag
	hasCTNWProto
	hasCTTPSrc
	hasCTTPDst
	hasCTMark
	hasTunID
)

// IP fragment flags (NXM_NX_IP_FRAG): FragAny is set on every fragment,
// FragLater on those after the first (which carry no L4 header).
const (
	FragAny   uint8 = 1
	FragLater uint8 = 2
)

// EthType matches dl_type.
func (m Match) EthType(t uint16) Match { m.ethType, m.has = t, m.has|hasEthType; return m }

// IPProto matches nw_proto (needs EthType IPv4 or IPv6).
func (m Match) IPProto(p uint8) Match { m.ipProto, m.has = p, m.has|hasIPProto; return m }

// Proto matches an ovs-ofctl protocol keyword's pair: ethertype and, when p
// is not 0, IP protocol ("tcp" is EthIPv4, ProtoTCP; "ipv6" is EthIPv6, 0).
func (m Match) Proto(eth uint16, p uint8) Match {
	m = m.EthType(eth)
	if p != 0 {
		m = m.IPProto(p)
	}
	return m
}

// InPort matches in_port (an OpenFlow port number below the reserved ones).
func (m Match) InPort(p uint32) Match { m.inPort, m.has = p, m.has|hasInPort; return m }

// InPortOf returns the in_port matched, if any.
func (m Match) InPortOf() (uint32, bool) { return m.inPort, m.has&hasInPort != 0 }

// Reg matches the bits of mask of register n (0-15) against value; a zero
// mask removes the match.
func (m Match) Reg(n int, value, mask uint32) Match {
	m.regs[n] = masked32{value & mask, mask}
	m.has &^= hasRegs
	for _, r := range m.regs {
		if r.m != 0 {
			m.has |= hasRegs
		}
	}
	return m
}

// RegBits matches subfield s of a register (see Field.Reg) to value.
func (m Match) RegBits(s Subfield, value uint32) Match {
	mask := uint32(1<<s.Bits-1) << s.Offset
	if s.Bits >= 32 {
		mask = ^uint32(0)
	}
	n := s.Field.reg()
	v := m.regs[n]
	return m.Reg(n, v.v&^mask|value<<s.Offset&mask, v.m|mask)
}

// VLANTCI matches vlan_tci under mask.
func (m Match) VLANTCI(value, mask uint16) Match {
	m.vlanTCI = masked16{value & mask, mask}
	m.has = m.presentIf(mask != 0, hasVLAN)
	return m
}

// presentIf is m.has with bit set when present, cleared otherwise.
func (m Match) presentIf(present bool, bit uint32) uint32 {
	if present {
		return m.has | bit
	}
	return m.has &^ bit
}

// EthDst matches dl_dst.
func (m Match) EthDst(a MAC) Match { m.ethDst, m.has = a, m.has|hasEthDst; return m }

// EthSrc matches dl_src.
func (m Match) EthSrc(a MAC) Match { m.ethSrc, m.has = a, m.has|hasEthSrc; return m }

// CTState matches the flags of mask (CTTrk, ...) to those of value.
func (m Match) CTState(value, mask uint32) Match {
	m.ctState = masked32{value & mask, mask}
	m.has = m.presentIf(mask != 0, hasCTState)
	return m
}

// CTZone matches ct_zone.
func (m Match) CTZone(z uint16) Match { m.ctZone, m.has = z, m.has|hasCTZone; return m }

// CTMark matches the bits of mask of ct_mark to those of value.
func (m Match) CTMark(value, mask uint32) Match {
	m.ctMark = masked32{value & mask, mask}
	m.has = m.presentIf(mask != 0, hasCTMark)
	return m
}

// CTNWProto matches ct_nw_proto, the IP protocol of the connection's
// original direction (needs EthType and CTState with +trk and -inv or +new,
// as OVS demands).
func (m Match) CTNWProto(p uint8) Match { m.ctNWProto, m.has = p, m.has|hasCTNWProto; return m }

// CTTPSrc matches ct_tp_src, the original direction's source port (needs
// CTNWProto): on a fragment that went through ct(), the port of the
// reassembled datagram.
func (m Match) CTTPSrc(p uint16) Match { m.ctTPSrc, m.has = p, m.has|hasCTTPSrc; return m }

// CTTPDst matches ct_tp_dst.
func (m Match) CTTPDst(p uint16) Match { m.ctTPDst, m.has = p, m.has|hasCTTPDst; return m }

// IPFrag matches the fragment flags of mask (FragAny, FragLater) to those
// of value: nw_frag=yes is IPFrag(FragAny, FragAny) (needs an IP EthType).
// Other bits are ignored, as OVS ignores them (and dumps a mask of both
// flags as an exact match).
func (m Match) IPFrag(value, mask uint8) Match {
	mask &= FragAny | FragLater
	m.ipFrag = masked8{value & mask, mask}
	m.has = m.presentIf(mask != 0, hasIPFrag)
	return m
}

// IPSrc matches nw_src or ipv6_src, by the family of p; a single address
// is a full-length prefix (see Host).
func (m Match) IPSrc(p netip.Prefix) Match { m.ipSrc = canonPrefix(p); return m }

// IPDst matches nw_dst or ipv6_dst.
func (m Match) IPDst(p netip.Prefix) Match { m.ipDst = canonPrefix(p); return m }

// canonPrefix masks p and drops a zero-length prefix, which matches
// everything (ovs-ofctl sends no field for it).
func canonPrefix(p netip.Prefix) netip.Prefix {
	if !p.IsValid() || p.Bits() == 0 {
		return netip.Prefix{}
	}
	return p.Masked()
}

// Host is the full-length prefix of a.
func Host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// ARPSHA matches arp_sha.
func (m Match) ARPSHA(a MAC) Match { m.arpSHA, m.has = a, m.has|hasARPSHA; return m }

// ARPTHA matches arp_tha.
func (m Match) ARPTHA(a MAC) Match { m.arpTHA, m.has = a, m.has|hasARPTHA; return m }

// ARPSPA matches arp_spa.
func (m Match) ARPSPA(p netip.Prefix) Match { m.arpSPA = canonPrefix(p); return m }

// ARPTPA matches arp_tpa.
func (m Match) ARPTPA(p netip.Prefix) Match { m.arpTPA = canonPrefix(p); return m }

// TPSrc matches tp_src (TCP, UDP or SCTP by IPProto).
func (m Match) TPSrc(p uint16) Match { m.tpSrc, m.has = p, m.has|hasTPSrc; return m }

// TPDst matches tp_dst.
func (m Match) TPDst(p uint16) Match { m.tpDst, m.has = p, m.has|hasTPDst; return m }

// ICMPType matches icmp_type (ICMP or ICMPv6 by IPProto).
func (m Match) ICMPType(t uint8) Match { m.icmpType, m.has = t, m.has|hasICMPType; return m }

// ICMPCode matches icmp_code.
func (m Match) ICMPCode(c uint8) Match { m.icmpCode, m.has = c, m.has|hasICMPCode; return m }

// NDTarget matches nd_target (needs icmp_type 135 or 136 and icmp_code 0).
func (m Match) NDTarget(a netip.Addr) Match { m.ndTarget = a; return m }

// NDSLL matches nd_sll (neighbour solicitations).
func (m Match) NDSLL(a MAC) Match { m.ndSLL, m.has = a, m.has|hasNDSLL; return m }

// NDTLL matches nd_tll (neighbour advertisements).
func (m Match) NDTLL(a MAC) Match { m.ndTLL, m.has = a, m.has|hasNDTLL; return m }

// TunSrc matches the outer source address of a packet that came in on a
// tunnel port: tun_src, or tun_ipv6_src for an IPv6 address. It has no
// prerequisite.
func (m Match) TunSrc(a netip.Addr) Match { m.tunSrc = a.Unmap(); return m }

// TunID matches the tunnel key (Geneve's VNI, VXLAN's) of a packet that
// came in on a flow-based tunnel port (key=flow): tun_id.
func (m Match) TunID(id uint64) Match { m.tunID, m.has = id, m.has|hasTunID; return m }

// keywords are ovs-ofctl's protocol keywords by ethertype and IP protocol.
var keywords = map[[2]uint16]string{
	{EthIPv4, 0}: "ip", {EthIPv6, 0}: "ipv6", {EthARP, 0}: "arp",
	{EthIPv4, 1}: "icmp", {EthIPv4, 6}: "tcp", {EthIPv4, 17}: "udp", {EthIPv4, 132}: "sctp",
	{EthIPv6, 58}: "icmp6", {EthIPv6, 6}: "tcp6", {EthIPv6, 17}: "udp6", {EthIPv6, 132}: "sctp6",
}

func (m Match) keyword() string {
	if m.has&hasEthType == 0 || m.ethType == EthARP && m.has&hasIPProto != 0 {
		return ""
	}
	p := uint16(0)
	if m.has&hasIPProto != 0 {
		p = uint16(m.ipProto)
		if p == 0 {
			return ""
		}
	}
	return keywords[[2]uint16{m.ethType, p}]
}

// String renders the match in ovs-ofctl syntax ("" matches everything).
func (m Match) String() string {
	var f []string
	kw := m.keyword()
	if kw != "" {
		f = append(f, kw)
	}
	if m.has&hasInPort != 0 {
		f = append(f, "in_port="+portName(m.inPort))
	}
	if m.tunSrc.IsValid() {
		if m.tunSrc.Is4() {
			f = append(f, "tun_src="+m.tunSrc.String())
		} else {
			f = append(f, "tun_ipv6_src="+m.tunSrc.String())
		}
	}
	if m.has&hasTunID != 0 {
		f = append(f, fmt.Sprintf("tun_id=%#x", m.tunID))
	}
	for i, r := range m.regs {
		if r.m != 0 {
			f = append(f, fmt.Sprintf("reg%d=%s", i, masked(uint64(r.v), uint64(r.m), 32)))
		}
	}
	if m.has&hasVLAN != 0 {
		s := fmt.Sprintf("vlan_tci=0x%04x", m.vlanTCI.v)
		if m.vlanTCI.m != 0xffff {
			s += fmt.Sprintf("/0x%04x", m.vlanTCI.m)
		}
		f = append(f, s)
	}
	if m.has&hasEthDst != 0 {
		f = append(f, "dl_dst="+m.ethDst.String())
	}
	if m.has&hasEthSrc != 0 {
		f = append(f, "dl_src="+m.ethSrc.String())
	}
	if m.has&hasEthType != 0 && kw == "" {
		f = append(f, fmt.Sprintf("dl_type=0x%04x", m.ethType))
		if m.has&hasIPProto != 0 {
			f = append(f, fmt.Sprintf("nw_proto=%d", m.ipProto))
		}
	}
	if m.has&hasCTState != 0 {
		var b strings.Builder
		// trk first (it is what the others need), then in bit order.
		for _, i := range []int{5, 0, 1, 2, 3, 4, 6, 7} {
			if bit, n := uint32(1)<<i, ctFlagNames[i]; m.ctState.m&bit != 0 {
				if m.ctState.v&bit != 0 {
					b.WriteByte('+')
				} else {
					b.WriteByte('-')
				}
				b.WriteString(n)
			}
		}
		f = append(f, "ct_state="+b.String())
	}
	if m.has&hasCTZone != 0 {
		f = append(f, fmt.Sprintf("ct_zone=%d", m.ctZone))
	}
	if m.has&hasCTMark != 0 {
		f = append(f, "ct_mark="+masked(uint64(m.ctMark.v), uint64(m.ctMark.m), 32))
	}
	if m.has&hasCTNWProto != 0 {
		f = append(f, fmt.Sprintf("ct_nw_proto=%d", m.ctNWProto))
	}
	if m.has&hasCTTPSrc != 0 {
		f = append(f, fmt.Sprintf("ct_tp_src=%d", m.ctTPSrc))
	}
	if m.has&hasCTTPDst != 0 {
		f = append(f, fmt.Sprintf("ct_tp_dst=%d", m.ctTPDst))
	}
	for _, p := range []struct {
		name string
		v    netip.Prefix
	}{{"src", m.ipSrc}, {"dst", m.ipDst}} {
		if p.v.IsValid() {
			pre := "ipv6_"
			if p.v.Addr().Is4() {
				pre = "nw_"
			}
			f = append(f, pre+p.name+"="+prefix(p.v))
		}
	}
	if m.has&hasIPFrag != 0 {
		f = append(f, "nw_frag="+fragName(m.ipFrag))
	}
	if m.has&hasARPSHA != 0 {
		f = append(f, "arp_sha="+m.arpSHA.String())
	}
	if m.has&hasARPTHA != 0 {
		f = append(f, "arp_tha="+m.arpTHA.String())
	}
	if m.arpSPA.IsValid() {
		f = append(f, "arp_spa="+prefix(m.arpSPA))
	}
	if m.arpTPA.IsValid() {
		f = append(f, "arp_tpa="+prefix(m.arpTPA))
	}
	if m.has&hasTPSrc != 0 {
		f = append(f, fmt.Sprintf("tp_src=%d", m.tpSrc))
	}
	if m.has&hasTPDst != 0 {
		f = append(f, fmt.Sprintf("tp_dst=%d", m.tpDst))
	}
	if m.has&hasICMPType != 0 {
		f = append(f, fmt.Sprintf("icmp_type=%d", m.icmpType))
	}
	if m.has&hasICMPCode != 0 {
		f = append(f, fmt.Sprintf("icmp_code=%d", m.icmpCode))
	}
	if m.ndTarget.IsValid() {
		f = append(f, "nd_target="+m.ndTarget.String())
	}
	if m.has&hasNDSLL != 0 {
		f = append(f, "nd_sll="+m.ndSLL.String())
	}
	if m.has&hasNDTLL != 0 {
		f = append(f, "nd_tll="+m.ndTLL.String())
	}
	return strings.Join(f, ",")
}

// fragName renders nw_frag's value as ovs-ofctl names it (no, yes, first,
// later, not_later) or as V/M.
func fragName(f masked8) string {
	switch f {
	case masked8{0, FragAny}:
		return "no"
	case masked8{FragAny, FragAny}:
		return "yes"
	case masked8{FragAny, FragAny | FragLater}:
		return "first"
	case masked8{FragAny | FragLater, FragAny | FragLater}:
		return "later"
	case masked8{0, FragLater}:
		return "not_later"
	}
	return masked(uint64(f.v), uint64(f.m), 8)
}

// masked renders V or V/M as ovs-ofctl reads it: 0 or 0x hexadecimal.
func masked(v, m uint64, bits int) string {
	hex := func(n uint64) string {
		if n == 0 {
			return "0"
		}
		return fmt.Sprintf("%#x", n)
	}
	if bits == 64 && m == ^uint64(0) || bits < 64 && m == 1<<bits-1 {
		return hex(v)
	}
	return hex(v) + "/" + hex(m)
}

func prefix(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

// OXM classes and the OXM fields used (OpenFlow 1.4 section 7.2.3.7; NXM1
// for registers and conntrack, NXM0 for vlan_tci).
const (
	classNXM0  = 0x0000
	classNXM1  = 0x0001
	classBasic = 0x8000

	oxmInPort   = 0
	oxmEthDst   = 3
	oxmEthSrc   = 4
	oxmEthType  = 5
	oxmVLANVID  = 6
	oxmVLANPCP  = 7
	oxmIPProto  = 10
	oxmIPv4Src  = 11
	oxmIPv4Dst  = 12
	oxmTCPSrc   = 13
	oxmUDPSrc   = 15
	oxmSCTPSrc  = 17
	oxmICMPv4   = 19 // type; +1 code
	oxmARPSPA   = 22
	oxmARPTPA   = 23
	oxmARPSHA   = 24
	oxmARPTHA   = 25
	oxmIPv6Src  = 26
	oxmIPv6Dst  = 27
	oxmICMPv6   = 29 // type; +1 code
	oxmNDTarget = 31
	oxmNDSLL    = 32
	oxmNDTLL    = 33
	oxmTunnelID = 38

	nxmVLANTCI    = 4  // NXM0
	nxmTunID      = 16 // NXM1
	nxmTunIPv4Src = 31
	nxmTunIPv4Dst = 32
	nxmTunIPv6Src = 109
	nxmTunIPv6Dst = 110
	nxmIPFrag     = 26  // NXM1
	nxmCTState    = 105 // NXM1
	nxmCTZone     = 106
	nxmCTMark     = 107
	nxmCTLabel    = 108
	nxmCTNWProto  = 119
	nxmCTTPSrc    = 124
	nxmCTTPDst    = 125
)

// l4Base returns the OXM field of tp_src for the IP protocol (tp_dst is +1).
func l4Base(proto uint8) uint8 {
	switch proto {
	case ProtoTCP:
		return oxmTCPSrc
	case ProtoUDP:
		return oxmUDPSrc
	case ProtoSCTP:
		return oxmSCTPSrc
	}
	return 0
}

// Encode appends the match as OXM TLVs in prerequisite order (metadata,
// eth_type, ip_proto, L3, L4, ND), the order in which OVS checks them.
func (m Match) Encode(b []byte) []byte {
	if m.has&hasInPort != 0 {
		b = oxm(b, classBasic, oxmInPort, be32(m.inPort), nil)
	}
	if m.tunSrc.IsValid() {
		f := uint8(nxmTunIPv6Src)
		if m.tunSrc.Is4() {
			f = nxmTunIPv4Src
		}
		b = oxm(b, classNXM1, f, m.tunSrc.AsSlice(), nil)
	}
	if m.has&hasTunID != 0 {
		b = oxm(b, classNXM1, nxmTunID, binary.BigEndian.AppendUint64(nil, m.tunID), nil)
	}
	for i, r := range m.regs {
		if r.m != 0 {
			b = oxm(b, classNXM1, uint8(i), be32(r.v), be32(r.m))
		}
	}
	if m.has&hasVLAN != 0 {
		b = oxm(b, classNXM0, nxmVLANTCI, be16(m.vlanTCI.v), be16(m.vlanTCI.m))
	}
	if m.has&hasEthDst != 0 {
		b = oxm(b, classBasic, oxmEthDst, m.ethDst[:], nil)
	}
	if m.has&hasEthSrc != 0 {
		b = oxm(b, classBasic, oxmEthSrc, m.ethSrc[:], nil)
	}
	if m.has&hasCTState != 0 {
		b = oxm(b, classNXM1, nxmCTState, be32(m.ctState.v), be32(m.ctState.m))
	}
	if m.has&hasCTZone != 0 {
		b = oxm(b, classNXM1, nxmCTZone, be16(m.ctZone), nil)
	}
	if m.has&hasCTMark != 0 {
		b = oxm(b, classNXM1, nxmCTMark, be32(m.ctMark.v), be32(m.ctMark.m))
	}
	if m.has&hasEthType != 0 {
		b = oxm(b, classBasic, oxmEthType, be16(m.ethType), nil)
	}
	if m.has&hasIPProto != 0 {
		b = oxm(b, classBasic, oxmIPProto, []byte{m.ipProto}, nil)
	}
	if m.has&hasIPFrag != 0 {
		b = oxm(b, classNXM1, nxmIPFrag, []byte{m.ipFrag.v}, []byte{m.ipFrag.m})
	}
	if m.has&hasCTNWProto != 0 {
		b = oxm(b, classNXM1, nxmCTNWProto, []byte{m.ctNWProto}, nil)
	}
	if m.has&hasCTTPSrc != 0 {
		b = oxm(b, classNXM1, nxmCTTPSrc, be16(m.ctTPSrc), nil)
	}
	if m.has&hasCTTPDst != 0 {
		b = oxm(b, classNXM1, nxmCTTPDst, be16(m.ctTPDst), nil)
	}
	for i, p := range []netip.Prefix{m.ipSrc, m.ipDst} {
		if p.IsValid() {
			f := uint8(oxmIPv6Src)
			if p.Addr().Is4() {
				f = oxmIPv4Src
			}
			b = oxmPrefix(b, f+uint8(i), p)
		}
	}
	if m.arpSPA.IsValid() {
		b = oxmPrefix(b, oxmARPSPA, m.arpSPA)
	}
	if m.arpTPA.IsValid() {
		b = oxmPrefix(b, oxmARPTPA, m.arpTPA)
	}
	if m.has&hasARPSHA != 0 {
		b = oxm(b, classBasic, oxmARPSHA, m.arpSHA[:], nil)
	}
	if m.has&hasARPTHA != 0 {
		b = oxm(b, classBasic, oxmARPTHA, m.arpTHA[:], nil)
	}
	if l4 := l4Base(m.ipProto); l4 != 0 {
		if m.has&hasTPSrc != 0 {
			b = oxm(b, classBasic, l4, be16(m.tpSrc), nil)
		}
		if m.has&hasTPDst != 0 {
			b = oxm(b, classBasic, l4+1, be16(m.tpDst), nil)
		}
	}
	icmp := uint8(oxmICMPv4)
	if m.ethType == EthIPv6 {
		icmp = oxmICMPv6
	}
	if m.has&hasICMPType != 0 {
		b = oxm(b, classBasic, icmp, []byte{m.icmpType}, nil)
	}
	if m.has&hasICMPCode != 0 {
		b = oxm(b, classBasic, icmp+1, []byte{m.icmpCode}, nil)
	}
	if m.ndTarget.IsValid() {
		b = oxm(b, classBasic, oxmNDTarget, m.ndTarget.AsSlice(), nil)
	}
	if m.has&hasNDSLL != 0 {
		b = oxm(b, classBasic, oxmNDSLL, m.ndSLL[:], nil)
	}
	if m.has&hasNDTLL != 0 {
		b = oxm(b, classBasic, oxmNDTLL, m.ndTLL[:], nil)
	}
	return b
}

// Validate reports the prerequisites the match lacks, which OVS would
// reject the flow for.
func (m Match) Validate() error {
	ip := m.has&hasEthType != 0 && (m.ethType == EthIPv4 || m.ethType == EthIPv6)
	var missing []string
	if m.has&hasIPProto != 0 && !ip {
		missing = append(missing, "nw_proto without ip or ipv6")
	}
	for _, p := range []netip.Prefix{m.ipSrc, m.ipDst} {
		if p.IsValid() && (m.has&hasEthType == 0 || p.Addr().Is4() != (m.ethType == EthIPv4) || !ip) {
			missing = append(missing, "address "+p.String()+" without its ethertype")
		}
	}
	if (m.arpSPA.IsValid() || m.arpTPA.IsValid() || m.has&(hasARPSHA|hasARPTHA) != 0) && m.ethType != EthARP {
		missing = append(missing, "arp fields without arp")
	}
	if m.has&(hasTPSrc|hasTPDst) != 0 && (!ip || l4Base(m.ipProto) == 0) {
		missing = append(missing, "tp_src/tp_dst without tcp, udp or sctp")
	}
	icmp := ip && (m.ethType == EthIPv4 && m.ipProto == ProtoICMP || m.ethType == EthIPv6 && m.ipProto == ProtoICMPv6)
	if m.has&(hasICMPType|hasICMPCode) != 0 && (m.has&hasIPProto == 0 || !icmp) {
		missing = append(missing, "icmp_type/icmp_code without icmp or icmp6")
	}
	nd := m.ethType == EthIPv6 && m.ipProto == ProtoICMPv6 && m.has&hasICMPCode != 0 && m.icmpCode == 0 && m.has&hasICMPType != 0
	if m.ndTarget.IsValid() && !(nd && (m.icmpType == 135 || m.icmpType == 136)) ||
		m.has&hasNDSLL != 0 && !(nd && m.icmpType == 135) || m.has&hasNDTLL != 0 && !(nd && m.icmpType == 136) {
		missing = append(missing, "nd_target, nd_sll or nd_tll without icmp_type=135/136,icmp_code=0")
	}
	if m.has&hasIPFrag != 0 && !ip {
		missing = append(missing, "nw_frag without ip or ipv6")
	}
	ctValid := m.has&hasCTState != 0 && m.ctState.v&CTTrk != 0 &&
		(m.ctState.m&CTInv != 0 && m.ctState.v&CTInv == 0 || m.ctState.v&CTNew != 0)
	if m.has&(hasCTNWProto|hasCTTPSrc|hasCTTPDst) != 0 && (!ip || !ctValid) {
		missing = append(missing, "ct_nw_proto/ct_tp_src/ct_tp_dst without ip or ipv6 and ct_state +trk with -inv or +new")
	}
	if m.has&(hasCTTPSrc|hasCTTPDst) != 0 && m.has&hasCTNWProto == 0 {
		missing = append(missing, "ct_tp_src/ct_tp_dst without ct_nw_proto")
	}
	if len(missing) > 0 {
		return fmt.Errorf("match %q: %w: %s", m, ErrPrerequisite, strings.Join(missing, "; "))
	}
	return nil
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// oxm appends one OXM TLV; an all-ones mask is an exact match.
func oxm(b []byte, class uint16, field uint8, val, mask []byte) []byte {
	if mask != nil && allOnes(mask) {
		mask = nil
	}
	n, hasMask := len(val), uint32(0)
	if mask != nil {
		n, hasMask = 2*n, 1
	}
	b = binary.BigEndian.AppendUint32(b, uint32(class)<<16|uint32(field)<<9|hasMask<<8|uint32(n))
	return append(append(b, val...), mask...)
}

func oxmPrefix(b []byte, field uint8, p netip.Prefix) []byte {
	if p.Bits() == 0 {
		return b // matches everything: no field, as ovs-ofctl sends it
	}
	return oxm(b, classBasic, field, p.Addr().AsSlice(), net.CIDRMask(p.Bits(), p.Addr().BitLen()))
}

func allOnes(b []byte) bool {
	for _, c := range b {
		if c != 0xff {
			return false
		}
	}
	return true
}
