// Command ovs-portmap is a chained CNI plugin that publishes host ports with
// OpenFlow conntrack-NAT rules; see package portmap. Run as
// `ovs-portmap reconcile -ovsdb ENDPOINT [-watch]` it rebuilds the flows of
// every live attachment from OVSDB (see hostport.Reconcile).
package main

import (
	"os"
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/portmap"
)

func init() { runtime.LockOSThread() }

func main() {
	if len(os.Args) > 1 && os.Args[1] == "reconcile" { // run by hand or by a unit, not by a runtime
		os.Exit(hostport.ReconcileMain(os.Args[2:], os.Stderr))
	}
	skel.PluginMainFuncs(cnilog.Funcs("ovs-portmap", skel.CNIFuncs{
		Add: portmap.CmdAdd, Del: portmap.CmdDel, Check: portmap.CmdCheck,
		GC: portmap.CmdGC, Status: portmap.CmdStatus,
	}), version.All, buildinfo.About("ovs-portmap"))
}
