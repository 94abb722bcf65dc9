package bridge

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	"github.com/ovsflow/ovs-cni/pkg/feature"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/gateway"
	"github.com/ovsflow/ovs-cni/pkg/ipam"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// CmdDel detaches a container interface, as named steps in the reverse of
// ADD's order: the deleting mark, the flows, the host ports, the port, the
// veth, the IP allocation. It needs nothing but what the runtime passes,
// and succeeds when the netns, veth, port or allocation are gone. With
// OVSDB unreachable it cannot know whether the port is gone: it fails with
// code 11 (cnicmd.Del) and releases nothing, not even the address,
// which would otherwise go back to the pool while the port holding it,
// and its host ports, stay.
func CmdDel(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if ran, err := handOffTLS(args, conf); ran {
		return err
	}
	return cnicmd.Del(conf.Endpoints, conf.Budget, args, func(ctx context.Context, cli *ovsdb.Client) error {
		var l laps
		l.startLaps()
		ports, err := detach(ctx, cli, conf, args, &l)
		if err != nil {
			return err
		}
		if err := l.did("veth", dropVeth(conf, args)); err != nil {
			return err
		}
		plugin, stdin, err := releaseWith(conf, args.StdinData, ports)
		if err != nil {
			return err
		}
		if plugin != "" {
			if err := ipam.Del(ctx, plugin, stdin); l.did("ipam", err) != nil {
				return fmt.Errorf("ipam %q: %w", plugin, err)
			}
		}
		return nil
	})
}

// dropVeth deletes the attachment's veth, or with "leaveVethToNetns" takes
// its host end down (the container end loses its carrier) and leaves the
// pair to go with the netns: the kernel destroys a veth whose end's netns
// is deleted, after the DEL, off the runtime's path. A netns that the
// runtime keeps keeps the pair, down, until an ADD of the same attachment
// (replacePrevious), an ADD of another one with its ifname (createVeth), or
// GC deletes it.
func dropVeth(conf *NetConf, args *skel.CmdArgs) error {
	name := link.HostVethName(args.ContainerID, args.IfName)
	if conf.LeaveVethToNetns && args.Netns != "" {
		return link.SetDown(name)
	}
	return link.Delete(name)
}

// detach is DEL's part in OVSDB and OpenFlow: the attachment's port, flows,
// host ports and limits go under a deleting mark, so that a sweep meanwhile
// restores none of its flows. It returns the ports it removed.
func detach(ctx context.Context, cli *ovsdb.Client, conf *NetConf, args *skel.CmdArgs, l *laps) ([]ovsdb.OwnedPort, error) {
	del, err := cli.BeginDelete(ctx, ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName})
	if err := l.did("mark", err); err != nil {
		return nil, err
	}
	ports := del.Ports
	if err := l.did("flows", cutOff(ctx, conf, ports)); err != nil {
		return nil, err
	}
	if len(ports) == 0 && del.Claimed() {
		// An ADD that died before its insert left its flows (they go in
		// before the port, after the claim): they go by the attachment's
		// cookie, which is its own.
		err := openflow.DeleteFlows(ctx, conf.Endpoints.OpenFlowOf(conf.Bridge),
			flows.AttachmentCookie(args.ContainerID, args.IfName).AttachmentDelete())
		if openflow.NotServed(err) {
			err = nil
		}
		if err := l.did("claimed flows", err); err != nil {
			return nil, err
		}
	}
	if err := withdrawChained(ctx, cli, ports, l.did); err != nil {
		return nil, err
	}
	if err := l.did("port", cli.Finish(ctx, del)); err != nil {
		return nil, err
	}
	withdrawGateways(ctx, cli, conf, ports)
	return ports, nil
}

// withdrawGateways withdraws the gateways of the bridge that no port needs
// any more, and their flows, once ports are gone (pkg/gateway). It is cleanup: a failure
// leaves them to the next DEL or reconcile, and the DEL succeeds.
func withdrawGateways(ctx context.Context, cli *ovsdb.Client, conf *NetConf, ports []ovsdb.OwnedPort) {
	if !conf.IsGateway || len(ports) == 0 {
		return
	}
	var claimed []netip.Prefix
	for _, p := range ports {
		claimed = append(claimed, record.Gateways(p.Port.ExternalIDs)...)
	}
	gone, err := gateway.WithdrawOn(ctx, cli, conf.Bridge, claimed)
	if len(gone) > 0 {
		cnilog.Note("bridge %s: gateways %v withdrawn", conf.Bridge, gone)
		// Their flows on LOCAL go with them; left behind, reconcile
		// removes them.
		if err := openflow.Apply(ctx, portSecTarget(conf), flows.GatewayDelete(gone...)); err != nil {
			cnilog.Note("bridge %s: removing the flows of gateways %v: %v", conf.Bridge, gone, err)
		}
	}
	if err != nil {
		cnilog.Note("bridge %s: withdrawing unused gateways: %v", conf.Bridge, err)
	}
}

// withdrawChained removes what the features of pkg/feature recorded on
// ports besides ovs-bridge's own flows (port security's go with the
// attachment's cookie and the port): the host ports (by ovs-portmap, or by
// ovs-bridge itself for Mesos) and the limits (ovs-bandwidth's egress meter
// and QoS rows, which OVSDB and ovs-vswitchd keep when the port and its
// flows go). So nothing outlives the port when the chained plugin's DEL is
// never called: a GC (ovs-bridge's runs first), an ADD that replaces the
// attachment. Each feature's outcome goes through step (a DEL's laps).
func withdrawChained(ctx context.Context, cli *ovsdb.Client, ports []ovsdb.OwnedPort, step func(name string, err error) error) error {
	for _, f := range slices.Backward(feature.All) {
		if err := step(f.Name(), f.Withdraw(ctx, cli, ports)); err != nil {
			return err
		}
	}
	return nil
}

// untimed is a step of no laps.
func untimed(_ string, err error) error { return err }
