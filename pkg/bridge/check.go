package bridge

import (
	"context"
	"fmt"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/feature"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ipam"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// CmdCheck verifies that what ADD built is still there, naming what drifted.
func CmdCheck(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if ran, err := handOffTLS(args, conf); ran {
		return err
	}
	prev, err := cnicmd.PrevResult(&conf.PluginConf, "CHECK needs a prevResult")
	if err != nil {
		return err
	}
	ctx, cli, done, err := cnicmd.Open(conf.Endpoints.OVSDB, conf.Budget)
	if err != nil {
		return conf.Endpoints.Explain(err)
	}
	defer done()
	if conf.IPAM.Type != "" {
		if err := ipam.Check(ctx, conf.IPAM.Type, args.StdinData); err != nil {
			return fmt.Errorf("ipam %q: %w", conf.IPAM.Type, err)
		}
	}

	hostName := link.HostVethName(args.ContainerID, args.IfName)
	ports, err := cli.FindPorts(ctx, ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName})
	if err != nil {
		return err
	}
	if len(ports) != 1 {
		return fmt.Errorf("port %q of %s/%s: found %d ports with our external_ids, want 1", hostName, args.ContainerID, args.IfName, len(ports))
	}
	p := ports[0]
	onBridge, err := cli.BridgeHasPort(ctx, conf.Bridge, p.Port.UUID)
	if err != nil {
		return err
	}
	if !onBridge {
		return fmt.Errorf("port %q is not on bridge %q", p.Port.Name, conf.Bridge)
	}
	wantTag := 0
	if conf.VLAN != nil {
		wantTag = *conf.VLAN
	}
	gotTag := 0
	if p.Port.Tag != nil {
		gotTag = *p.Port.Tag
	}
	if gotTag != wantTag {
		return fmt.Errorf("port %q: VLAN tag is %d, want %d", p.Port.Name, gotTag, wantTag)
	}
	gotTrunks := slices.Clone(p.Port.Trunks)
	wantTrunks := slices.Clone(conf.Trunks)
	slices.Sort(gotTrunks)
	slices.Sort(wantTrunks)
	if !slices.Equal(gotTrunks, wantTrunks) {
		return fmt.Errorf("port %q: trunks are %v, want %v", p.Port.Name, gotTrunks, wantTrunks)
	}
	if p.Interface.OFPort == nil || *p.Interface.OFPort <= 0 {
		return fmt.Errorf("port %q: ovs-vswitchd has no ofport for it", p.Port.Name)
	}
	if conf.OFPortRequest != nil && *p.Interface.OFPort != *conf.OFPortRequest {
		return fmt.Errorf("port %q: ofport is %d, want %d (ofport_request)", p.Port.Name, *p.Interface.OFPort, *conf.OFPortRequest)
	}
	if got := p.Interface.ExternalIDs[ovsdb.KeyOVNIfaceID]; got != conf.OVNPort {
		return fmt.Errorf("port %q: Interface external_ids:%s is %q, want %q (ovnPort)", p.Port.Name, ovsdb.KeyOVNIfaceID, got, conf.OVNPort)
	}
	if err := checkFlows(ctx, p); err != nil {
		return err
	}
	hostLink, err := netlink.LinkByName(hostName)
	if err != nil {
		return fmt.Errorf("host veth %q: %w", hostName, err)
	}
	if conf.MTU > 0 && hostLink.Attrs().MTU != conf.MTU {
		return fmt.Errorf("host veth %q: MTU is %d, want %d", hostName, hostLink.Attrs().MTU, conf.MTU)
	}

	var contIf *current.Interface
	for _, i := range prev.Interfaces {
		if i != nil && i.Name == args.IfName && i.Sandbox != "" {
			contIf = i
		}
	}
	if contIf == nil {
		return fmt.Errorf("prevResult has no interface %q with a sandbox", args.IfName)
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return fmt.Errorf("opening netns %q: %w", args.Netns, err)
	}
	defer netns.Close()
	return netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(args.IfName)
		if err != nil {
			return fmt.Errorf("container interface %q: %w", args.IfName, err)
		}
		if got := l.Attrs().HardwareAddr.String(); contIf.Mac != "" && got != contIf.Mac {
			return fmt.Errorf("container interface %q: MAC is %s, want %s", args.IfName, got, contIf.Mac)
		}
		if conf.MTU > 0 && l.Attrs().MTU != conf.MTU {
			return fmt.Errorf("container interface %q: MTU is %d, want %d", args.IfName, l.Attrs().MTU, conf.MTU)
		}
		if err := ipam.CheckAddresses(args.IfName, prev.IPs); err != nil {
			return fmt.Errorf("container interface %q: %w", args.IfName, err)
		}
		if err := ipam.CheckRoutes(prev.Routes); err != nil {
			return fmt.Errorf("container interface %q: %w", args.IfName, err)
		}
		return nil
	})
}

// checkFlows compares, for each feature of pkg/feature that the port
// records, its flows with what its record says they must be
// (openflow.Diff), and, with port security, finds the flows of any other
// attachment on its ofport.
func checkFlows(ctx context.Context, p ovsdb.OwnedPort) error {
	ofport := uint32(*p.Interface.OFPort)
	dumps := map[endpoint.Endpoint][]openflow.Flow{} // the suite's flows, one dump an endpoint
	for _, f := range feature.All {
		r, ok := f.Rebuild(p)
		if !ok {
			continue // not recorded, as port security off and untagged: no flows of its own
		}
		dumped, ok := dumps[r.Target]
		if !ok {
			suite := flows.SuiteDelete()
			var err error
			if dumped, err = openflow.Dump(ctx, r.Target, suite.Cookie, suite.Mask); err != nil {
				return err
			}
			dumps[r.Target] = dumped
		}
		if r.PortSecurity != nil {
			if err := othersOnPort(p, r.Cookie, dumped); err != nil {
				return err
			}
		}
		var got []openflow.Flow
		for _, d := range dumped {
			if flows.Cookie(d.Cookie) == r.Cookie {
				got = append(got, d)
			}
		}
		if err := openflow.Diff(r.Flows, got); err != nil {
			return fmt.Errorf("port %q (ofport %d): %s flows: %w", p.Port.Name, ofport, f.Name(), err)
		}
	}
	return nil
}

// othersOnPort finds, among the dumped flows, a table-0 flow of another
// attachment than c's that matches port p's frames.
func othersOnPort(p ovsdb.OwnedPort, c flows.Cookie, dumped []openflow.Flow) error {
	ofport := uint32(*p.Interface.OFPort)
	own, _ := c.AnyKind()
	for _, f := range dumped {
		fc := flows.Cookie(f.Cookie)
		v, _ := fc.AnyKind()
		if in, ok := f.Match.InPortOf(); ok && in == ofport && f.Table == flows.TableClassifier && v != own &&
			fc.Kind() != flows.CookieKindShared && fc.Kind() != flows.CookieKindTombstone {
			return fmt.Errorf("port %q (ofport %d): a flow of another attachment matches its frames: %s", p.Port.Name, ofport, f)
		}
	}
	return nil
}
