// Command ovs-portmap is a chained CNI plugin that publishes host ports with
// OpenFlow conntrack-NAT rules; see package portmap.
package main

import (
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	"github.com/ovsflow/ovs-cni/pkg/portmap"
)

func init() { runtime.LockOSThread() }

func main() {
	skel.PluginMainFuncs(cnilog.Funcs("ovs-portmap", skel.CNIFuncs{
		Add: portmap.CmdAdd, Del: portmap.CmdDel, Check: portmap.CmdCheck,
		GC: portmap.CmdGC, Status: portmap.CmdStatus,
	}), version.All, buildinfo.About("ovs-portmap"))
}
