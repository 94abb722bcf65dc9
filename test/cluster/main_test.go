// Package cluster tests the plugins and the DaemonSet of deploy/ on a
// Kubernetes cluster of several nodes: `hack/ovs-in-docker.sh up -kube`
// (a control-plane container and Docker containers as nodes, each running
// Open vSwitch, containerd 2.x, kubelet and kube-proxy), after
// `hack/ovs-in-docker.sh deploy`. `hack/ovs-in-docker.sh test -kube` runs
// up, deploy, these tests and down.
//
// The tests talk to the real API server with client-go and reach pods the
// way traffic does: from a pod's network namespace (entered on its node),
// from a node's own network namespace, and from this host. Each test makes
// its own namespace and objects and removes them; each is named for what it
// proves. The tests that drain, restart or delete a node are in
// recovery_test.go, which go test runs last.
//
// Environment:
//
//	OVSFLOW_CLUSTER_KUBECONFIG  the admin kubeconfig (up -kube prints it); without it the tests skip
//	OVSFLOW_CLUSTER_HARNESS     hack/ovs-in-docker.sh (exec NODE, restart NODE); default ../../hack/ovs-in-docker.sh
package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The test app of the runtime suites (hack/install-runtimes.sh), imported
// into every node's containerd: "hello from NAME to PEER" on TCP 80 and UDP 53.
const appImage = "rt.local/ovsflow-app:1"

var (
	kube           kubernetes.Interface
	kubeconfigPath string // the admin's kubeconfig, the same path on the nodes (the harness mounts it)
	harness        string
)

func TestMain(m *testing.M) {
	kc := os.Getenv("OVSFLOW_CLUSTER_KUBECONFIG")
	if kc == "" {
		fmt.Println("test/cluster: OVSFLOW_CLUSTER_KUBECONFIG is not set: no cluster, the tests skip (hack/ovs-in-docker.sh test -kube runs them)")
		os.Exit(m.Run())
	}
	kubeconfigPath = kc
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		fmt.Fprintf(os.Stderr, "test/cluster: reading kubeconfig %q: %v\n", kc, err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = 50, 100
	kube, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "test/cluster: client: %v\n", err)
		os.Exit(1)
	}
	harness = os.Getenv("OVSFLOW_CLUSTER_HARNESS")
	if harness == "" {
		harness, _ = filepath.Abs("../../hack/ovs-in-docker.sh")
	}
	os.Exit(m.Run())
}

// needCluster skips a test without a cluster.
func needCluster(t *testing.T) {
	t.Helper()
	if kube == nil {
		t.Skip("no cluster: OVSFLOW_CLUSTER_KUBECONFIG is not set")
	}
}

// testContext: a context for one test's calls; long, since the machine is shared.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
