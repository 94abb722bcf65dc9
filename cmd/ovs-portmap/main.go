// Command ovs-portmap is a chained CNI plugin that publishes host ports with
// OpenFlow conntrack-NAT rules; see package portmap. Run as
// `ovs-portmap reconcile -ovsdb ENDPOINT [-watch]` it rebuilds the flows of
// every live attachment from OVSDB (see package reconcile); `ovs-portmap
// trace` and `ovs-portmap flows` show what one attachment's flows do (see
// package inspect).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"

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

// usage is what "ovs-portmap help" prints, before each command's flags.
const usage = `Run by a container runtime (CNI_COMMAND set), ovs-portmap is the chained
CNI plugin that publishes host ports. Run by hand on a node:

  ovs-portmap reconcile [flags]  rebuild the flows of every live attachment from OVSDB
  ovs-portmap trace [flags]      one verdict per question: where a host-port request
                                 goes, which guard drops which frame
  ovs-portmap flows [flags]      an attachment's flows, with packet and byte counters
  ovs-portmap help               this text (also -h, --help)

Exit codes: 0 the command did its work (a verdict, even "run reconcile", is
an answer); 1 it could not (attachment not found, a question the attachment
does not fit, OVS unreachable); 2 a usage error (unknown flag or value).
`

func main() {
	if len(os.Args) == 1 && os.Getenv("CNI_COMMAND") == "" || len(os.Args) > 1 && slices.Contains([]string{"help", "-h", "-help", "--help"}, os.Args[1]) {
		os.Exit(help(os.Stdout))
	}
	if len(os.Args) > 1 && os.Args[1] == "reconcile" { // run by hand or by a unit, not by a runtime
		os.Exit(reconcileMain(os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "trace" {
		os.Exit(inspect.TraceMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "flows" {
		os.Exit(inspect.FlowsMain(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Getenv("CNI_COMMAND") == "" {
		fmt.Fprintf(os.Stderr, "ovs-portmap: unknown command %q (ovs-portmap help lists them)\n", os.Args[1])
		os.Exit(2)
	}
	skel.PluginMainFuncs(cnilog.Funcs("ovs-portmap", cnicmd.Funcs(skel.CNIFuncs{
		Add: portmap.CmdAdd, Del: portmap.CmdDel, Check: portmap.CmdCheck,
		GC: portmap.CmdGC, Status: portmap.CmdStatus,
	})), version.All, buildinfo.About("ovs-portmap"))
}

func reconcileMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ovsdb := endpoint.MustParse(endpoint.DefaultOVSDB)
	fs.Var(&ovsdb, "ovsdb", "OVSDB endpoint")
	control := fs.String("vswitchd-control", "", "ovs-vswitchd's control socket, when ADD recorded none (default: found as ovs-appctl finds it)")
	watch := fs.Bool("watch", false, "keep running: reconcile whenever ovs-vswitchd (re)starts")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	return reconcile.Run(ovsdb, *control, *watch, stderr)
}

// help prints usage and each command's flags (as its -h prints them).
func help(w io.Writer) int {
	fmt.Fprintf(w, "%s\n\n%s", buildinfo.About("ovs-portmap"), usage)
	for _, c := range []struct {
		name string
		run  func(args []string, stderr io.Writer) int
	}{
		{"reconcile", reconcileMain},
		{"trace", func(args []string, stderr io.Writer) int { return inspect.TraceMain(args, io.Discard, stderr) }},
		{"flows", func(args []string, stderr io.Writer) int { return inspect.FlowsMain(args, io.Discard, stderr) }},
	} {
		fmt.Fprintf(w, "\novs-portmap %s:\n", c.name)
		var b strings.Builder
		c.run([]string{"-h"}, &b)
		fmt.Fprint(w, strings.TrimPrefix(b.String(), "Usage of "+c.name+":\n"))
	}
	return 0
}
