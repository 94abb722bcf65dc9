package flows

import (
	"net"
	"net/netip"
	"slices"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// PortVLAN is how ovs-bridge configured the VLAN of a container port.
type PortVLAN uint8

const (
	// Untagged is an access port of VLAN 0, the node's own segment (no
	// "vlan", no "trunk"): it takes untagged frames only.
	Untagged PortVLAN = iota
	// Access is an access port of another VLAN ("vlan": N): untagged
	// frames only, and no path to the node's addresses.
	Access
	// Trunk is a trunk port ("trunk"): tagged frames of its VLANs only
	// (ovs-vswitchd drops the others), and no path to the node's
	// addresses.
	Trunk
)

// PortSecurity is what ovs-bridge's table-0 flows of one container port
// depend on: port security, and VLAN isolation from the host port pipeline.
// ovs-bridge builds it once per state of the port; the port's record
// (record.PortSecurity) stores it as JSON, less what the port gives again
// (the fields tagged "-"), and reconcile gets it back from that record.
type PortSecurity struct {
	Cookie Cookie       `json:"-"` // any kind; rendered with CookieKindPortSecurity
	OFPort uint32       `json:"-"`
	MAC    openflow.MAC `json:"mac"`
	// IPs are the container's addresses: without an IPv4 one it sends no
	// IPv4 (nor ARP); without an IPv6 one only from LinkLocal.
	IPs []netip.Addr `json:"ips,omitempty"`
	// LinkLocal is the container interface's IPv6 link-local address
	// (EUI-64 of MAC, pinned by ovs-bridge); invalid: none allowed.
	LinkLocal netip.Addr `json:"-"`
	// L2Only: no addresses are known (no IPAM): check the source MAC only.
	L2Only bool `json:"l2only,omitempty"`
	// Allowed are the further prefixes the container may send from
	// (allowedAddresses: a VIP, a VRRP address, a nested guest), with ARP
	// for IPv4 ones and neighbour discovery for IPv6 ones (which are
	// single addresses: nd_target matches exactly).
	Allowed []netip.Prefix `json:"allowed,omitempty"`
	// AllowVRRP lets it send VRRP adverts to their group from its own and
	// allowed addresses; without it, VRRP is dropped.
	AllowVRRP bool `json:"allowVRRP,omitempty"`
	// AllowRouter lets the container send router advertisements and
	// redirects; AllowDHCPServer DHCPv4/DHCPv6 server and relay frames.
	AllowRouter     bool     `json:"allowRouter,omitempty"`
	AllowDHCPServer bool     `json:"allowDHCPServer,omitempty"`
	VLAN            PortVLAN `json:"vlan,omitempty"`
	// Disabled: portSecurity is off; only the VLAN isolation flow remains.
	Disabled bool `json:"disabled,omitempty"`
	// Gateways are the gateways of the port's network on the bridge's
	// internal interface (isGateway), each with its subnet's prefix
	// length: with them, the port's replies to Services go back through
	// the node (see gateway.go), port security or not.
	Gateways []netip.Prefix `json:"gateways,omitempty"`
}

// LinkLocalOf returns the IPv6 link-local address the kernel derives from
// mac in EUI-64 mode (RFC 4291 appendix A).
func LinkLocalOf(mac net.HardwareAddr) netip.Addr {
	if len(mac) != 6 {
		return netip.Addr{}
	}
	a := [16]byte{0: 0xfe, 1: 0x80, 8: mac[0] ^ 0x02, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]}
	return netip.AddrFrom16(a)
}

// PortSecurityFlows returns the table-0 flows of ps (see the Port security
// declarations in pipeline.go). Without Disabled, every frame from the port
// is either dropped or passes an allow flow that marks it checked and
// resubmits it to table 0. With Gateways, the flows that send its Service
// replies back through the node come first (gateway.go).
func PortSecurityFlows(ps PortSecurity) []Flow {
	c := ps.Cookie.WithKind(CookieKindPortSecurity)
	drop := func(prio uint16, m openflow.Match) Flow { return flow(c, TableClassifier, prio, m) }
	allowed := openflow.Actions{openflow.Load{Value: 1, Dst: RegPortSecurityChecked}, openflow.Resubmit{Table: TableClassifier}}
	allow := func(prio uint16, m openflow.Match) Flow { return flow(c, TableClassifier, prio, m, allowed...) }
	var out []Flow
	if ps.VLAN != Untagged {
		out = append(out, flow(c, TableClassifier, PriorityVLANIsolation, openflow.Match{}.InPort(ps.OFPort), openflow.Normal))
	}
	out = append(out, gatewayPortFlows(c, ps)...)
	if ps.Disabled {
		return out
	}
	mymac := ps.MAC
	// raw: unchecked frames from the container's port; port: on an access
	// port they carry no 802.1Q header at all (neither a VLAN nor a
	// priority tag hiding another tag).
	raw := func(eth uint16, proto uint8) openflow.Match {
		m := openflow.Match{}
		if eth != 0 {
			m = m.Proto(eth, proto)
		}
		return m.InPort(ps.OFPort).RegBits(RegPortSecurityChecked, 0)
	}
	port := func(eth uint16, proto uint8) openflow.Match {
		m := raw(eth, proto)
		if ps.VLAN != Trunk {
			m = m.VLANTCI(0, 0x1000)
		}
		return m
	}
	// mac: port, from the container's own MAC.
	mac := func(eth uint16, proto uint8) openflow.Match { return port(eth, proto).EthSrc(mymac) }
	const v4, v6, arp = openflow.EthIPv4, openflow.EthIPv6, openflow.EthARP
	const icmp, icmp6, udp = openflow.ProtoICMP, openflow.ProtoICMPv6, openflow.ProtoUDP
	if ps.VLAN == Trunk {
		// A second tag would be payload (vlan-limit 1) that a switch
		// behind the uplink may read as a VLAN of its own.
		for _, tpid := range []uint16{0x8100, 0x88a8} {
			out = append(out, drop(PriorityPortSecGuard, raw(0, 0).VLANTCI(0x1000, 0x1000).EthType(tpid)))
		}
	}
	if !ps.AllowRouter {
		out = append(out,
			drop(PriorityPortSecGuard, raw(v6, icmp6).ICMPType(134)), // router advertisement
			drop(PriorityPortSecGuard, raw(v6, icmp6).ICMPType(137)), // redirect
			drop(PriorityPortSecGuard, raw(v4, icmp).ICMPType(5)))    // IPv4 redirect
	}
	// VRRP (IP protocol 112) only as allowVRRP lets it, below.
	const vrrp = openflow.ProtoVRRP
	out = append(out, drop(PriorityPortSecGuard, raw(v4, vrrp)), drop(PriorityPortSecGuard, raw(v6, vrrp)))
	vrrpGroup4 := openflow.Host(netip.AddrFrom4([4]byte{224, 0, 0, 18}))
	vrrpGroup6 := openflow.Host(netip.MustParseAddr("ff02::12"))
	// DHCP servers and relays send from port 67 (547), clients listen on
	// port 68 (546) whatever the source port: a container's own client
	// sends from 68 to 67 (546 to 547), never to 68 (546).
	dhcp := []struct {
		eth      uint16
		src, dst uint16
	}{{v4, 67, 68}, {v6, 547, 546}}
	if !ps.AllowDHCPServer {
		for _, d := range dhcp {
			out = append(out,
				drop(PriorityPortSecGuard, raw(d.eth, udp).TPSrc(d.src)),
				drop(PriorityPortSecGuard, raw(d.eth, udp).TPDst(d.dst)))
		}
	}
	// Fragments (see pipeline.go): reassembled by conntrack once, dropped
	// when they do not reassemble or are not tracked (fragmented ND, RA,
	// redirects), and held to the DHCP guards by the datagram's ports. Not
	// on an L2-only port that may be a router and a DHCP server: nothing
	// of its L3 or L4 is checked.
	defragged := func(eth uint16) openflow.Match { return raw(eth, 0).RegBits(RegPortSecurityDefragged, 1) }
	for _, eth := range []uint16{v4, v6} {
		if ps.L2Only && ps.AllowRouter && ps.AllowDHCPServer {
			break
		}
		out = append(out,
			flow(c, TableClassifier, PriorityPortSecFrag,
				raw(eth, 0).RegBits(RegPortSecurityDefragged, 0).IPFrag(openflow.FragAny, openflow.FragAny),
				openflow.Load{Value: 1, Dst: RegPortSecurityDefragged},
				openflow.CT{Zone: PortSecDefragZone, Table: openflow.Table(TableClassifier)}),
			drop(PriorityPortSecGuard, defragged(eth).CTState(openflow.CTTrk|openflow.CTInv, openflow.CTTrk|openflow.CTInv)))
	}
	if !ps.AllowDHCPServer {
		for _, d := range dhcp {
			tracked := defragged(d.eth).CTState(openflow.CTTrk, openflow.CTTrk|openflow.CTInv).CTNWProto(udp)
			out = append(out,
				drop(PriorityPortSecGuard, tracked.CTTPSrc(d.src)),
				drop(PriorityPortSecGuard, tracked.CTTPDst(d.dst)))
		}
	}
	if ps.L2Only {
		if ps.AllowVRRP {
			out = append(out, allow(PriorityPortSecVRRP, mac(v4, vrrp).IPDst(vrrpGroup4)),
				allow(PriorityPortSecVRRP, mac(v6, vrrp).IPDst(vrrpGroup6)))
		}
		return append(out,
			allow(PriorityPortSecAllow, mac(0, 0)),
			drop(PriorityPortSecDrop, raw(0, 0)))
	}
	// Only unicast addresses are a container's own: an unspecified or
	// multicast one in the facts would open every frame from it.
	var ips []netip.Addr
	for _, ip := range ps.IPs {
		if ip = ip.Unmap().WithZone(""); ip.IsValid() && !ip.IsUnspecified() && !ip.IsMulticast() {
			ips = append(ips, ip)
		}
	}
	// The IPv4 sources: its own addresses, then the allowed prefixes.
	var src4 []netip.Prefix
	for _, ip := range ips {
		if ip.Is4() {
			src4 = append(src4, openflow.Host(ip))
		}
	}
	for _, p := range ps.Allowed {
		if p.Addr().Is4() && p.Bits() > 0 {
			src4 = append(src4, p.Masked())
		}
	}
	for _, p := range src4 {
		out = append(out,
			allow(PriorityPortSecAllow, mac(arp, 0).ARPSHA(mymac).ARPSPA(p)),
			allow(PriorityPortSecAllow, mac(v4, 0).IPSrc(p)))
		if ps.AllowVRRP {
			out = append(out, allow(PriorityPortSecVRRP, mac(v4, vrrp).IPSrc(p).IPDst(vrrpGroup4)))
		}
	}
	// DHCP before the address is known: a broadcast DISCOVER or REQUEST.
	out = append(out, allow(PriorityPortSecAllow, mac(v4, udp).EthDst(openflow.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}).
		IPSrc(openflow.Host(netip.IPv4Unspecified())).IPDst(openflow.Host(netip.AddrFrom4([4]byte{255, 255, 255, 255}))).
		TPSrc(68).TPDst(67)))
	var own []netip.Addr
	for _, ip := range ips {
		if ip.Is6() {
			own = append(own, ip)
		}
	}
	if ps.LinkLocal.Is6() {
		own = append(own, ps.LinkLocal)
	}
	// An allowed IPv6 address is the container's own from here on:
	// sources, and neighbour discovery for it.
	for _, p := range ps.Allowed {
		if a := p.Addr(); a.Is6() && p.IsSingleIP() && !a.IsMulticast() && !a.IsUnspecified() && !slices.Contains(own, a) {
			own = append(own, a)
		}
	}
	for _, ip := range own {
		out = append(out, allow(PriorityPortSecAllow, mac(v6, 0).IPSrc(openflow.Host(ip))))
		if ps.AllowVRRP {
			out = append(out, allow(PriorityPortSecVRRP, mac(v6, vrrp).IPSrc(openflow.Host(ip)).IPDst(vrrpGroup6)))
		}
	}
	// MLD reports of duplicate address detection come from ::.
	unspec := openflow.Host(netip.IPv6Unspecified())
	out = append(out, allow(PriorityPortSecAllow, mac(v6, icmp6).IPSrc(unspec).ICMPType(143)))
	// Neighbour discovery: advertisements only from and for its own
	// addresses, solicitations only from them (or from :: for duplicate
	// address detection of an address of its own, which carries no
	// link-layer option), and a link-layer option, when there is one, only
	// with its own MAC.
	var none openflow.MAC
	for _, ip := range own {
		for _, ll := range []openflow.MAC{mymac, none} {
			out = append(out, allow(PriorityPortSecND, mac(v6, icmp6).IPSrc(openflow.Host(ip)).ICMPType(135).ICMPCode(0).NDSLL(ll)))
			for _, src := range own {
				out = append(out, allow(PriorityPortSecND, mac(v6, icmp6).IPSrc(openflow.Host(src)).ICMPType(136).ICMPCode(0).NDTarget(ip).NDTLL(ll)))
			}
		}
		out = append(out, allow(PriorityPortSecND, mac(v6, icmp6).IPSrc(unspec).ICMPType(135).ICMPCode(0).NDTarget(ip).NDSLL(none)))
	}
	out = append(out,
		drop(PriorityPortSecNDDrop, raw(v6, icmp6).ICMPType(135)),
		drop(PriorityPortSecNDDrop, raw(v6, icmp6).ICMPType(136)),
		drop(PriorityPortSecDrop, raw(0, 0)))
	return out
}

// TombstoneBundle returns the bundle that makes the ports with these
// ofports drop everything for TombstoneTimeout seconds.
func TombstoneBundle(ofports ...uint32) openflow.Bundle {
	c := CookieSuite | Cookie(CookieKindTombstone)<<CookieKindShift
	b := make(openflow.Bundle, 0, len(ofports))
	for _, p := range ofports {
		f := flow(c, TableClassifier, PriorityTombstone, openflow.Match{}.InPort(p))
		f.HardTimeout = TombstoneTimeout
		b = append(b, f)
	}
	return b
}

// ClearPort returns the bundle entry that removes every flow of the suite
// that matches in_port=ofport, whoever left it: the tombstone of a port
// deleted less than TombstoneTimeout ago that had the number a new port
// requested again, and the flows of an ADD that died before its port was
// inserted. So a new port starts with no flow of an earlier one.
func ClearPort(ofport uint32) openflow.Delete {
	return openflow.Delete{Cookie: uint64(CookieSuite), Mask: uint64(SuiteMask), Match: openflow.Match{}.InPort(ofport)}
}

// PortSecurityBundle returns the bundle that replaces the port flows of ps;
// extra flows (the base flow of a secure bridge) go in with them.
func PortSecurityBundle(ps PortSecurity, extra ...Flow) openflow.Bundle {
	b := openflow.Bundle{ps.Cookie.WithKind(CookieKindPortSecurity).Delete()}
	for _, f := range append(PortSecurityFlows(ps), extra...) {
		b = append(b, f)
	}
	return b
}
