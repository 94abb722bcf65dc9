package flows

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Protocol is a transport protocol, valued by its IANA number.
type Protocol uint8

// Protocols a host port can be published for.
const (
	TCP  Protocol = 6
	UDP  Protocol = 17
	SCTP Protocol = 132
)

// ParseProtocol parses "tcp", "udp" or "sctp", case-insensitively; "" is TCP.
func ParseProtocol(s string) (Protocol, error) {
	switch strings.ToLower(s) {
	case "", "tcp":
		return TCP, nil
	case "udp":
		return UDP, nil
	case "sctp":
		return SCTP, nil
	}
	return 0, fmt.Errorf("unknown protocol %q", s)
}

// IsValid reports whether p is TCP, UDP or SCTP.
func (p Protocol) IsValid() bool { return p == TCP || p == UDP || p == SCTP }

// String returns "tcp", "udp" or "sctp", or "Protocol(N)".
func (p Protocol) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// Mapping is one requested host port, as the runtime passes it.
type Mapping struct {
	Protocol Protocol
	// HostIP is the zero Addr for every node IP, 0.0.0.0 for every IPv4
	// node IP, :: for every IPv6 node IP, or one node IP.
	HostIP                  netip.Addr
	HostPort, ContainerPort uint16
}

// Rule is one resolved exact-match translation:
// Protocol NodeIP:HostPort → ContainerIP:ContainerPort.
type Rule struct {
	Protocol      Protocol
	NodeIP        netip.Addr
	HostPort      uint16
	ContainerIP   netip.Addr
	ContainerPort uint16
}

// String renders the rule as "tcp 198.51.100.1:8080->192.0.2.10:80".
func (r Rule) String() string {
	return r.Protocol.String() + " " +
		netip.AddrPortFrom(r.NodeIP, r.HostPort).String() + "->" +
		netip.AddrPortFrom(r.ContainerIP, r.ContainerPort).String()
}

// compare orders rules IPv4 first, then by node IP, protocol, host port,
// container IP and container port.
func (r Rule) compare(o Rule) int {
	if c := r.NodeIP.Compare(o.NodeIP); c != 0 {
		return c
	}
	if r.Protocol != o.Protocol {
		return int(r.Protocol) - int(o.Protocol)
	}
	if r.HostPort != o.HostPort {
		return int(r.HostPort) - int(o.HostPort)
	}
	if c := r.ContainerIP.Compare(o.ContainerIP); c != 0 {
		return c
	}
	return int(r.ContainerPort) - int(o.ContainerPort)
}

// canon drops the zone and unmaps IPv4-mapped IPv6 addresses.
func canon(a netip.Addr) netip.Addr { return a.WithZone("").Unmap() }

// Resolve turns mappings into rules, one per node IP the mapping applies to:
//   - HostIP zero: every node IP of both families;
//   - 0.0.0.0: every IPv4 node IP; ::, every IPv6 node IP;
//   - any other address: that address only (the caller checked it is a node
//     IP).
//
// A family without a container address (containerV4 or containerV6 is the
// zero Addr) yields no rule, and so do mappings with an invalid protocol.
// IPv4-mapped IPv6 addresses are unmapped and zones dropped. The result is
// sorted (IPv4 first) without duplicates; it is nil when nothing applies.
func Resolve(mappings []Mapping, nodeIPs []netip.Addr, containerV4, containerV6 netip.Addr) []Rule {
	containerV4, containerV6 = canon(containerV4), canon(containerV6)
	container := func(a netip.Addr) netip.Addr {
		if a.Is4() {
			if containerV4.Is4() {
				return containerV4
			}
		} else if containerV6.Is6() {
			return containerV6
		}
		return netip.Addr{}
	}
	nodes := make([]netip.Addr, 0, len(nodeIPs))
	for _, n := range nodeIPs {
		if n = canon(n); n.IsValid() && !n.IsUnspecified() {
			nodes = append(nodes, n)
		}
	}

	var rules []Rule
	add := func(m Mapping, node netip.Addr) {
		if c := container(node); c.IsValid() {
			rules = append(rules, Rule{m.Protocol, node, m.HostPort, c, m.ContainerPort})
		}
	}
	for _, m := range mappings {
		if !m.Protocol.IsValid() {
			continue
		}
		host := canon(m.HostIP)
		switch {
		case !host.IsValid():
			for _, n := range nodes {
				add(m, n)
			}
		case host.IsUnspecified():
			for _, n := range nodes {
				if n.Is4() == host.Is4() {
					add(m, n)
				}
			}
		default:
			add(m, host)
		}
	}
	slices.SortFunc(rules, Rule.compare)
	return slices.Compact(rules)
}

// Localhost is the loopback address a mapping without a host IP (or with
// 0.0.0.0) is also published on, as the reference portmap does.
var Localhost = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// ResolveLoopback turns mappings into the translations of the node's IPv4
// loopback addresses (HostPorts.Loopback): a mapping without a host IP, or
// with 0.0.0.0, on Localhost; one whose host IP is an IPv4 loopback
// address on that address. There is none without a container IPv4 address,
// and none for ::1: IPv6 drops a packet to or from ::1 that arrives on any
// interface but lo, so the reply of a translated connection could never
// come back. Sorted, without duplicates; nil when nothing applies.
func ResolveLoopback(mappings []Mapping, containerV4 netip.Addr) []Rule {
	if containerV4 = canon(containerV4); !containerV4.Is4() {
		return nil
	}
	var rules []Rule
	for _, m := range mappings {
		host := canon(m.HostIP)
		switch {
		case !m.Protocol.IsValid():
			continue
		case !host.IsValid() || host.Is4() && host.IsUnspecified():
			host = Localhost
		case !host.Is4() || !host.IsLoopback():
			continue
		}
		rules = append(rules, Rule{m.Protocol, host, m.HostPort, containerV4, m.ContainerPort})
	}
	slices.SortFunc(rules, Rule.compare)
	return slices.Compact(rules)
}
