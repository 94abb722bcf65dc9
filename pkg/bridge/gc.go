package bridge

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/ipam"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// CmdGC removes our ports on this bridge and network whose attachment is not
// in cni.dev/valid-attachments, each as DEL does (collect), then delegates
// GC to IPAM.
func CmdGC(args *skel.CmdArgs) error {
	conf, err := loadConf(args)
	if err != nil {
		return err
	}
	if ran, err := handOffTLS(args, conf); ran {
		return err
	}
	gc, err := cnicmd.OpenGC(args, func(*skel.CmdArgs) (*NetConf, error) { return conf, nil })
	if err != nil {
		return err
	}
	defer gc.Close()
	ctx, cli, conf := gc.Ctx, gc.OVSDB, gc.Conf
	keep := map[string]bool{}
	for _, a := range conf.ValidAttachments {
		keep[link.Alias(conf.Name, a.ContainerID, a.IfName)] = true
	}
	for _, a := range gc.StaleAttachments() {
		left, err := collect(ctx, cli, conf, a)
		if err != nil {
			return err
		}
		if left {
			keep[link.Alias(conf.Name, a.ContainerID, a.IfName)] = true
		}
	}
	// Veths of this network whose port is already gone (a DEL or an ADD
	// killed half way, never retried) are found by their alias; those of
	// an ADD in flight (its veth is there before its port) stay. The
	// claims are read after the links are listed: an ADD claims before
	// it creates its veth.
	var adding map[string]bool
	var addingErr error
	if err := link.DeleteOrphans(link.AliasPrefix(conf.Name), func(alias string) bool {
		if keep[alias] {
			return true
		}
		if adding == nil && addingErr == nil {
			var in map[ovsdb.Attachment]bool
			if in, addingErr = cli.Adding(ctx); addingErr == nil {
				adding = map[string]bool{}
				for a := range in {
					adding[link.Alias(conf.Name, a.ContainerID, a.IfName)] = true
				}
			}
		}
		return addingErr != nil || adding[alias]
	}); err != nil {
		return err
	}
	if addingErr != nil {
		return addingErr
	}
	if conf.IPAM.Type != "" {
		if err := ipam.GC(ctx, conf.IPAM.Type, args.StdinData); err != nil {
			return fmt.Errorf("ipam %q gc: %w", conf.IPAM.Type, err)
		}
	}
	return nil
}

// collect removes the ports of stale attachment a on this bridge and
// network as DEL does: marked as under way first (ovsdb.BeginDelete; a
// reconcile meanwhile restores none of its flows), with its ports as the
// marking transaction reads them, not as GC first listed them, and removed
// with the mark (ovsdb.Finish). An attachment with an ADD in flight (its
// claims) is that ADD's, which replaces the port itself: collect leaves it
// and reports so.
func collect(ctx context.Context, cli *ovsdb.Client, conf *NetConf, a ovsdb.Attachment) (bool, error) {
	del, err := cli.BeginDelete(ctx, a)
	if err != nil {
		return false, err
	}
	if del.Claimed() {
		return true, cli.Abandon(ctx, del)
	}
	var ports []ovsdb.OwnedPort
	for _, p := range del.Ports {
		if ids := p.Port.ExternalIDs; ids[ovsdb.KeyNetwork] == conf.Name && ids[ovsdb.KeyBridge] == conf.Bridge {
			ports = append(ports, p)
		}
	}
	del.Ports = ports
	if err := cutOff(ctx, conf, ports); err != nil {
		return false, err
	}
	if err := withdrawChained(ctx, cli, ports, untimed); err != nil {
		return false, err
	}
	if err := cli.Finish(ctx, del); err != nil {
		return false, err
	}
	withdrawGateways(ctx, cli, conf, ports)
	for _, p := range ports {
		if err := link.Delete(p.Port.Name); err != nil {
			return false, err
		}
	}
	return false, nil
}
