// Package inspect is the node tools that show what the flows of one
// attachment do: `ovs-portmap trace` (one packet through the pipeline,
// pkg/trace) and `ovs-portmap flows` (the attachment's flows with their
// counters). They read the attachment's record in OVSDB, never write
// anything, and find the attachment by container ID and ifname or by the
// pod recorded with it (record.KeyPod).
package inspect

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/feature"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/overlay"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
	"github.com/ovsflow/ovs-cni/pkg/trace"
)

// ErrNotFound says that no port of ours is the attachment asked for.
var ErrNotFound = errors.New("no such attachment")

// Which names an attachment: ContainerID and IfName, or Pod
// (NAMESPACE/NAME, as recorded).
type Which struct {
	ContainerID, IfName, Pod string
}

func (w Which) String() string {
	if w.Pod != "" {
		return "pod " + w.Pod
	}
	return w.ContainerID + "/" + w.IfName
}

// find returns the port of the attachment w names.
func find(ctx context.Context, cli *ovsdb.Client, w Which) (ovsdb.OwnedPort, error) {
	var ports []ovsdb.OwnedPort
	var err error
	if w.Pod != "" {
		all, err := cli.OwnedPorts(ctx)
		if err != nil {
			return ovsdb.OwnedPort{}, err
		}
		for _, p := range all {
			if p.Port.ExternalIDs[record.KeyPod] == w.Pod && (w.IfName == "" || p.Attachment().IfName == w.IfName) {
				ports = append(ports, p)
			}
		}
	} else if ports, err = cli.FindPorts(ctx, ovsdb.Attachment{ContainerID: w.ContainerID, IfName: w.IfName}); err != nil {
		return ovsdb.OwnedPort{}, err
	}
	switch len(ports) {
	case 0:
		return ovsdb.OwnedPort{}, fmt.Errorf("%w: %s", ErrNotFound, w)
	case 1:
		return ports[0], nil
	}
	return ovsdb.OwnedPort{}, fmt.Errorf("%s: %d attachments (give -ifname)", w, len(ports))
}

// attachment is what the records of one port say.
type attachment struct {
	port     ovsdb.OwnedPort
	facts    trace.Facts
	cookie   flows.Cookie      // CookieKindAttachment
	target   endpoint.Endpoint // the bridge's OpenFlow endpoint
	control  string            // ovs-vswitchd's control socket, as recorded
	declared []flows.Flow      // what the records want on the bridge
}

// load reads the records of port p (ovsdbEndpoint: to find the bridge's
// OpenFlow endpoint when no record names it).
func load(p ovsdb.OwnedPort, ovsdbEndpoint endpoint.Endpoint) (attachment, error) {
	id := p.Attachment()
	at := attachment{port: p, cookie: flows.AttachmentCookie(id.ContainerID, id.IfName)}
	f := trace.Facts{ContainerID: id.ContainerID, IfName: id.IfName, Pod: p.Port.ExternalIDs[record.KeyPod],
		Bridge: p.Port.ExternalIDs[ovsdb.KeyBridge]}
	if p.Interface.OFPort != nil && *p.Interface.OFPort > 0 {
		f.OFPort = uint32(*p.Interface.OFPort)
	}
	if m, err := net.ParseMAC(p.Port.ExternalIDs[ovsdb.KeyMAC]); err == nil {
		f.MAC = m
	}
	at.target = endpoint.OpenFlow(endpoint.Endpoint{}, ovsdbEndpoint, f.Bridge)
	if rec, ok := record.PortSecurityOf(p); ok {
		at.target = rec.OpenFlow
		f.PortSec = !rec.Disabled
		f.MAC = rec.MAC.HardwareAddr()
		for _, ip := range rec.IPs {
			if ip.Is4() && !f.IPv4.IsValid() {
				f.IPv4 = ip
			} else if ip.Is6() && !f.IPv6.IsValid() {
				f.IPv6 = ip
			}
		}
		for _, g := range rec.Gateways {
			at.declared = append(at.declared, flows.GatewayFlows(g)...)
		}
	}
	for _, ft := range feature.All {
		r, ok := ft.Rebuild(p)
		if !ok {
			continue
		}
		if r.Pipeline != nil {
			at.declared = append(at.declared, r.Pipeline.SharedFlows()...)
		}
		at.declared = append(at.declared, r.Shared...)
		at.declared = append(at.declared, r.Flows...)
		if r.HostPorts != nil {
			at.target, at.control = r.Target, r.Control
			hostPortFacts(&f, *r.Pipeline, *r.HostPorts)
		}
	}
	if f.MAC == nil {
		return at, fmt.Errorf("attachment %s: no MAC recorded", id)
	}
	f.LinkLocal = flows.LinkLocalOf(f.MAC)
	at.declared = append(at.declared, flows.BaseFlows()...)
	at.facts = f
	return at, nil
}

// hostPortFacts adds what the host port record of an attachment says (its
// pipeline pl and facts a) to the facts f of its trace.
func hostPortFacts(f *trace.Facts, pl flows.Pipeline, a flows.HostPorts) {
	f.HostPorts = true
	f.Pipeline, f.Rules = pl, a.Rules
	if !a.NodeMAC.IsZero() {
		f.NodeMAC = a.NodeMAC.HardwareAddr()
	}
	f.HairpinV4, f.HairpinV6, f.SNAT = a.HairpinV4, a.HairpinV6, a.SNAT
	if a.IPv4.IsValid() {
		f.IPv4 = a.IPv4
	}
	if a.IPv6.IsValid() {
		f.IPv6 = a.IPv6
	}
	if f.MAC == nil {
		f.MAC = a.MAC.HardwareAddr()
	}
}

// ownFlows reports whether the records declare flows of the attachment's
// own (port security, host ports): one with port security off and no host
// ports has none, and their absence says nothing.
func (at attachment) ownFlows() bool {
	return slices.ContainsFunc(at.declared, func(f flows.Flow) bool {
		g := flows.GroupOf(flows.Cookie(f.Cookie))
		return g == flows.GroupPortSecurity || g == flows.GroupHostPorts
	})
}

// uplink returns the ofport of the first port of the bridge that is
// neither ours nor an internal interface (where clients outside come
// from), "" when there is none.
// hasPort reports whether one of ports is in (its OpenFlow port number, or
// its name), or in is LOCAL, the bridge's own port.
func hasPort(ports []ovsdb.OwnedPort, in string) bool {
	if in == "LOCAL" {
		return true
	}
	for _, p := range ports {
		if p.Port.Name == in || (p.Interface.OFPort != nil && fmt.Sprint(*p.Interface.OFPort) == in) {
			return true
		}
	}
	return false
}

func uplink(ports []ovsdb.OwnedPort) string {
	for _, p := range ports {
		// Not ours (an attachment, the overlay's tunnel), not the bridge's own.
		if p.Port.ExternalIDs[ovsdb.KeyOwner] == ovsdb.OwnerValue || p.Port.ExternalIDs[ovsdb.KeyOwner] == ovsdb.OwnerAgentValue || p.Interface.Type == "internal" ||
			p.Interface.OFPort == nil || *p.Interface.OFPort <= 0 {
			continue
		}
		return fmt.Sprint(*p.Interface.OFPort)
	}
	return ""
}

// peer returns another attachment of the bridge with port security and an
// address of the family of ip: the client of trace.Pod.
func peer(ports []ovsdb.OwnedPort, self ovsdb.Attachment, ip netip.Addr) trace.Peer {
	for _, p := range ports {
		if p.Port.ExternalIDs[ovsdb.KeyOwner] != ovsdb.OwnerValue || p.Attachment() == self ||
			p.Interface.OFPort == nil || *p.Interface.OFPort <= 0 {
			continue
		}
		rec, ok := record.PortSecurityOf(p)
		if !ok || rec.Disabled || rec.L2Only {
			continue
		}
		if i := slices.IndexFunc(rec.IPs, func(a netip.Addr) bool { return a.Is4() == ip.Is4() }); i >= 0 {
			return trace.Peer{OFPort: uint32(*p.Interface.OFPort), MAC: rec.MAC.HardwareAddr(), IP: rec.IPs[i]}
		}
	}
	return trace.Peer{}
}

// readOverlay reads the overlay's tunnel port of the attachment's bridge
// (pkg/overlay: its record, ofport and name) and the bridge interface's
// MAC (mac_in_use of its row in ports), and declares the overlay's flows.
// A bridge without a tunnel leaves the facts' Overlay zero.
func (at *attachment) readOverlay(ctx context.Context, cli *ovsdb.Client, ports []ovsdb.OwnedPort) error {
	ts, err := cli.Tunnels(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ts, func(t ovsdb.Tunnel) bool { return t.Bridge() == at.facts.Bridge && t.OFPort() > 0 })
	if i < 0 {
		return nil
	}
	t := ts[i]
	rec, err := overlay.ParseRecord(t.Port.ExternalIDs[overlay.KeyRecord])
	if err != nil {
		return fmt.Errorf("tunnel port %s: %w", t.Port.Name, err)
	}
	var mac openflow.MAC
	for _, p := range ports {
		if p.Interface.Name == at.facts.Bridge && p.Interface.MACInUse != nil {
			if m, err := net.ParseMAC(*p.Interface.MACInUse); err == nil {
				mac, _ = openflow.MACFrom(m)
			}
		}
	}
	if mac.IsZero() {
		return fmt.Errorf("bridge %s: its interface has no MAC in OVSDB (mac_in_use)", at.facts.Bridge)
	}
	at.facts.Overlay, at.facts.TunnelName = rec.Overlay(uint32(t.OFPort()), mac), t.Port.Name
	at.declared = append(at.declared, flows.OverlayFlows(at.facts.Overlay)...)
	return nil
}
