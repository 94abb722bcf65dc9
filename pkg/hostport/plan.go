package hostport

import (
	"fmt"
	"net/netip"
	"slices"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// ContainerFacts picks, from a result, the first IPv4 and IPv6 address of the
// interface ifname that has a sandbox (or of IPs with no interface), and that
// interface's MAC (zero when it has none, or not a 48-bit one): the
// prevResult is where the MAC is parsed.
func ContainerFacts(r *current.Result, ifname string) (v4, v6 netip.Addr, mac openflow.MAC) {
	idx := -1
	for i, iface := range r.Interfaces {
		if iface != nil && iface.Name == ifname && iface.Sandbox != "" {
			idx = i
			mac, _ = openflow.ParseMAC(iface.Mac)
			break
		}
	}
	var addrs []netip.Addr
	for _, ipc := range r.IPs {
		if ipc == nil || ipc.Interface != nil && *ipc.Interface != idx {
			continue
		}
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			addrs = append(addrs, a.Unmap())
		}
	}
	v4, v6 = FirstAddrs(addrs)
	return v4, v6, mac
}

// FirstAddrs picks the first IPv4 and the first IPv6 address of addrs, the
// container addresses whose host ports are published.
func FirstAddrs(addrs []netip.Addr) (v4, v6 netip.Addr) {
	for _, a := range addrs {
		if a.Is4() && !v4.IsValid() {
			v4 = a
		} else if a.Is6() && !v6.IsValid() {
			v6 = a
		}
	}
	return v4, v6
}

// NodeIPs are the global unicast addresses of the bridge's internal interface.
func NodeIPs(bridge string) ([]netip.Addr, error) {
	l, err := bridgeLink(bridge)
	if err != nil {
		return nil, err
	}
	return nodeIPsOf(l, bridge)
}

// bridgeLink is the bridge's internal interface, where the node addresses are.
func bridgeLink(bridge string) (netlink.Link, error) {
	l, err := netlink.LinkByName(bridge)
	if err != nil {
		return nil, fmt.Errorf("bridge interface %q: %w", bridge, err)
	}
	return l, nil
}

// nodeIPsOf are the global unicast addresses of l, the interface of bridge.
func nodeIPsOf(l netlink.Link, bridge string) ([]netip.Addr, error) {
	addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("addresses of %q: %w", bridge, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// NodeMAC is the MAC of the bridge's internal interface, where the node
// addresses are.
func NodeMAC(bridge string) (openflow.MAC, error) {
	l, err := bridgeLink(bridge)
	if err != nil {
		return openflow.MAC{}, err
	}
	return linkMAC(l, bridge)
}

// linkMAC is the MAC of l, the interface of bridge.
func linkMAC(l netlink.Link, bridge string) (openflow.MAC, error) {
	m, ok := openflow.MACFrom(l.Attrs().HardwareAddr)
	if !ok {
		return m, fmt.Errorf("bridge interface %q has MAC %q, not a 48-bit one", bridge, l.Attrs().HardwareAddr)
	}
	return m, nil
}

// vlanZero refuses host ports on a port off VLAN 0 (ovs-bridge's "vlan" or
// "trunk"). The node's addresses are on VLAN 0: a host port there would
// open a DNAT path from VLAN 0 into the port's VLAN, past the VLAN
// isolation, and the pipeline's tables 40 and 41 know a container by its
// address alone, which networks on different VLANs may share.
func vlanZero(port ovsdb.OwnedPort, mappings int) error {
	if mappings == 0 {
		return nil
	}
	if t := port.Port.Tag; t != nil && *t != 0 {
		return invalid(`port %q is on VLAN %d (ovs-bridge "vlan"): host ports are served on VLAN 0 only, where the node's addresses are`, port.Port.Name, *t)
	}
	if len(port.Port.Trunks) > 0 {
		return invalid(`port %q is a trunk of VLANs %v (ovs-bridge "trunk"): host ports are served on VLAN 0 only, where the node's addresses are`, port.Port.Name, port.Port.Trunks)
	}
	return nil
}

// Plan is what an ADD resolved for one attachment: what Publish publishes.
type Plan struct {
	Port      ovsdb.OwnedPort   // the attachment's port, as read before this ADD
	Target    endpoint.Endpoint // the bridge's OpenFlow endpoint
	Control   string            // ovs-vswitchd's control socket ("": unixctl.Find)
	Pipeline  flows.Pipeline
	HostPorts flows.HostPorts
	// IDs are other external_ids the port takes in the same transaction
	// as the record.
	IDs map[string]string
}

// Options are the host port settings of a network.
type Options struct {
	Mappings []flows.Mapping
	NodeIPs  []netip.Addr // nil: the addresses of the bridge's internal interface
	NodeMAC  openflow.MAC // zero: the MAC of the bridge's internal interface
	SNAT     bool
	MasqAll  bool
	OpenFlow endpoint.Endpoint // override of the bridge's OpenFlow target (zero: none)
	OVSDB    endpoint.Endpoint // OVSDB endpoint, to derive the default OpenFlow target
	// VswitchdControl is ovs-vswitchd's control socket ("": unixctl.Find).
	VswitchdControl string
	Pipeline        flows.Pipeline // the pipeline's zones and limits
	// ConnRate and ConnBurst bound each mapping's new connections per
	// second (0: no bound; see flows.TablePortmapNew).
	ConnRate, ConnBurst uint32
}

// Resolve turns options and facts into the attachment's flow facts: node
// addresses, hostIP checks, rules, hairpin sources.
func Resolve(conf Options, containerID, ifname string, port ovsdb.OwnedPort, v4, v6 netip.Addr, mac openflow.MAC) (*Plan, error) {
	bridge := port.Port.ExternalIDs[ovsdb.KeyBridge]
	nodeIPs, nodeMAC := conf.NodeIPs, conf.NodeMAC
	if nodeIPs == nil || nodeMAC.IsZero() {
		// One lookup of the bridge interface for both.
		l, err := bridgeLink(bridge)
		if err != nil {
			return nil, err
		}
		if nodeMAC.IsZero() {
			if nodeMAC, err = linkMAC(l, bridge); err != nil {
				return nil, err
			}
		}
		if nodeIPs == nil {
			if nodeIPs, err = nodeIPsOf(l, bridge); err != nil {
				return nil, err
			}
		}
	}
	// Loopback host IPs are the node's own processes' (HostPorts.Loopback,
	// served by nft alone), not the bridge's; ::1 cannot be served (see
	// flows.ResolveLoopback): such a mapping is left out, not refused, so
	// that the container still starts.
	loopback := flows.ResolveLoopback(conf.Mappings, v4)
	mappings := make([]flows.Mapping, 0, len(conf.Mappings))
	for _, m := range conf.Mappings {
		if !m.HostIP.IsLoopback() {
			mappings = append(mappings, m)
		}
	}
	conf.Mappings = mappings
	for i, m := range conf.Mappings {
		if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() && !slices.Contains(nodeIPs, m.HostIP) {
			return nil, invalid("portMappings[%d]: hostIP %s is not a node address (%v)", i, m.HostIP, nodeIPs)
		}
	}
	if err := vlanZero(port, len(conf.Mappings)+len(loopback)); err != nil {
		return nil, err
	}
	if port.Interface.OFPort == nil || *port.Interface.OFPort <= 0 {
		return nil, fmt.Errorf("port %q has no ofport", port.Port.Name)
	}
	if mac.IsZero() {
		return nil, fmt.Errorf("prevResult interface %q has no MAC", ifname)
	}
	a := flows.HostPorts{
		Cookie: flows.AttachmentCookie(containerID, ifname), OFPort: uint32(*port.Interface.OFPort), MAC: mac, NodeMAC: nodeMAC,
		IPv4: v4, IPv6: v6, Rules: flows.Resolve(conf.Mappings, nodeIPs, v4, v6),
		SNAT: conf.SNAT, MasqAll: conf.MasqAll, ConnRate: conf.ConnRate, ConnBurst: conf.ConnBurst,
	}
	for _, n := range nodeIPs {
		if n.Is4() && !a.HairpinV4.IsValid() {
			a.HairpinV4 = n
		}
		if n.Is6() && !a.HairpinV6.IsValid() {
			a.HairpinV6 = n
		}
	}
	if !a.HairpinV4.IsValid() {
		a.IPv4 = netip.Addr{} // no IPv4 node address: nothing IPv4 to publish
	}
	// The node's own connections to a loopback host port leave with the
	// bridge interface's address (masquerade): none without an IPv4 one.
	if a.IPv4.IsValid() {
		a.Loopback = loopback
	}
	if !a.HairpinV6.IsValid() {
		a.IPv6 = netip.Addr{}
	}
	return &Plan{Port: port, Target: endpoint.OpenFlow(conf.OpenFlow, conf.OVSDB, bridge),
		Control: conf.VswitchdControl, Pipeline: conf.Pipeline, HostPorts: a}, nil
}
