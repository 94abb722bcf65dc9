package portmap

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// noPrevResult is the error of an ADD or CHECK without a prevResult.
const noPrevResult = "must be called as chained plugin (no prevResult)"

// loadChained loads the config and its prevResult, which ADD and CHECK
// require.
func loadChained(args *skel.CmdArgs) (*Conf, *current.Result, error) {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return nil, nil, err
	}
	prev, err := cnicmd.PrevResult(&conf.PluginConf, noPrevResult)
	return conf, prev, err
}

// CmdAdd publishes the mappings and prints prevResult unchanged.
func CmdAdd(args *skel.CmdArgs) error {
	conf, prev, err := loadChained(args)
	if err != nil {
		return err
	}
	if len(conf.Mappings) == 0 {
		return types.PrintResult(conf.PrevResult, conf.CNIVersion)
	}
	pod := record.PodOf(args.Args)
	v4, v6, mac := hostport.ContainerFacts(prev, args.IfName)
	if !v4.IsValid() && !v6.IsValid() {
		return types.PrintResult(conf.PrevResult, conf.CNIVersion)
	}
	ctx, cli, port, done, err := cnicmd.OpenPort(conf.Endpoints.OVSDB, conf.Budget, "ovs-portmap", args)
	if err != nil {
		return conf.Endpoints.Explain(err)
	}
	defer done()
	plan, err := hostport.Resolve(conf.options(), args.ContainerID, args.IfName, port, v4, v6, mac)
	if err != nil {
		return err
	}
	// ovs-bridge records the pod with the port; a port of an older one
	// gets it here, with the host ports.
	if pod != "" && port.Port.ExternalIDs[record.KeyPod] != pod {
		plan.IDs = map[string]string{record.KeyPod: pod}
	}
	if err := plan.Publish(ctx, cli); err != nil {
		return err
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

// CmdDel withdraws everything of the attachment, found by its identity alone;
// with OVSDB unreachable, where its host ports are recorded, code 11
// (cnicmd.Del).
func CmdDel(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	return cnicmd.Del(conf.Endpoints, conf.Budget, args, func(ctx context.Context, cli *ovsdb.Client) error {
		return withdraw(ctx, cli, ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}, nil)
	})
}

// withdraw withdraws the host ports of attachment a (of its ports that in
// takes; nil: all) under a deleting mark (ovsdb.BeginDelete), so that a
// reconcile meanwhile rebuilds none of them from the records being
// removed. The ports are ovs-bridge's and stay: the mark goes alone
// (ovsdb.Abandon), whatever the withdrawal did.
func withdraw(ctx context.Context, cli *ovsdb.Client, a ovsdb.Attachment, in func(ovsdb.OwnedPort) bool) error {
	del, err := cli.BeginDelete(ctx, a)
	if err != nil {
		return err
	}
	var ports []ovsdb.OwnedPort
	for _, p := range del.Ports {
		if in == nil || in(p) {
			ports = append(ports, p)
		}
	}
	err = hostport.Withdraw(ctx, cli, ports)
	return errors.Join(err, cli.Abandon(ctx, del))
}

// CmdCheck verifies that the bridge holds exactly the flows the attachment
// needs: it builds them again from the config and prevResult, dumps the
// flows installed under the attachment's cookie on the same OpenFlow
// connection the plugins use (decoded into the same typed values), and
// compares the two sets with openflow.Diff: keyed by table, priority and
// match like ovs-ofctl diff-flows, a flow missing, an extra one with the
// cookie, and one whose actions or cookie differ are all errors.
func CmdCheck(args *skel.CmdArgs) error {
	conf, prev, err := loadChained(args)
	if err != nil {
		return err
	}
	ctx, _, port, done, err := cnicmd.OpenPort(conf.Endpoints.OVSDB, conf.Budget, "ovs-portmap", args)
	if err != nil {
		return conf.Endpoints.Explain(err)
	}
	defer done()
	var want []flows.Flow
	target := conf.Endpoints.OpenFlowOf(port.Port.ExternalIDs[ovsdb.KeyBridge])
	cookie := flows.AttachmentCookie(args.ContainerID, args.IfName)
	v4, v6, mac := hostport.ContainerFacts(prev, args.IfName)
	rec, recorded, err := record.HostPortsOf(port)
	if err != nil {
		return err
	}
	var asked []flows.Rule
	if len(conf.Mappings) > 0 && (v4.IsValid() || v6.IsValid()) {
		if !recorded {
			return fmt.Errorf("attachment %s/%s: no host port record on port %q", args.ContainerID, args.IfName, port.Port.Name)
		}
		opts := conf.options()
		if opts.NodeIPs == nil {
			opts.NodeIPs = rec.NodeIPs() // the node addresses ADD resolved
		}
		plan, err := hostport.Resolve(opts, args.ContainerID, args.IfName, port, v4, v6, mac)
		if err != nil {
			return err
		}
		want = conf.Pipeline.AttachmentFlows(plan.HostPorts)
		target = plan.Target
		asked = slices.Concat(plan.HostPorts.Rules, plan.HostPorts.Loopback)
	}
	got, err := openflow.Dump(ctx, target, uint64(cookie), ^uint64(0))
	if err != nil {
		return err
	}
	if err := openflow.Diff(want, got); err != nil {
		// The flow diff says what differs; a line first says why when
		// the host ports asked differ from those ADD published.
		if why := hostPortsDiffer(slices.Concat(rec.Rules, rec.Loopback), asked); why != "" {
			return fmt.Errorf("%s\n%w", why, err)
		}
		return err
	}
	return nil
}

// hostPortsDiffer is the summary line of a CHECK whose host ports (asked,
// from its portMappings capability args) are not those ADD published, ""
// when they are the same.
func hostPortsDiffer(published, asked []flows.Rule) string {
	only := func(a, b []flows.Rule) []string {
		var out []string
		for _, r := range a {
			if !slices.Contains(b, r) {
				out = append(out, r.String())
			}
		}
		return out
	}
	pub, ask := only(published, asked), only(asked, published)
	if len(pub)+len(ask) == 0 {
		return ""
	}
	var parts []string
	if len(pub) > 0 {
		parts = append(parts, "published by ADD, not asked by this CHECK: "+strings.Join(pub, ", "))
	}
	if len(ask) > 0 {
		parts = append(parts, "asked by this CHECK, not published by ADD: "+strings.Join(ask, ", "))
	}
	why := "host ports differ from those ADD published (" + strings.Join(parts, "; ") + ")"
	if len(asked) == 0 {
		why += ": this CHECK was given no portMappings; a runtime passes CHECK the capability args (runtimeConfig.portMappings) it passed ADD"
	}
	return why
}

// CmdGC withdraws the host ports of our attachments not in
// cni.dev/valid-attachments.
func CmdGC(args *skel.CmdArgs) error {
	gc, err := cnicmd.OpenGC(args, loadConf)
	if err != nil {
		return err
	}
	defer gc.Close()
	network, _, _ := gc.Conf.GCScope()
	for _, a := range gc.StaleAttachments() {
		// As DEL, with the ports as the marking transaction reads them.
		if err := withdraw(gc.Ctx, gc.OVSDB, a, func(p ovsdb.OwnedPort) bool {
			return p.Port.ExternalIDs[ovsdb.KeyNetwork] == network
		}); err != nil {
			return err
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
	_, _, done, err := cnicmd.Status(conf.Endpoints.OVSDB)
	if err != nil {
		return err
	}
	done()
	return nil
}
