// Package multinode tests the plugins on several nodes without Kubernetes:
// the nodes of `hack/ovs-in-docker.sh up`, Docker containers on one Docker
// network, each running Open vSwitch (br0 prepared by deploy/node-prep.sh,
// its uplink the container's eth0), containerd with its CRI plugin, the
// plugins and conflist of deploy/install-cni.sh and `ovs-portmap reconcile
// -watch` as the DaemonSet's reconcile container runs it.
// `hack/ovs-in-docker.sh test` runs up, these tests and down.
//
// The tests drive the nodes as an operator would: through the harness
// (`hack/ovs-in-docker.sh exec NODE CMD...`), pods through the CRI of a
// node (oid-pod run and rm: crictl, so containerd executes the plugins),
// and Docker itself to restart or kill a node. They reach pods the way
// traffic does: from a pod's network namespace, from a node's own network
// namespace, and from this host (the test's own process). Each test starts
// the pods it needs and, at its end, removes every pod of every node and
// checks that nothing of the plugins is left on any node; tests run one
// at a time. The tests that restart or kill a node are in restart_test.go,
// which go test runs last.
//
// Environment (hack/ovs-in-docker.sh test sets it):
//
//	OVSFLOW_MULTINODE_NODES    the output of `up` (its "NODE <name> <IPv4> <IPv6> <pod IPv4 CIDR> <pod IPv6 CIDR>" lines); without it the tests skip
//	OVSFLOW_MULTINODE_VERSION  the version the plugins on the nodes must report (the harness's build of this tree)
//	OVSFLOW_MULTINODE_PREFIX   the harness's OID_PREFIX: node NAME is the Docker container PREFIX-NAME (default ovsflow-oid)
//	OVSFLOW_MULTINODE_HARNESS  hack/ovs-in-docker.sh; default ../../hack/ovs-in-docker.sh
//
// Docker is reached as the harness reaches it (DOCKER_HOST, which the
// harness exports when it runs the tests).
package multinode

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// node is a node as `up` describes it.
type node struct {
	Name       string
	IPv4, IPv6 netip.Addr
	Pod4, Pod6 netip.Prefix // its pod CIDRs
}

// addr is the node's address of the family of dst.
func (n node) addr(dst netip.Addr) netip.Addr {
	if dst.Is6() {
		return n.IPv6
	}
	return n.IPv4
}

var (
	nodes      []node
	version    string
	prefix     string
	harness    string
	skipReason string
)

func TestMain(m *testing.M) {
	up := os.Getenv("OVSFLOW_MULTINODE_NODES")
	if up == "" {
		skipReason = "OVSFLOW_MULTINODE_NODES is not set: no nodes (hack/ovs-in-docker.sh test runs these tests)"
		fmt.Println("test/multinode: " + skipReason)
		os.Exit(m.Run())
	}
	var err error
	if nodes, err = parseNodes(up); err != nil {
		fmt.Fprintf(os.Stderr, "test/multinode: OVSFLOW_MULTINODE_NODES: %v\n", err)
		os.Exit(1)
	}
	if len(nodes) < 2 {
		fmt.Fprintf(os.Stderr, "test/multinode: %d nodes, want at least 2\n", len(nodes))
		os.Exit(1)
	}
	if version = os.Getenv("OVSFLOW_MULTINODE_VERSION"); version == "" {
		fmt.Fprintln(os.Stderr, "test/multinode: OVSFLOW_MULTINODE_VERSION is not set (the version the plugins on the nodes must report)")
		os.Exit(1)
	}
	if prefix = os.Getenv("OVSFLOW_MULTINODE_PREFIX"); prefix == "" {
		prefix = "ovsflow-oid"
	}
	if harness = os.Getenv("OVSFLOW_MULTINODE_HARNESS"); harness == "" {
		harness, _ = filepath.Abs("../../hack/ovs-in-docker.sh")
	}
	os.Exit(m.Run())
}

// parseNodes reads the NODE lines of up's output; other lines are ignored.
func parseNodes(up string) ([]node, error) {
	var out []node
	for _, line := range strings.Split(up, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "NODE" {
			continue
		}
		if len(f) != 6 {
			return nil, fmt.Errorf("line %q: want NODE <name> <IPv4> <IPv6> <pod IPv4 CIDR> <pod IPv6 CIDR>", line)
		}
		n := node{Name: f[1]}
		var err error
		if n.IPv4, err = parseAddr(f[2], false); err != nil {
			return nil, fmt.Errorf("line %q: node IPv4: %w", line, err)
		}
		if n.IPv6, err = parseAddr(f[3], true); err != nil {
			return nil, fmt.Errorf("line %q: node IPv6: %w", line, err)
		}
		if n.Pod4, err = netip.ParsePrefix(f[4]); err != nil {
			return nil, fmt.Errorf("line %q: pod IPv4 CIDR: %w", line, err)
		}
		if n.Pod6, err = netip.ParsePrefix(f[5]); err != nil {
			return nil, fmt.Errorf("line %q: pod IPv6 CIDR: %w", line, err)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseAddr(s string, v6 bool) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, err
	}
	if a.Is6() != v6 {
		return a, fmt.Errorf("%s: wrong family", s)
	}
	return a, nil
}

// needNodes skips a test without nodes.
func needNodes(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
