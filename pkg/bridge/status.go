package bridge

import (
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/ipam"
	"github.com/ovsflow/ovs-cni/pkg/noderanges"
)

// rangesConfirmed: where conf names the node agent's confirmation, an
// error of kind unless it holds this network's IPAM ranges (a conflist left
// from before the Node was registered again must not give out addresses).
func rangesConfirmed(conf *NetConf, stdin []byte, kind cnierr.Kind) error {
	if conf.ConfirmedRanges == "" {
		return nil
	}
	if err := noderanges.Check(conf.ConfirmedRanges, stdin); err != nil {
		return cnierr.Wrap(kind, "pod ranges not confirmed", err)
	}
	return nil
}

// CmdStatus reports whether the plugin can serve ADDs: OVSDB reachable and the
// bridge present (or creatable) and served by ovs-vswitchd.
func CmdStatus(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if ran, err := handOffTLS(args, conf); ran {
		return err
	}
	if err := rangesConfirmed(conf, args.StdinData, cnierr.Unavailable); err != nil {
		return err
	}
	ctx, cli, done, err := cnicmd.Status(conf.Endpoints.OVSDB)
	if err != nil {
		return err
	}
	defer done()
	br, err := cli.Bridge(ctx, conf.Bridge)
	if err != nil {
		return cnierr.Wrap(cnierr.Unavailable, "ovsdb unusable", err)
	}
	if br == nil && !conf.CreateBridge {
		return cnierr.New(cnierr.Unavailable, fmt.Sprintf("bridge %q does not exist", conf.Bridge), "")
	}
	// A bridge row that no ovs-vswitchd serves (it stopped, or has not
	// started yet) takes no port and forwards nothing: an ADD now would
	// wait for it and time out, so the runtime must not start pods here.
	if target := conf.Endpoints.OpenFlowOf(conf.Bridge); br != nil && !endpoint.Listening(target) {
		return cnierr.New(cnierr.Unavailable, fmt.Sprintf("bridge %q is not served", conf.Bridge),
			fmt.Sprintf("no ovs-vswitchd listens on %s", target))
	}
	if conf.IPAM.Type != "" {
		if err := ipam.Status(ctx, conf.IPAM.Type, args.StdinData); err != nil {
			// Only the IPAM plugin's own answer says it is unavailable: on
			// a saturated node its STATUS may not end within ours, and a
			// runtime told "not ready" for that stops starting pods on a
			// node that serves them (kubelet's NetworkNotReady).
			if ctx.Err() != nil {
				cnilog.Note("ipam %q did not answer within %s (a busy node): not reported as unavailable", conf.IPAM.Type, cnicmd.StatusTimeout)
				fmt.Fprintf(os.Stderr, "ovs-bridge: STATUS: ipam %q did not answer within %s (a busy node): not reported as unavailable\n", conf.IPAM.Type, cnicmd.StatusTimeout)
				return nil
			}
			return fmt.Errorf("ipam %q: %w", conf.IPAM.Type, err)
		}
	}
	return nil
}
