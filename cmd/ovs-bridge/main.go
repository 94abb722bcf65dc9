// Command ovs-bridge is a CNI plugin that connects containers to an Open
// vSwitch bridge; see package bridge.
package main

import (
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/bridge"
	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
)

func init() { runtime.LockOSThread() } // netns switches must stay on one thread

func main() {
	skel.PluginMainFuncs(cnilog.Funcs("ovs-bridge", cnicmd.Funcs(skel.CNIFuncs{
		Add: bridge.CmdAdd, Del: bridge.CmdDel, Check: bridge.CmdCheck,
		GC: bridge.CmdGC, Status: bridge.CmdStatus,
	})), version.All, buildinfo.About("ovs-bridge"))
}
