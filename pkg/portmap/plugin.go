package portmap

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

const opTimeout = 30 * time.Second

func dial(ctx context.Context, endpoint string) (*ovsdb.Client, error) {
	return hostport.Dial(ctx, endpoint)
}

func asCNIError(err error) error { return hostport.CNIError(err) }

// prevResult parses the prevResult, which ADD and CHECK require.
func prevResult(conf *Conf) (*current.Result, error) {
	if conf.RawPrevResult == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "must be called as chained plugin (no prevResult)", "")
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	r, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	return r, hostport.CheckResult(r)
}

// findPort returns the ovs-bridge port of the attachment.
func findPort(ctx context.Context, cli *ovsdb.Client, containerID, ifname string) (ovsdb.OwnedPort, error) {
	att := ovsdb.Attachment{ContainerID: containerID, IfName: ifname}
	ports, err := cli.FindPorts(ctx, att)
	if err != nil {
		return ovsdb.OwnedPort{}, asCNIError(err)
	}
	if len(ports) != 1 {
		return ovsdb.OwnedPort{}, fmt.Errorf("attachment %s: found %d ovs-bridge ports, want 1 (ovs-portmap must follow ovs-bridge in the conflist)", att, len(ports))
	}
	return ports[0], nil
}

// CmdAdd publishes the mappings and prints prevResult unchanged.
func CmdAdd(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	prev, err := prevResult(conf)
	if err != nil {
		return err
	}
	if len(conf.Mappings) == 0 {
		return types.PrintResult(conf.PrevResult, conf.CNIVersion)
	}
	v4, v6, mac := hostport.ContainerFacts(prev, args.IfName)
	if !v4.IsValid() && !v6.IsValid() {
		return types.PrintResult(conf.PrevResult, conf.CNIVersion)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cli, err := dial(ctx, conf.OVSDB)
	if err != nil {
		return err
	}
	defer cli.Close()
	port, err := findPort(ctx, cli, args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	plan, err := hostport.Resolve(conf.options(), args.ContainerID, args.IfName, port, v4, v6, mac)
	if err != nil {
		return err
	}
	if err := hostport.Publish(ctx, cli, plan.Port, plan.Target, conf.Pipeline, plan.Attachment); err != nil {
		return asCNIError(err)
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

// CmdDel withdraws everything of the attachment, found by its identity alone.
func CmdDel(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cli, err := dial(ctx, conf.OVSDB)
	if err != nil {
		if link.Exists(link.HostVethName(args.ContainerID, args.IfName)) {
			return err // the attachment is still here and OVSDB cannot be reached
		}
		return nil
	}
	defer cli.Close()
	ports, err := cli.FindPorts(ctx, ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName})
	if err != nil {
		return asCNIError(err)
	}
	for _, p := range ports {
		if err := hostport.Withdraw(ctx, cli, p, ""); err != nil {
			return asCNIError(err)
		}
	}
	return nil
}

// CmdCheck verifies that the bridge holds exactly the flows the attachment
// needs: it builds them again from the config and prevResult, dumps the
// flows installed under the attachment's cookie on the same OpenFlow
// connection the plugins use (decoded into the same typed values), and
// compares the two sets with openflow.Diff: keyed by table, priority and
// match like ovs-ofctl diff-flows, a flow missing, an extra one with the
// cookie, and one whose actions or cookie differ are all errors.
func CmdCheck(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	prev, err := prevResult(conf)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cli, err := dial(ctx, conf.OVSDB)
	if err != nil {
		return err
	}
	defer cli.Close()
	port, err := findPort(ctx, cli, args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	var want []flows.Flow
	target := hostport.OpenFlowTarget(conf.OpenFlow, conf.OVSDB, port.Port.ExternalIDs[ovsdb.KeyBridge])
	cookie := flows.AttachmentCookie(args.ContainerID, args.IfName)
	v4, v6, mac := hostport.ContainerFacts(prev, args.IfName)
	if len(conf.Mappings) > 0 && (v4.IsValid() || v6.IsValid()) {
		rec, ok, err := hostport.RecordOf(port)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("attachment %s/%s: no host port record on port %q", args.ContainerID, args.IfName, port.Port.Name)
		}
		opts := conf.options()
		if opts.NodeIPs == nil {
			opts.NodeIPs = recordNodeIPs(rec) // the node addresses ADD resolved
		}
		plan, err := hostport.Resolve(opts, args.ContainerID, args.IfName, port, v4, v6, mac)
		if err != nil {
			return err
		}
		want = conf.Pipeline.AttachmentFlows(plan.Attachment)
		target = plan.Target
	}
	got, err := openflow.Dump(ctx, target, uint64(cookie), ^uint64(0))
	if err != nil {
		return err
	}
	return openflow.Diff(want, got)
}

// recordNodeIPs lists the node addresses the recorded rules use.
func recordNodeIPs(r hostport.Record) []netip.Addr {
	var out []netip.Addr
	for _, a := range []netip.Addr{r.HairpinV4, r.HairpinV6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	for _, rule := range r.Rules {
		if !slices.Contains(out, rule.NodeIP) {
			out = append(out, rule.NodeIP)
		}
	}
	return out
}

// CmdGC withdraws the host ports of our attachments not in
// cni.dev/valid-attachments.
func CmdGC(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cli, err := dial(ctx, conf.OVSDB)
	if err != nil {
		return err
	}
	defer cli.Close()
	stale, err := hostport.Stale(ctx, cli, conf.Name, "", conf.ValidAttachments)
	if err != nil {
		return err
	}
	for _, p := range stale {
		if err := hostport.Withdraw(ctx, cli, p, ""); err != nil {
			return asCNIError(err)
		}
	}
	return nil
}

// CmdStatus reports OVSDB unreachable as code 50.
func CmdStatus(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, conf.OVSDB)
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "ovsdb unreachable", err.Error())
	}
	cli.Close()
	return nil
}
