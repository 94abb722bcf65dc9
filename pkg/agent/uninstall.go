package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/noderanges"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/overlay"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// Uninstall removes what the suite put on the node, and nothing else: the
// conflist (first: the runtime starts no new pod on the network), the
// routes of the agent's protocol, the suite's flows (by the suite's cookie
// tag) but the base flow of a bridge that deploy/node-prep.sh made, the
// suite's meters (by their range of IDs), the gateway addresses ovs-bridge
// recorded, the suite's OVSDB records (its Port rows, its QoS and Queue
// rows, the in-flight records, the bridges' keys but the owner tag),
// the nft tables of the node-local host ports, and the plugins (an
// optional one only where it is the image's own copy). The bridge, its
// uplink and its base flow stay as node-prep.sh left them. Run it once the
// DaemonSet is gone (or the agent would put everything back).
func Uninstall(ctx context.Context, cfg Config) error {
	cfg.Defaults()
	say := func(format string, args ...any) { fmt.Fprintf(cfg.Log, "uninstall: "+format+"\n", args...) }
	var errs []error
	// The file the conflist names for the pod ranges' confirmation: the
	// installed conflist's word, else the template's.
	confirm := confirmedRangesPath(cfg.ConfTemplate)
	if cfg.ConfTemplate != "" && cfg.CNIConfDir != "" {
		p := filepath.Join(cfg.CNIConfDir, filepath.Base(cfg.ConfTemplate))
		if path := confirmedRangesPath(p); path != "" {
			confirm = path
		}
		if err := os.Remove(p); err == nil {
			say("removed %s", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if confirm != "" {
		gone, err := noderanges.Remove(confirm)
		if gone {
			say("removed %s", confirm)
		}
		errs = append(errs, err)
	}
	if cfg.Routes {
		n, err := podroutes.Table{Table: cfg.RouteTable, Protocol: cfg.RouteProtocol}.RemoveAll()
		say("removed %d route(s) of protocol %d", n, cfg.RouteProtocol)
		errs = append(errs, err, overlay.RemoveNeighbours())
	}
	if !cfg.OVSDB.IsZero() {
		errs = append(errs, uninstallOVS(ctx, cfg.OVSDB, say))
		n, err := hostport.RemoveNodeLocal()
		say("removed %d nft table(s)", n)
		errs = append(errs, err)
	}
	if cfg.CNIBinDir != "" {
		remove := func(name string, onlyOurs bool) {
			p := filepath.Join(cfg.CNIBinDir, name)
			if onlyOurs {
				mine, err1 := os.ReadFile(filepath.Join(cfg.PluginSrc, name))
				theirs, err2 := os.ReadFile(p)
				if err1 != nil || err2 != nil || !bytes.Equal(mine, theirs) {
					return // the node's own, or none
				}
			}
			if err := os.Remove(p); err == nil {
				say("removed %s", p)
			} else if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		for _, p := range cfg.Plugins {
			remove(p, false)
		}
		// Without the image's copies to compare with, an optional plugin
		// may be the node's own: it stays.
		for _, p := range cfg.OptionalPlugins {
			remove(p, true)
		}
	}
	return errors.Join(errs...)
}

// uninstallOVS removes the suite's flows, gateway addresses and records.
func uninstallOVS(ctx context.Context, ovsdbEndpoint endpoint.Endpoint, say func(string, ...any)) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, ovsdbEndpoint)
	if err != nil {
		return err
	}
	defer cli.Close()
	bridges, err := cli.Bridges(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, br := range bridges {
		// Off before the guards go (RemoveNodeLocal, after this).
		if ok, err := hostport.ResetRouteLocalnet(br); err != nil {
			errs = append(errs, err)
		} else if ok {
			say("bridge %s: route_localnet off again", br.Name)
		}
		if gws := record.Gateways(br.ExternalIDs); len(gws) > 0 {
			if l, err := netlinksafe.LinkByName(br.Name); err == nil {
				for _, p := range gws {
					ipn := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
					if err := netlink.AddrDel(l, &netlink.Addr{IPNet: ipn}); err == nil {
						say("bridge %s: removed gateway address %s", br.Name, p)
					}
				}
			}
		}
		target := endpoint.OpenFlow(endpoint.Endpoint{}, ovsdbEndpoint, br.Name)
		if !endpoint.Listening(target) {
			continue
		}
		if err := uninstallFlows(ctx, target, br, say); err != nil {
			errs = append(errs, fmt.Errorf("bridge %s: %w", br.Name, err))
			continue
		}
		if err := uninstallMeters(ctx, target, br.Name, say); err != nil {
			errs = append(errs, fmt.Errorf("bridge %s: %w", br.Name, err))
		}
	}
	// The overlay's tunnel port is the agent's own row (not an
	// attachment's): its flows went with the suite's, its neighbours go
	// with it.
	if had, err := overlay.Withdraw(ctx, cli, ovsdbEndpoint); err != nil {
		errs = append(errs, err)
	} else if had {
		say("OVSDB: removed the overlay's tunnel port")
	}
	f, err := cli.ForgetSuite(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	say("OVSDB: detached %d port(s) of the suite, removed %d QoS and Queue row(s), %d in-flight record(s), bridge keys %v",
		f.Ports, f.QoS, f.RootKeys, f.BridgeKeys)
	if f.RestoreWait {
		say("OVSDB: cleared the flow-restore-wait the suite set")
	}
	return errors.Join(errs...)
}

// uninstallFlows removes the suite's flows of bridge br, at target, but
// the base flow of a bridge that node-prep.sh made.
func uninstallFlows(ctx context.Context, target endpoint.Endpoint, br ovsdb.Bridge, say func(string, ...any)) error {
	suite := flows.SuiteDelete()
	dumped, err := openflow.Dump(ctx, target, suite.Cookie, suite.Mask)
	if err != nil || len(dumped) == 0 {
		return err
	}
	b := openflow.Bundle{suite}
	if br.Secure() && br.ExternalIDs[ovsdb.KeyOwner] == ovsdb.OwnerValue {
		for _, f := range flows.BaseFlows() { // as node-prep.sh left it
			b = append(b, f)
		}
	}
	if err := openflow.Apply(ctx, target, b); err != nil {
		return err
	}
	say("bridge %s: removed %d flow(s) of the suite, kept %d base flow(s)", br.Name, len(dumped), len(b)-1)
	return nil
}

// uninstallMeters removes the suite's meters of bridge name, at target:
// those in its range (flows.IsSuiteMeter), egress and new-connection
// meters alike, whether a record still names them or not. Every other
// meter stays.
func uninstallMeters(ctx context.Context, target endpoint.Endpoint, name string, say func(string, ...any)) error {
	ids, err := openflow.MeterIDs(ctx, target)
	if err != nil {
		return err
	}
	ours := slices.DeleteFunc(ids, func(id uint32) bool { return !flows.IsSuiteMeter(id) })
	if len(ours) == 0 {
		return nil
	}
	if err := openflow.DeleteMeters(ctx, target, ours...); err != nil {
		return err
	}
	say("bridge %s: removed %d meter(s) of the suite", name, len(ours))
	return nil
}
