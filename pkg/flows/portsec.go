package flows

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// PortSecurity is what the port security flows of one container port depend on.
type PortSecurity struct {
	Cookie Cookie // any kind; rendered with CookieKindPortSecurity
	OFPort uint32
	MAC    net.HardwareAddr
	// IPs are the container's addresses: without an IPv4 one it sends no
	// IPv4 (nor ARP); without an IPv6 one only link-local IPv6.
	IPs []netip.Addr
	// L2Only: no addresses are known (no IPAM): check the source MAC only.
	L2Only bool
}

// PortSecurityFlows renders the table-0 flows of ps (see the Port security
// declarations in pipeline.go).
func PortSecurityFlows(ps PortSecurity) []Flow {
	c := ps.Cookie.WithKind(CookieKindPortSecurity)
	port := fmt.Sprintf("in_port=%d,reg1=0/0x1", ps.OFPort)
	allow := "load:1->" + RegPortSecurityChecked + ",resubmit(,0)"
	mac := "dl_src=" + ps.MAC.String()
	f := func(prio uint16, match, actions string) Flow {
		return Flow{c, TableClassifier, prio, match, actions}
	}
	if ps.L2Only {
		return []Flow{
			f(PriorityPortSecAllow, port+","+mac, allow),
			f(PriorityPortSecDrop, port, "drop"),
		}
	}
	var out []Flow
	for _, ip := range ps.IPs {
		if ip.Is4() {
			out = append(out,
				f(PriorityPortSecAllow, fmt.Sprintf("arp,%s,%s,arp_sha=%s,arp_spa=%s", port, mac, ps.MAC, ip), allow),
				f(PriorityPortSecAllow, fmt.Sprintf("ip,%s,%s,nw_src=%s", port, mac, ip), allow))
		}
	}
	// DHCP before the address is known.
	out = append(out, f(PriorityPortSecAllow, fmt.Sprintf("udp,%s,%s,nw_src=0.0.0.0,tp_src=68,tp_dst=67", port, mac), allow))
	var own []string
	for _, ip := range ps.IPs {
		if ip.Is6() {
			own = append(own, ip.String())
			out = append(out, f(PriorityPortSecAllow, fmt.Sprintf("ipv6,%s,%s,ipv6_src=%s", port, mac, ip), allow))
		}
	}
	own = append(own, "fe80::/10")
	out = append(out,
		f(PriorityPortSecAllow, fmt.Sprintf("ipv6,%s,%s,ipv6_src=fe80::/10", port, mac), allow),
		// Duplicate address detection and MLD reports come from ::.
		f(PriorityPortSecAllow, fmt.Sprintf("icmp6,%s,%s,ipv6_src=::,icmp_type=135,icmp_code=0", port, mac), allow),
		f(PriorityPortSecAllow, fmt.Sprintf("icmp6,%s,%s,ipv6_src=::,icmp_type=143", port, mac), allow))
	for _, t := range own {
		out = append(out, f(PriorityPortSecNA, fmt.Sprintf("icmp6,%s,%s,icmp_type=136,icmp_code=0,nd_target=%s", port, mac, t), allow))
	}
	out = append(out,
		f(PriorityPortSecNADrop, fmt.Sprintf("icmp6,%s,icmp_type=136", port), "drop"),
		f(PriorityPortSecDrop, port, "drop"))
	return out
}

// PortSecurityBundle renders the add-flows bundle that replaces the port
// security flows of ps.
func PortSecurityBundle(ps PortSecurity) string {
	var b strings.Builder
	b.WriteString("delete " + ps.Cookie.WithKind(CookieKindPortSecurity).Match() + "\n")
	for _, f := range PortSecurityFlows(ps) {
		b.WriteString("add " + f.String() + "\n")
	}
	return b.String()
}
