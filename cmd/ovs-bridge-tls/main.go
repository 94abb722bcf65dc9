// Command ovs-bridge-tls is ovs-bridge with the dialer of ssl: OVSDB
// endpoints linked in: ovs-bridge runs a command whose "ovsdb" is ssl:
// here, so that the plugin most configs run does not carry crypto/tls
// (bridge.TLSBuild). It may also be named as the plugin type itself.
package main

import (
	"runtime"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/bridge"
	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	_ "github.com/ovsflow/ovs-cni/pkg/endpoint/tlsdial" // an ssl: "ovsdb"
)

func init() { runtime.LockOSThread() } // netns switches must stay on one thread

func main() {
	skel.PluginMainFuncs(cnilog.Funcs("ovs-bridge-tls", cnicmd.Funcs(skel.CNIFuncs{
		Add: bridge.CmdAdd, Del: bridge.CmdDel, Check: bridge.CmdCheck,
		GC: bridge.CmdGC, Status: bridge.CmdStatus,
	})), version.All, buildinfo.About("ovs-bridge-tls"))
}
