// Package trace asks Open vSwitch what the pipeline does with one packet of
// one attachment, and says it in one line. It is pure: Probe builds the
// packet of a question (a host port from outside, a rogue router
// advertisement from the pod, ...) from the attachment's record, as the
// flow argument of ofproto/trace and the conntrack state of each
// recirculation; Parse reads ofproto/trace's answer; Verdict names the
// flow that decided by what pkg/flows declared it for (flows.Name).
// `ovs-portmap trace` (pkg/inspect) does the I/O.
//
// ofproto/trace answers in text only, so Parse reads text: the steps
// ("40. ip,nw_dst=..., priority 100, cookie 0x..."), their actions, and the
// datapath actions of each pass. What it reads back is the table, priority
// and cookie of each step and the actions' ct, nat and output; the
// flow's name comes from the declared flows, not from the text.
package trace

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Packet is the packet of a question, rendered as ofproto/trace's flow
// argument: the syntax of ovs-ofctl's flows with the exact-match field
// names its parser needs (udp_src, not tp_src; icmpv6_type for ICMPv6).
type Packet struct {
	InPort string // an OpenFlow port number, or LOCAL
	// TunSrc and TunID are the outer source and the key of a packet that
	// came in on a tunnel port; zero: none.
	TunSrc netip.Addr
	TunID  uint64
	// Reg1 is preset on the packet (RegPortSecurityChecked: a frame that
	// passed the port security of its own port); 0: none.
	Reg1           uint32
	EthSrc, EthDst net.HardwareAddr
	VLAN           uint16 // 802.1Q VID; 0: untagged
	// Proto is the ovs-ofctl protocol keyword: tcp, udp, sctp, icmp, icmp6,
	// arp, ip, ipv6 (tcp and udp become tcp6 and udp6 for IPv6).
	Proto            string
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	ICMPType         int // -1: none
	NDTarget         netip.Addr
	ARPOp            uint16
	Frag             string // nw_frag: "first", "later"; "": not a fragment
}

// String renders the flow argument of ofproto/trace.
func (p Packet) String() string {
	v6 := p.Src.Is6() || p.Dst.Is6()
	kw := p.Proto
	if v6 && (kw == "tcp" || kw == "udp" || kw == "sctp") {
		kw += "6"
	}
	f := []string{kw, "in_port=" + p.InPort}
	switch {
	case p.TunSrc.Is4():
		f = append(f, "tun_src="+p.TunSrc.String())
	case p.TunSrc.Is6():
		f = append(f, "tun_ipv6_src="+p.TunSrc.String())
	}
	if p.TunID != 0 {
		f = append(f, fmt.Sprintf("tun_id=%#x", p.TunID))
	}
	if p.Reg1 != 0 {
		f = append(f, fmt.Sprintf("reg1=0x%x", p.Reg1))
	}
	if p.VLAN != 0 {
		f = append(f, fmt.Sprintf("dl_vlan=%d", p.VLAN))
	}
	if p.EthSrc != nil {
		f = append(f, "dl_src="+p.EthSrc.String())
	}
	if p.EthDst != nil {
		f = append(f, "dl_dst="+p.EthDst.String())
	}
	switch {
	case kw == "arp":
		f = append(f, fmt.Sprintf("arp_op=%d", p.ARPOp), "arp_spa="+p.Src.String(), "arp_tpa="+p.Dst.String())
		if p.EthSrc != nil {
			f = append(f, "arp_sha="+p.EthSrc.String())
		}
	case v6:
		f = append(f, "ipv6_src="+p.Src.String(), "ipv6_dst="+p.Dst.String())
	case p.Src.IsValid():
		f = append(f, "nw_src="+p.Src.String(), "nw_dst="+p.Dst.String())
	}
	if p.Frag != "" {
		f = append(f, "nw_frag="+p.Frag)
	}
	switch p.Proto {
	case "tcp", "udp", "sctp":
		if p.Frag == "" || p.Frag == "first" {
			f = append(f, fmt.Sprintf("%s_src=%d", p.Proto, p.SrcPort), fmt.Sprintf("%s_dst=%d", p.Proto, p.DstPort))
		}
	case "icmp":
		if p.ICMPType >= 0 {
			f = append(f, fmt.Sprintf("icmp_type=%d", p.ICMPType), "icmp_code=0")
		}
	case "icmp6":
		if p.ICMPType >= 0 {
			f = append(f, fmt.Sprintf("icmpv6_type=%d", p.ICMPType), "icmpv6_code=0")
		}
		if p.NDTarget.IsValid() {
			f = append(f, "nd_target="+p.NDTarget.String())
		}
	}
	return strings.Join(f, ",")
}
