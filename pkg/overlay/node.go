package overlay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// Discover reads the node's facts for c: of its InternalIPs addrs, the
// one the tunnel goes from (of c.Underlay's family; IPv4 first where it
// is Auto), the subnet its link gives it, and whether that link is the
// interface of a bridge of OVSDB cli (nil: none; the node cannot tell).
func Discover(ctx context.Context, cli *ovsdb.Client, c Config, addrs []netip.Addr, podCIDRs []netip.Prefix) (Facts, error) {
	f := Facts{Mode: c.Mode, PodCIDRs: podCIDRs}
	if c.Mode == None {
		return f, nil
	}
	all, err := netlinksafe.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return f, fmt.Errorf("listing addresses: %w", err)
	}
	for _, v4 := range c.Underlay.families() {
		for _, a := range addrs {
			if a.Is4() != v4 || f.Local.IsValid() {
				continue
			}
			for _, ad := range all {
				ip, ok := netip.AddrFromSlice(ad.IP)
				if !ok || ip.Unmap() != a {
					continue
				}
				ones, _ := ad.Mask.Size()
				f.Local, f.BridgeLink = netip.PrefixFrom(a, ones), ad.LinkIndex
			}
		}
	}
	if !f.Local.IsValid() || cli == nil {
		return f, nil
	}
	l, err := netlink.LinkByIndex(f.BridgeLink)
	if err != nil {
		return f, fmt.Errorf("the link of %s: %w", f.Local.Addr(), err)
	}
	f.MTU = l.Attrs().MTU
	br, err := cli.Bridge(ctx, l.Attrs().Name)
	if err != nil {
		return f, err
	}
	if br != nil {
		f.Bridge, f.Datapath = br.Name, br.DatapathType
		mtu, err := uplinkMTU(ctx, cli, br.Name)
		if err != nil {
			return f, err
		}
		if mtu > 0 {
			f.MTU = mtu
		}
	}
	return f, nil
}

// uplinkMTU is the largest MTU of the uplinks of bridge: its ports that
// are not ours (no owner of this suite), not internal and not tunnels; 0
// where it has none. It, not the bridge interface's, is what the tunnel's
// packets leave by: Open vSwitch gives a bridge interface the smallest
// MTU of the bridge's ports, the pods' among them, which the tunnel's
// own MTU would then lower at each pass.
func uplinkMTU(ctx context.Context, cli *ovsdb.Client, bridge string) (int, error) {
	ports, err := cli.BridgePorts(ctx, bridge)
	if err != nil {
		return 0, err
	}
	mtu := 0
	for _, p := range ports {
		if p.Port.ExternalIDs[ovsdb.KeyOwner] != "" || p.Interface.MTU == nil {
			continue
		}
		switch p.Interface.Type {
		case "", "system", "dpdk", "afxdp", "afxdp-nonpmd":
			mtu = max(mtu, *p.Interface.MTU)
		}
	}
	return mtu, nil
}

// Apply makes the node's tunnel what f and p say, before the caller puts
// the routes to the tunnelled ranges in: the tunnel port with its record
// (one OVSDB transaction), then its flows on the bridge (one bundle), then
// the next hops' neighbours. ovsdbEndpoint names the bridge's OpenFlow
// endpoint.
func Apply(ctx context.Context, cli *ovsdb.Client, ovsdbEndpoint endpoint.Endpoint, f Facts, p Plan) error {
	if f.Bridge == "" {
		return fmt.Errorf("overlay %s: %s is not on an Open vSwitch bridge's interface", f.Mode, f.Local.Addr())
	}
	rec := RecordOf(f.PodCIDRs, p)
	ofport, err := cli.EnsureTunnel(ctx, ovsdb.TunnelSpec{Bridge: f.Bridge, Name: PortName, Type: f.Mode.TunnelType(),
		LocalIP: f.Local.Addr(), Record: map[string]string{KeyRecord: rec.Encode()}})
	if err != nil {
		return err
	}
	l, err := netlink.LinkByIndex(f.BridgeLink)
	if err != nil {
		return fmt.Errorf("bridge interface %s: %w", f.Bridge, err)
	}
	mac, ok := openflow.MACFrom(l.Attrs().HardwareAddr)
	if !ok {
		return fmt.Errorf("bridge interface %s has no MAC", f.Bridge)
	}
	target := endpoint.OpenFlow(endpoint.Endpoint{}, ovsdbEndpoint, f.Bridge)
	o := rec.Overlay(uint32(ofport), mac)
	// Flows already as they should be stay (and keep their counters, the
	// overlay's drops among them).
	c := flows.OverlayCookie()
	have, err := openflow.Dump(ctx, target, uint64(c), uint64(^flows.Cookie(0)))
	if err != nil || openflow.Diff(flows.OverlayFlows(o), have) != nil {
		if err := openflow.Apply(ctx, target, flows.OverlayBundle(o)); err != nil {
			return fmt.Errorf("overlay flows on bridge %s: %w", f.Bridge, err)
		}
	}
	return ensureNeighbours(f.BridgeLink, p)
}

// Withdraw removes the node's tunnel, after the caller took the routes to
// it away: the neighbours, the flows (cli nil: no OVSDB, nothing of the
// tunnel can be there) and the tunnel port. It does nothing where there is
// no tunnel port, and returns whether there was one.
func Withdraw(ctx context.Context, cli *ovsdb.Client, ovsdbEndpoint endpoint.Endpoint) (bool, error) {
	errs := []error{RemoveNeighbours()}
	if cli == nil {
		return false, errors.Join(errs...)
	}
	have, err := cli.Tunnels(ctx)
	if err != nil || len(have) == 0 {
		return false, errors.Join(append(errs, err)...)
	}
	for _, t := range have {
		target := endpoint.OpenFlow(endpoint.Endpoint{}, ovsdbEndpoint, t.Bridge())
		if endpoint.Listening(target) {
			if err := openflow.Apply(ctx, target, flows.OverlayBundle(flows.Overlay{})); err != nil {
				errs = append(errs, fmt.Errorf("overlay flows on bridge %s: %w", t.Bridge(), err))
			}
		}
	}
	_, err = cli.RemoveTunnels(ctx)
	return true, errors.Join(append(errs, err)...)
}

// Rebuild returns, for reconcile, the overlay flows of tunnel t from its
// record, with its ofport in OVSDB and its bridge interface's MAC of now;
// ok is false when it has none of them.
func Rebuild(t ovsdb.Tunnel) (bridge string, fl []flows.Flow, ok bool) {
	rec, err := ParseRecord(t.Port.ExternalIDs[KeyRecord])
	if err != nil || t.OFPort() <= 0 || t.Bridge() == "" {
		return "", nil, false
	}
	l, err := netlinksafe.LinkByName(t.Bridge())
	if err != nil {
		return "", nil, false
	}
	mac, ok := openflow.MACFrom(l.Attrs().HardwareAddr)
	if !ok {
		return "", nil, false
	}
	fl = flows.OverlayFlows(rec.Overlay(uint32(t.OFPort()), mac))
	return t.Bridge(), fl, len(fl) > 0
}

// ensureNeighbours resolves the next hop of each family p tunnels to
// flows.OverlayMAC on the bridge interface (permanent entries).
func ensureNeighbours(link int, p Plan) error {
	var errs []error
	done := map[netip.Addr]bool{}
	for _, r := range p.Tunnel {
		if done[r.Via] {
			continue
		}
		done[r.Via] = true
		n := &netlink.Neigh{LinkIndex: link, Family: family(r.Via), State: netlink.NUD_PERMANENT,
			IP: net.IP(r.Via.AsSlice()), HardwareAddr: flows.OverlayMAC.HardwareAddr()}
		if err := netlink.NeighSet(n); err != nil {
			errs = append(errs, fmt.Errorf("neighbour %s: %w", r.Via, err))
		}
	}
	return errors.Join(errs...)
}

// RemoveNeighbours removes the next hops' neighbours from every link: an
// entry of NextHop4 or NextHop6 with flows.OverlayMAC is the overlay's.
func RemoveNeighbours() error {
	var errs []error
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		ns, err := netlink.NeighList(0, fam)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			errs = append(errs, fmt.Errorf("listing neighbours: %w", err))
			continue
		}
		for _, n := range ns {
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok || (ip.Unmap() != NextHop4 && ip.Unmap() != NextHop6) || n.HardwareAddr.String() != flows.OverlayMAC.String() {
				continue
			}
			if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing neighbour %s: %w", ip, err))
			}
		}
	}
	return errors.Join(errs...)
}

func family(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}
