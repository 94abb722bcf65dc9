package bandwidth

import (
	"context"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/limit"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// loadChained loads the config and checks that it has a prevResult, which
// ADD and CHECK require.
func loadChained(args *skel.CmdArgs) (*Conf, error) {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return nil, err
	}
	if _, err := cnicmd.PrevResult(&conf.PluginConf, "must be called as chained plugin (no prevResult)"); err != nil {
		return nil, err
	}
	return conf, nil
}

// openPort opens the command and finds the ovs-bridge port of the
// attachment, with the OpenFlow target of its bridge.
func openPort(conf *Conf, args *skel.CmdArgs) (context.Context, *ovsdb.Client, ovsdb.OwnedPort, endpoint.Endpoint, func(), error) {
	ctx, cli, port, done, err := cnicmd.OpenPort(conf.Endpoints.OVSDB, conf.Budget, "ovs-bandwidth", args)
	if err != nil {
		return nil, nil, ovsdb.OwnedPort{}, endpoint.Endpoint{}, nil, conf.Endpoints.Explain(err)
	}
	return ctx, cli, port, conf.Endpoints.OpenFlowOf(port.Port.ExternalIDs[ovsdb.KeyBridge]), done, nil
}

// CmdAdd puts the limits on the attachment's port and prints prevResult
// unchanged.
func CmdAdd(args *skel.CmdArgs) error {
	conf, err := loadChained(args)
	if err != nil {
		return err
	}
	if conf.Limits.IsZero() {
		return types.PrintResult(conf.PrevResult, conf.CNIVersion)
	}
	ctx, cli, port, target, done, err := openPort(conf, args)
	if err != nil {
		return err
	}
	defer done()
	if err := limit.Apply(ctx, cli, port, target, conf.Name, conf.Limits); err != nil {
		return err
	}
	l := conf.Limits
	cnilog.Note("port %s: ingress %d bit/s burst %d, egress %d bit/s burst %d", port.Port.Name, l.IngressRate, l.IngressBurst, l.EgressRate, l.EgressBurst)
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

// CmdDel removes the limits of the attachment, found by its identity alone
// (limits in the config, valid or not, are not looked at); with OVSDB
// unreachable, code 11 (cnicmd.Del).
func CmdDel(args *skel.CmdArgs) error {
	conf, err := loadEndpoints(args.StdinData)
	if err != nil {
		return err
	}
	return cnicmd.Del(conf.Endpoints, conf.Budget, args, func(ctx context.Context, cli *ovsdb.Client) error {
		att := ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
		ports, err := cli.FindPorts(ctx, att)
		if err != nil {
			return err
		}
		if err := limit.Withdraw(ctx, cli, ports); err != nil {
			return err
		}
		// Rows of a port that is gone already.
		return cli.ClearPortQoS(ctx, nil, att)
	})
}

// CmdCheck verifies that Open vSwitch enforces exactly the limits of the
// config on the attachment's port.
func CmdCheck(args *skel.CmdArgs) error {
	conf, err := loadChained(args)
	if err != nil {
		return err
	}
	if conf.Limits.IsZero() {
		return nil
	}
	ctx, cli, port, target, done, err := openPort(conf, args)
	if err != nil {
		return err
	}
	defer done()
	return limit.Check(ctx, cli, port, target, conf.Limits)
}

// CmdGC removes the limits of our attachments of the network not in
// cni.dev/valid-attachments, and the QoS rows, egress flows and meters of
// attachments whose port is gone.
func CmdGC(args *skel.CmdArgs) error {
	gc, err := cnicmd.OpenGC(args, loadConf)
	if err != nil {
		return err
	}
	defer gc.Close()
	if err := limit.Withdraw(gc.Ctx, gc.OVSDB, gc.Stale); err != nil {
		return err
	}
	owned, err := gc.OVSDB.OwnedQoSAttachments(gc.Ctx)
	if err != nil {
		return err
	}
	valid := map[ovsdb.Attachment]bool{}
	for _, a := range gc.Conf.ValidAttachments {
		valid[ovsdb.Attachment{ContainerID: a.ContainerID, IfName: a.IfName}] = true
	}
	var orphans []ovsdb.Attachment
	for a, network := range owned {
		if network == gc.Conf.Name && !valid[a] {
			orphans = append(orphans, a)
		}
	}
	if err := gc.OVSDB.ClearPortQoS(gc.Ctx, nil, orphans...); err != nil {
		return err
	}
	return limit.RemoveOrphans(gc.Ctx, gc.OVSDB, gc.Conf.Endpoints)
}

// CmdStatus reports OVSDB unreachable as code 50.
func CmdStatus(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	_, _, done, err := cnicmd.Status(conf.Endpoints.OVSDB)
	if err != nil {
		return err
	}
	done()
	return nil
}
