// Package e2e drives the real plugin binaries through libcni against a real
// Open vSwitch (ovsdb-server + ovs-vswitchd) that runs in a private network
// namespace started by hack/ovs-sandbox.sh. Its bridges use the userspace
// datapath, or the kernel datapath with OVSFLOW_DATAPATH=system
// (hack/ovs-vm.sh runs the suite so in a virtual machine).
//
// TestMain (test/internal/sandbox) builds the binaries, starts the sandbox and
// re-executes the test binary inside the sandbox's netns, which then plays the
// node ("host") namespace. Containers are network namespaces created by the
// tests.
package e2e

import (
	"os"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/test/framework"
)

var (
	sandboxNS = framework.Env.NetNS
	ovsdbAddr = framework.Env.OVSDB
	binDir    = framework.Env.BinDir
	repoRoot  = framework.Env.Repo
	datapath  = framework.Datapath // "netdev" or "system" (OVSFLOW_DATAPATH)
	// ovsdbEP is ovsdbAddr parsed (zero outside the sandbox, where no test
	// runs).
	ovsdbEP, _ = endpoint.Parse(ovsdbAddr)
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, framework.Options{Suite: "e2e", KernelDatapath: true, Build: []string{
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/ipam/static",
		"github.com/containernetworking/plugins/plugins/ipam/dhcp",
		"github.com/containernetworking/plugins/plugins/main/loopback",
		"github.com/containernetworking/plugins/plugins/meta/sbr",
	}}))
}

// requireSandbox skips, loudly, when the suite cannot run here.
func requireSandbox(t *testing.T) { framework.Require(t) }
