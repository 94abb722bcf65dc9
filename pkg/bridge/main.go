package bridge

import (
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
)

// Main runs the plugin as the binary name (ovs-bridge, or TLSBuild: the
// same commands, the dialer of ssl: endpoints linked in by its main).
func Main(name string) {
	runtime.LockOSThread() // netns switches must stay on one thread
	skel.PluginMainFuncs(cnilog.Funcs(name, cnicmd.Funcs(skel.CNIFuncs{
		Add: CmdAdd, Del: CmdDel, Check: CmdCheck, GC: CmdGC, Status: CmdStatus,
	})), version.All, buildinfo.About(name))
}
