package agent

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/metrics"
	"github.com/ovsflow/ovs-cni/pkg/orphan"
	"github.com/ovsflow/ovs-cni/pkg/overlay"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
)

// DefaultHealthAddr is where the probes are served: the pod runs in the
// node's network namespace, so the loopback address keeps them off the
// network (kubelet probes from the node).
const DefaultHealthAddr = "127.0.0.1:9469"

// Main parses cmd/ovsflow-agent's arguments and runs the mode they name.
func Main(ctx context.Context, args []string, log io.Writer) error {
	mode, cfg, err := ParseArgs(args, log)
	if err != nil {
		return err
	}
	cfg.Log = log
	switch mode {
	case "run", "routes":
		return Run(ctx, cfg)
	case "uninstall":
		return Uninstall(ctx, cfg)
	}
	return fmt.Errorf("unknown mode %q (run, routes, uninstall)", mode)
}

// ParseArgs reads cmd/ovsflow-agent's arguments: the mode (run when none
// is named), then the flags (usage and errors go to out).
func ParseArgs(args []string, out io.Writer) (mode string, cfg Config, err error) {
	mode = "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		mode, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("ovsflow-agent "+mode, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: the pod's ServiceAccount)")
	fs.IntVar(&cfg.RouteTable, "route-table", 0, "routing table of the routes to the pod ranges (0: main)")
	fs.IntVar(&cfg.RouteProtocol, "route-protocol", podroutes.DefaultProtocol, "protocol number that marks those routes as the agent's")
	fs.StringVar(&cfg.HealthAddr, "health-addr", DefaultHealthAddr, "address of /healthz and /readyz (\"\": none)")
	fs.DurationVar(&cfg.Resync, "resync", 0, "a full pass at least this often (default 30s)")
	if mode == "routes" {
		// A host that is not a Node: the routes, nothing else.
		cfg.HostOnly, cfg.Routes = true, true
		fs.Func("host-addrs", "this host's addresses on the nodes' segment, comma-separated (default: those of the link of each family's default route)", func(s string) error {
			for _, f := range split(s) {
				a, err := netip.ParseAddr(f)
				if err != nil {
					return err
				}
				cfg.HostAddrs = append(cfg.HostAddrs, a.Unmap())
			}
			return nil
		})
		if err := fs.Parse(args); err != nil {
			return mode, cfg, err
		}
		if fs.NArg() > 0 {
			return mode, cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
		}
		return mode, cfg, nil
	}
	fs.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's Node object (default $NODE_NAME)")
	fs.StringVar(&cfg.PluginSrc, "plugin-src", "/opt/ovsflow/bin", "where the plugins to install are (\"\": install none)")
	fs.StringVar(&cfg.CNIBinDir, "cni-bin-dir", "/host/opt/cni/bin", "the node's CNI bin dir")
	plugins := fs.String("plugins", "ovs-bridge,ovs-bridge-tls,ovs-portmap,ovs-bandwidth", "plugins always installed")
	optional := fs.String("optional-plugins", "host-local,loopback", "plugins installed only where the node has none of that name")
	fs.StringVar(&cfg.ConfTemplate, "conf-template", "/etc/ovsflow/10-ovsflow.conflist", "the conflist template (installed under its base name)")
	fs.StringVar(&cfg.CNIConfDir, "cni-conf-dir", "/host/etc/cni/net.d", "the node's CNI conf dir")
	cfg.OVSDB = endpoint.MustParse(endpoint.DefaultOVSDB)
	fs.Var(&cfg.OVSDB, "ovsdb", "the node's OVSDB (\"\": no reconcile)")
	fs.StringVar(&cfg.VswitchdControl, "vswitchd-control", "", "ovs-vswitchd's control socket, when ADD recorded none")
	fs.BoolVar(&cfg.Routes, "routes", true, "keep a route to every other Node's pod ranges via its InternalIP")
	cfg.Overlay = overlay.Hybrid
	fs.Func("overlay", "how the routes reach Nodes: geneve or vxlan (every Node through the bridge's tunnel), none (host-gw to every Node), hybrid (host-gw on this node's subnet, Geneve to the others; host-gw to all where the node cannot tell) (default hybrid)", func(s string) error {
		m, err := overlay.ParseMode(s)
		cfg.Overlay = m
		return err
	})
	cfg.Underlay = overlay.Auto
	fs.Func("underlay", "the address family the tunnel runs over, the same on every node: ipv4, ipv6 (each node's InternalIP of that family), auto (IPv4 where the node has an IPv4 InternalIP) (default auto)", func(s string) error {
		u, err := overlay.ParseUnderlay(s)
		cfg.Underlay = u
		return err
	})
	orphans := fs.Duration("orphan-interval", orphan.DefaultInterval, "replay the DEL of an attachment whose host veth has been gone this long, with no ADD or DEL in flight (0: never)")
	withMetrics := fs.Bool("metrics", true, "serve /metrics (Prometheus text format) next to the probes")
	if err := fs.Parse(args); err != nil {
		return mode, cfg, err
	}
	if fs.NArg() > 0 {
		return mode, cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Plugins, cfg.OptionalPlugins = split(*plugins), split(*optional)
	if cfg.OrphanInterval = *orphans; *orphans <= 0 {
		cfg.OrphanInterval = -1
	}
	if *withMetrics && mode == "run" && !cfg.OVSDB.IsZero() {
		m := metrics.New(metrics.Config{OVSDB: cfg.OVSDB, VswitchdControl: cfg.VswitchdControl})
		cfg.Metrics, cfg.Events = m.Handler(), m
	}
	return mode, cfg, nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
