// Command ovsflow-agent is the node agent of the Kubernetes DaemonSet
// (deploy/ovsflow-cni.yaml); see package agent.
//
//	ovsflow-agent [flags]             run: plugins, conflist, routes, reconcile, probes
//	ovsflow-agent routes [flags]      on a host that is not a Node (a control-plane host): the routes to every Node's pod ranges, probes
//	ovsflow-agent uninstall [flags]   remove what the suite put on the node, then exit
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/ovsflow/ovs-cni/pkg/agent"
	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
)

func init() { runtime.LockOSThread() }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Fprintln(os.Stderr, "ovsflow-agent", buildinfo.Version)
	if err := agent.Main(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ovsflow-agent:", err)
		os.Exit(1)
	}
}
