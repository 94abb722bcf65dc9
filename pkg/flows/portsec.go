package flows

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
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
type PortSecurity struct {
	Cookie Cookie // any kind; rendered with CookieKindPortSecurity
	OFPort uint32
	MAC    net.HardwareAddr
	// IPs are the container's addresses: without an IPv4 one it sends no
	// IPv4 (nor ARP); without an IPv6 one only from LinkLocal.
	IPs []netip.Addr
	// LinkLocal is the container interface's IPv6 link-local address
	// (EUI-64 of MAC, pinned by ovs-bridge); invalid: none allowed.
	LinkLocal netip.Addr
	// L2Only: no addresses are known (no IPAM): check the source MAC only.
	L2Only bool
	// AllowRouter lets the container send router advertisements and
	// redirects; AllowDHCPServer DHCPv4/DHCPv6 server and relay frames.
	AllowRouter, AllowDHCPServer bool
	VLAN                         PortVLAN
	// Disabled: portSecurity is off; only the VLAN isolation flow remains.
	Disabled bool
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

// PortSecurityFlows renders the table-0 flows of ps (see the Port security
// declarations in pipeline.go). Without Disabled, every frame from the port
// is either dropped or passes an allow flow that marks it checked and
// resubmits it to table 0.
func PortSecurityFlows(ps PortSecurity) []Flow {
	c := ps.Cookie.WithKind(CookieKindPortSecurity)
	f := func(prio uint16, match, actions string) Flow {
		return Flow{c, TableClassifier, prio, match, actions}
	}
	var out []Flow
	if ps.VLAN != Untagged {
		out = append(out, f(PriorityVLANIsolation, fmt.Sprintf("in_port=%d", ps.OFPort), "NORMAL"))
	}
	if ps.Disabled {
		return out
	}
	// port: unchecked frames from the container's port; on an access port
	// they carry no 802.1Q header at all (neither a VLAN nor a priority tag
	// hiding another tag).
	port := fmt.Sprintf("in_port=%d,reg1=0/0x1", ps.OFPort)
	if ps.VLAN != Trunk {
		port += ",vlan_tci=0x0000/0x1000"
	}
	allow := "load:1->" + RegPortSecurityChecked + ",resubmit(,0)"
	mac := "dl_src=" + ps.MAC.String()
	raw := fmt.Sprintf("in_port=%d,reg1=0/0x1", ps.OFPort)
	if ps.VLAN == Trunk {
		// A second tag would be payload (vlan-limit 1) that a switch
		// behind the uplink may read as a VLAN of its own.
		for _, tpid := range []string{"0x8100", "0x88a8"} {
			out = append(out, f(PriorityPortSecGuard, raw+",vlan_tci=0x1000/0x1000,dl_type="+tpid, "drop"))
		}
	}
	if !ps.AllowRouter {
		out = append(out,
			f(PriorityPortSecGuard, "icmp6,"+raw+",icmp_type=134", "drop"), // router advertisement
			f(PriorityPortSecGuard, "icmp6,"+raw+",icmp_type=137", "drop"), // redirect
			f(PriorityPortSecGuard, "icmp,"+raw+",icmp_type=5", "drop"))    // IPv4 redirect
	}
	if !ps.AllowDHCPServer {
		out = append(out,
			f(PriorityPortSecGuard, "udp,"+raw+",tp_src=67", "drop"),   // DHCPv4 server
			f(PriorityPortSecGuard, "udp6,"+raw+",tp_src=547", "drop")) // DHCPv6 server or relay
	}
	if ps.L2Only {
		return append(out,
			f(PriorityPortSecAllow, port+","+mac, allow),
			f(PriorityPortSecDrop, raw, "drop"))
	}
	for _, ip := range ps.IPs {
		if ip.Is4() {
			out = append(out,
				f(PriorityPortSecAllow, fmt.Sprintf("arp,%s,%s,arp_sha=%s,arp_spa=%s", port, mac, ps.MAC, ip), allow),
				f(PriorityPortSecAllow, fmt.Sprintf("ip,%s,%s,nw_src=%s", port, mac, ip), allow))
		}
	}
	// DHCP before the address is known: a broadcast DISCOVER or REQUEST.
	out = append(out, f(PriorityPortSecAllow, fmt.Sprintf("udp,%s,dl_dst=ff:ff:ff:ff:ff:ff,%s,nw_src=0.0.0.0,nw_dst=255.255.255.255,tp_src=68,tp_dst=67", port, mac), allow))
	var own []netip.Addr
	for _, ip := range ps.IPs {
		if ip.Is6() {
			own = append(own, ip)
		}
	}
	if ps.LinkLocal.Is6() {
		own = append(own, ps.LinkLocal)
	}
	for _, ip := range own {
		out = append(out, f(PriorityPortSecAllow, fmt.Sprintf("ipv6,%s,%s,ipv6_src=%s", port, mac, ip), allow))
	}
	// MLD reports of duplicate address detection come from ::.
	out = append(out, f(PriorityPortSecAllow, fmt.Sprintf("icmp6,%s,%s,ipv6_src=::,icmp_type=143", port, mac), allow))
	// Neighbour discovery: advertisements only for its own addresses,
	// solicitations only from them (or from :: for duplicate address
	// detection, which carries no link-layer option), and a link-layer
	// option, when there is one, only with its own MAC.
	none := "00:00:00:00:00:00"
	for _, ip := range own {
		for _, ll := range []string{ps.MAC.String(), none} {
			out = append(out,
				f(PriorityPortSecND, fmt.Sprintf("icmp6,%s,%s,ipv6_src=%s,icmp_type=135,icmp_code=0,nd_sll=%s", port, mac, ip, ll), allow),
				f(PriorityPortSecND, fmt.Sprintf("icmp6,%s,%s,icmp_type=136,icmp_code=0,nd_target=%s,nd_tll=%s", port, mac, ip, ll), allow))
		}
	}
	out = append(out,
		f(PriorityPortSecND, fmt.Sprintf("icmp6,%s,%s,ipv6_src=::,icmp_type=135,icmp_code=0,nd_sll=%s", port, mac, none), allow),
		f(PriorityPortSecNDDrop, "icmp6,"+raw+",icmp_type=135", "drop"),
		f(PriorityPortSecNDDrop, "icmp6,"+raw+",icmp_type=136", "drop"),
		f(PriorityPortSecDrop, raw, "drop"))
	return out
}

// TombstoneBundle renders the add-flows bundle that makes the ports with
// these ofports drop everything for TombstoneTimeout seconds.
func TombstoneBundle(ofports ...uint32) string {
	var b strings.Builder
	c := CookieSuite | Cookie(CookieKindTombstone)<<CookieKindShift
	for _, p := range ofports {
		f := Flow{c, TableClassifier, PriorityTombstone, fmt.Sprintf("hard_timeout=%d,in_port=%d", TombstoneTimeout, p), "drop"}
		b.WriteString("add " + f.String() + "\n")
	}
	return b.String()
}

// TombstoneRemoval renders the bundle line that removes the tombstone on
// ofport, if there is one: a new port that requested the number of a port
// deleted less than TombstoneTimeout ago must not drop everything.
func TombstoneRemoval(ofport uint32) string {
	c := CookieSuite | Cookie(CookieKindTombstone)<<CookieKindShift
	return fmt.Sprintf("delete_strict cookie=%#x/-1,table=%d,priority=%d,in_port=%d\n", uint64(c), TableClassifier, PriorityTombstone, ofport)
}

// PortSecurityBundle renders the add-flows bundle that replaces the port
// flows of ps; extra flows (the base flow of a secure bridge) go in with them.
func PortSecurityBundle(ps PortSecurity, extra ...Flow) string {
	var b strings.Builder
	b.WriteString("delete " + ps.Cookie.WithKind(CookieKindPortSecurity).Match() + "\n")
	for _, f := range append(PortSecurityFlows(ps), extra...) {
		b.WriteString("add " + f.String() + "\n")
	}
	return b.String()
}
