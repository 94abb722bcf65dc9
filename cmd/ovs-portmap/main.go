// Command ovs-portmap is a chained CNI plugin that publishes host ports with
// OpenFlow conntrack-NAT rules; see package portmap. Run as
// `ovs-portmap reconcile -ovsdb ENDPOINT [-watch]` it rebuilds the flows of
// every live attachment from OVSDB (see package reconcile); `ovs-portmap
// trace` and `ovs-portmap flows` show what one attachment's flows do (see
// package inspect).
package main

import (
	"flag"
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/inspect"
	"github.com/ovsflow/ovs-cni/pkg/portmap"
	"github.com/ovsflow/ovs-cni/pkg/reconcile"
)

func init() { runtime.LockOSThread() }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "reconcile" { // run by hand or by a unit, not by a runtime
		fs := flag.NewFlagSet("reconcile", flag.ExitOnError)
		ovsdb := endpoint.MustParse(endpoint.DefaultOVSDB)
		fs.Var(&ovsdb, "ovsdb", "OVSDB endpoint")
		control := fs.String("vswitchd-control", "", "ovs-vswitchd's control socket, when ADD recorded none (default: found as ovs-appctl finds it)")
		watch := fs.Bool("watch", false, "keep running: reconcile whenever ovs-vswitchd (re)starts")
		_ = fs.Parse(os.Args[2:])
		os.Exit(reconcile.Run(ovsdb, *control, *watch, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "trace" {
		os.Exit(inspect.TraceMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "flows" {
		os.Exit(inspect.FlowsMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	skel.PluginMainFuncs(cnilog.Funcs("ovs-portmap", cnicmd.Funcs(skel.CNIFuncs{
		Add: portmap.CmdAdd, Del: portmap.CmdDel, Check: portmap.CmdCheck,
		GC: portmap.CmdGC, Status: portmap.CmdStatus,
	})), version.All, buildinfo.About("ovs-portmap"))
}
