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
	"github.com/ovsflow/ovs-cni/test/internal/sandbox"
)

var (
	sandboxNS = sandbox.Env.NetNS
	ovsdbAddr = sandbox.Env.OVSDB
	binDir    = sandbox.Env.BinDir
	repoRoot  = sandbox.Env.Repo
	datapath  = sandbox.Datapath // "netdev" or "system" (OVSFLOW_DATAPATH)
	// ovsdbEP is ovsdbAddr parsed (zero outside the sandbox, where no test
	// runs).
	ovsdbEP, _ = endpoint.Parse(ovsdbAddr)
)

func TestMain(m *testing.M) {
	os.Exit(sandbox.Main(m, sandbox.Options{Suite: "e2e", KernelDatapath: true, Build: []string{
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/ipam/static",
		"github.com/containernetworking/plugins/plugins/ipam/dhcp",
		"github.com/containernetworking/plugins/plugins/main/loopback",
	}}))
}

// requireSandbox skips, loudly, when the suite cannot run here.
func requireSandbox(t *testing.T) { sandbox.Require(t) }
