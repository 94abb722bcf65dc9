// Command ovs-bandwidth is a chained CNI plugin that limits the bandwidth
// of a container interface inside Open vSwitch; see package bandwidth.
package main

import (
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/bandwidth"
	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
)

func init() { runtime.LockOSThread() }

func main() {
	skel.PluginMainFuncs(cnilog.Funcs("ovs-bandwidth", cnicmd.Funcs(skel.CNIFuncs{
		Add: bandwidth.CmdAdd, Del: bandwidth.CmdDel, Check: bandwidth.CmdCheck,
		GC: bandwidth.CmdGC, Status: bandwidth.CmdStatus,
	})), version.All, buildinfo.About("ovs-bandwidth"))
}
