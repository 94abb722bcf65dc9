package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The manifests, by absolute path (the harness runs kubectl from the repository root).
var (
	cniManifest, _       = filepath.Abs(filepath.Join("..", "..", "deploy", "ovsflow-cni.yaml"))
	uninstallManifest, _ = filepath.Abs(filepath.Join("..", "..", "deploy", "ovsflow-uninstall.yaml"))
)

// preparedState: the node as node-prep.sh left it on its first boot
// (hack/ovs-in-docker's node-init.sh keeps oid-snapshot's output), and as
// it is now.
func preparedState(t *testing.T, ctx context.Context, nodeName string) (then, now nodeState) {
	t.Helper()
	out, err := onNode(ctx, nodeName, "cat /etc/oid/prepared && echo '== now' && oid-snapshot br0")
	if err != nil {
		t.Fatalf("node %s: the snapshot after node-prep: %v", nodeName, err)
	}
	a, b, ok := strings.Cut(out, "== now\n")
	if !ok {
		t.Fatalf("node %s: snapshot output %q", nodeName, out)
	}
	return parseState(a), parseState(b)
}

// suiteTables: the nft tables of the suite (ovsflow_*) among a node's.
func suiteTables(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.Contains(l, " ovsflow") {
			out = append(out, l)
		}
	}
	return out
}

// TestUninstallLeavesNodeAsPrepared: with a hostPort pod on every node (its
// port, flows, records, nft elements, gateway addresses and the agent's
// routes in place), `kubectl delete -f deploy/ovsflow-cni.yaml` and then
// deploy/ovsflow-uninstall.yaml leave every node as node-prep.sh left it
// on its first boot, before Kubernetes and the DaemonSet: the same flows
// (the base flow only), bridge ports, bridge and root external_ids, Port
// and Interface records, bridge addresses, routes (none of protocol 157),
// CNI bin and conf dirs (no plugin, no conflist); and no nft table of the
// suite (node-prep's reconcile made the empty host-port tables; uninstall
// removes them, the next boot's node-prep makes them again). The control:
// after the delete and before the uninstall, the node differs from the
// snapshot. At the end the DaemonSet is applied again and the pods, whose
// attachments uninstall forgot, are deleted (their DEL succeeds).
func TestUninstallLeavesNodeAsPrepared(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	const hp = 18130
	for _, nd := range nodes {
		createPods(t, ctx, ns, appPod("un-"+nd.Name, nd.Name, map[string]string{"role": "uninstall"}, hostPorts(hp, "")...))
	}
	waitPodsReady(t, ctx, ns, "role=uninstall", len(nodes))

	redeployed := false
	redeploy := func() {
		if redeployed {
			return
		}
		redeployed = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_, _ = runHarness(ctx, "kubectl", "delete", "--ignore-not-found", "-f", uninstallManifest)
		if out, err := runHarness(ctx, "kubectl", "apply", "-f", cniManifest); err != nil {
			t.Errorf("applying %s again: %v", cniManifest, err)
		} else {
			t.Logf("%s", out)
		}
		waitRolledOut(t, ctx)
		eventually(t, ctx, 3*time.Minute, "every node Ready again", func() error {
			for _, nd := range nodes {
				n, err := kube.CoreV1().Nodes().Get(ctx, nd.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if !nodeReady(n) {
					return fmt.Errorf("node %s not Ready", nd.Name)
				}
			}
			return nil
		})
	}
	t.Cleanup(redeploy)

	if _, err := runHarness(ctx, "kubectl", "delete", "--wait", "-f", cniManifest); err != nil {
		t.Fatalf("deleting the DaemonSet: %v", err)
	}
	eventually(t, ctx, 2*time.Minute, "the agent's pods gone", func() error {
		pods, err := kube.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + dsName})
		if err != nil {
			return err
		}
		if len(pods.Items) != 0 {
			return fmt.Errorf("%d pods left", len(pods.Items))
		}
		return nil
	})
	// The control: the DaemonSet's removal alone leaves the node unlike the snapshot.
	for _, nd := range nodes {
		then, now := preparedState(t, ctx, nd.Name)
		for _, sec := range []string{"flows", "records", "cni-bin", "cni-conf"} {
			if diffLines(then[sec], now[sec]) == nil {
				t.Errorf("control: node %s: %s as after node-prep before the uninstall ran: the comparison below proves nothing", nd.Name, sec)
			}
		}
	}

	if _, err := runHarness(ctx, "kubectl", "apply", "-f", uninstallManifest); err != nil {
		t.Fatalf("applying %s: %v", uninstallManifest, err)
	}
	if out, err := runHarness(ctx, "kubectl", "-n", dsNamespace, "rollout", "status", "daemonset/ovsflow-uninstall", "--timeout=180s"); err != nil {
		t.Fatalf("the uninstall did not finish on every node: %v", err)
	} else {
		t.Logf("%s", out)
	}
	if out, err := runHarness(ctx, "kubectl", "-n", dsNamespace, "logs", "-l", "app.kubernetes.io/name=ovsflow-uninstall", "-c", "uninstall", "--prefix", "--tail=-1"); err == nil {
		t.Logf("uninstall logs:\n%s", out)
	}
	if _, err := runHarness(ctx, "kubectl", "delete", "--wait", "-f", uninstallManifest); err != nil {
		t.Errorf("deleting %s: %v", uninstallManifest, err)
	}

	for _, nd := range nodes {
		then, now := preparedState(t, ctx, nd.Name)
		for _, sec := range []string{"flows", "ports", "bridge", "root", "records", "addresses", "routes", "cni-bin", "cni-conf"} {
			if d := diffLines(then[sec], now[sec]); d != nil {
				t.Errorf("node %s: %s after the uninstall differ from after node-prep (- then, + now):\n%s", nd.Name, sec, strings.Join(d, "\n"))
			}
		}
		if len(now["flows"]) == 0 || len(now["ports"]) == 0 {
			t.Errorf("node %s: node-prep's base flow or uplink gone: flows %v, ports %v", nd.Name, now["flows"], now["ports"])
		}
		if tb := suiteTables(now["nft"]); tb != nil {
			t.Errorf("node %s: nft tables of the suite left: %v", nd.Name, tb)
		}
		if st := suiteState(t, ctx, nd.Name); len(st["routes"]) != 0 || len(st["records"]) != 0 {
			t.Errorf("node %s: routes of protocol 157 or records of the suite left: %v", nd.Name, st)
		}
	}

	// The DaemonSet back, the pods deleted: their DEL finds nothing of theirs and succeeds.
	redeploy()
	if err := kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "role=uninstall"}); err != nil {
		t.Fatalf("deleting the pods: %v", err)
	}
	eventually(t, ctx, 3*time.Minute, "the pods deleted (their sandboxes removed: CNI DEL succeeded)", func() error {
		for _, nd := range nodes {
			_, err := kube.CoreV1().Pods(ns).Get(ctx, "un-"+nd.Name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("pod un-%s still there (%v)", nd.Name, err)
			}
			out, err := onNode(ctx, nd.Name, fmt.Sprintf("crictl pods -q --namespace '%s'", ns))
			if err != nil {
				return err
			}
			if strings.TrimSpace(out) != "" {
				return fmt.Errorf("node %s: sandboxes left: %s", nd.Name, out)
			}
		}
		return nil
	})
	for _, nd := range nodes {
		if bad := readRecord(t, ctx, nd.Name).stale(); bad != nil {
			t.Errorf("node %s: stale after the pods' DEL: %v", nd.Name, bad)
		}
	}
}
