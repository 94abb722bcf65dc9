// Package resilience checks that the plugins survive what runtimes and nodes
// do to them: SIGKILL at any point of ADD followed by the runtime's DEL,
// OVSDB and ovs-vswitchd going away, a storm of concurrent ADD/CHECK/DEL with
// random kills followed by GC, malformed and hostile input, and foreign OVS
// ports, flows and nft tables next to ours. Every test asserts that nothing of
// an attachment is left once the runtime is done with it, from independent
// oracles (ovs-vsctl, ovs-ofctl, nft, ip, the IPAM files), and prints its
// figures as "FIGURE <name> key=value ..." lines (hack/resilience.sh collects
// them).
//
// It runs when OVSFLOW_RESILIENCE=1 (hack/resilience.sh sets it and prints
// the figures). Like test/e2e, TestMain builds the binaries, starts a private Open vSwitch
// (hack/ovs-sandbox.sh) and re-executes the test binary inside the sandbox's
// netns, which then plays the node; containers are network namespaces.
package resilience

import (
	"os"
	"testing"

	"github.com/ovsflow/ovs-cni/test/framework"
)

const envEnable = "OVSFLOW_RESILIENCE"

var (
	sandboxNS = framework.Env.NetNS
	ovsdbAddr = framework.Env.OVSDB
	binDir    = framework.Env.BinDir
	repoRoot  = framework.Env.Repo
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, framework.Options{Suite: "resilience",
		Build: []string{"github.com/containernetworking/plugins/plugins/ipam/host-local"},
		Gate: func() string {
			if os.Getenv(envEnable) == "" {
				// Minutes of fault injection: run by hack/resilience.sh, not by every `go test ./...`.
				return "the resilience suite runs with " + envEnable + "=1 (hack/resilience.sh sets it)"
			}
			return ""
		}}))
}

// requireSandbox skips, loudly, when the suite cannot run here.
func requireSandbox(t *testing.T) { framework.Require(t) }
