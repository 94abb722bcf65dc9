package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runHarness runs hack/ovs-in-docker.sh with args (kubectl, restart).
func runHarness(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, harness, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", harness, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// nodeRecord is what the plugins keep on a node: the container ids of the
// attachments' Port rows, their cookies (low 40 bits, the attachment's
// identity), and the cookies of the attachments' flows.
type nodeRecord struct {
	Ports      map[string]string // container id -> identity (low 40 bits of the cookie)
	FlowOwners map[string]int    // identity -> flows of that identity (kinds other than shared, tombstone and gateway)
	Sandboxes  map[string]bool   // ready sandboxes (crictl)
	// GatewayFlows counts the flows of the bridge's gateways (cookie kind
	// 5, one identity per gateway prefix), Gateways the gateways br0
	// records: the flows are the bridge's while it records a gateway.
	GatewayFlows, Gateways int
}

var (
	reContainer = regexp.MustCompile(`ovsflow\.io/container-id=([0-9a-f]+)`)
	reIdentity  = regexp.MustCompile(`ovsflow\.io/identity=0x0?fc50[0-9a-f]([0-9a-f]{10})`)
	reCookie    = regexp.MustCompile(`cookie=0x0?fc50([0-9a-f])([0-9a-f]{10}),`)
)

func readRecord(t *testing.T, ctx context.Context, nodeName string) nodeRecord {
	t.Helper()
	out, err := onNode(ctx, nodeName, `ovs-vsctl --bare --columns=external_ids find Port external_ids:ovsflow.io/owner=ovsflow-cni; echo ==; ovs-ofctl dump-flows br0 --no-stats; echo ==; crictl pods -q --state ready; echo ==; ovs-vsctl --bare get Bridge br0 external_ids`)
	if err != nil {
		t.Fatalf("reading the plugins' record on %s: %v", nodeName, err)
	}
	parts := strings.SplitN(out, "==\n", 4)
	if len(parts) != 4 {
		t.Fatalf("reading the plugins' record on %s: %q", nodeName, out)
	}
	r := nodeRecord{Ports: map[string]string{}, FlowOwners: map[string]int{}, Sandboxes: map[string]bool{}}
	for _, line := range strings.Split(parts[0], "\n") {
		c, id := reContainer.FindStringSubmatch(line), reIdentity.FindStringSubmatch(line)
		if c != nil && id != nil {
			r.Ports[c[1]] = id[1]
		}
	}
	for _, m := range reCookie.FindAllStringSubmatch(parts[1], -1) {
		switch kind := m[1]; kind {
		case "0", "3": // shared flows, tombstones of ports being deleted
		case "5":
			r.GatewayFlows++
		default:
			r.FlowOwners[m[2]]++
		}
	}
	r.Gateways = strings.Count(parts[3], "ovsflow.io/gateway/")
	for _, id := range strings.Fields(parts[2]) {
		r.Sandboxes[id] = true
	}
	return r
}

// stale: the attachments whose sandbox is not ready, and the flows of no attachment.
func (r nodeRecord) stale() []string {
	var bad []string
	idents := map[string]bool{}
	for c, id := range r.Ports {
		idents[id] = true
		if !r.Sandboxes[c] {
			bad = append(bad, "port of sandbox "+c[:12]+", which is not a ready sandbox")
		}
	}
	for id, n := range r.FlowOwners {
		if !idents[id] {
			bad = append(bad, fmt.Sprintf("%d flows of identity %s, no port has it", n, id))
		}
	}
	if r.GatewayFlows > 0 && r.Gateways == 0 {
		bad = append(bad, fmt.Sprintf("%d flows of gateways, and br0 records none", r.GatewayFlows))
	}
	sort.Strings(bad)
	return bad
}

// attached: the node's attachments of these sandboxes.
func (r nodeRecord) attached(sandboxes ...string) int {
	n := 0
	for _, s := range sandboxes {
		if _, ok := r.Ports[s]; ok {
			n++
		}
	}
	return n
}

// TestDrainMovesHostPortPod: kubectl drain of the node of a Deployment's pod
// that publishes a host port moves the pod to another node, and the host port
// follows: it answers there from this host, and the drained node keeps no
// attachment, flow or record of the old pod.
func TestDrainMovesHostPortPod(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	const hp = 18100
	one := int32(1)
	labels := map[string]string{"app": "mover"}
	spec := appPodSpec("", 1, hostPorts(hp, "")...)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "mover"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment mover: %v", err)
	}
	old := waitPodsReady(t, ctx, ns, "app=mover", 1)[0]
	oldSandbox := sandboxID(t, ctx, &old)
	from := nodeByName(t, ctx, old.Spec.NodeName)
	if got := fromHost(probe{"tcp", from.IPv4, hp}); !strings.HasPrefix(got, "hello from "+old.Name+" ") {
		t.Fatalf("before the drain, %s:%d: got %q, want hello from %s", from.IPv4, hp, got, old.Name)
	}
	t.Cleanup(func() { _, _ = runHarness(context.Background(), "kubectl", "uncordon", from.Name) })
	if out, err := runHarness(ctx, "kubectl", "drain", from.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=120s"); err != nil {
		t.Fatalf("kubectl drain: %v", err)
	} else {
		t.Logf("kubectl drain %s: %s", from.Name, strings.TrimSpace(out))
	}
	moved := waitPodsReady(t, ctx, ns, "app=mover", 1)[0]
	if moved.Spec.NodeName == from.Name || moved.Name == old.Name {
		t.Fatalf("after the drain of %s: pod %s on %s", from.Name, moved.Name, moved.Spec.NodeName)
	}
	to := nodeByName(t, ctx, moved.Spec.NodeName)
	for _, pr := range hostPortProbes(to, hp) {
		if got := fromHost(pr); !strings.HasPrefix(got, "hello from "+moved.Name+" to ") {
			t.Errorf("host port on %s after the move, %v: got %q, want hello from %s", to.Name, pr, got, moved.Name)
		}
	}
	eventually(t, ctx, time.Minute, "the drained node "+from.Name+" forgets the old pod", func() error {
		if got := fromHost(probe{"tcp", from.IPv4, hp}); got != "" {
			return fmt.Errorf("%s:%d still answers: %q", from.IPv4, hp, got)
		}
		r := readRecord(t, ctx, from.Name)
		if r.attached(oldSandbox) != 0 {
			return fmt.Errorf("the old pod's attachment (sandbox %s) is still there", oldSandbox[:12])
		}
		if bad := r.stale(); bad != nil {
			return fmt.Errorf("stale: %v", bad)
		}
		out, err := onNode(ctx, from.Name, fmt.Sprintf("ovs-ofctl dump-flows br0 --no-stats | grep -c 'tp_dst=%d' || true", hp))
		if err != nil {
			return err
		}
		if n := strings.TrimSpace(out); n != "0" {
			return fmt.Errorf("%s flows for port %d left", n, hp)
		}
		return nil
	})
}

func nodeByName(t *testing.T, ctx context.Context, name string) node {
	t.Helper()
	for _, nd := range readyNodes(t, ctx, 1) {
		if nd.Name == name {
			return nd
		}
	}
	t.Fatalf("no node %s", name)
	return node{}
}

// TestNodeRestartBringsBackPodsWithHostPorts: after `docker restart` of a
// node (its kubelet, containerd, Open vSwitch and pods all killed, the
// container's files kept), its pods come back in new sandboxes with their host
// ports answering, and the node keeps no attachment or flow of the dead
// sandboxes.
func TestNodeRestartBringsBackPodsWithHostPorts(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	last := nodes[len(nodes)-1]
	ports := []int32{18110, 18111}
	var before []string
	for _, hp := range ports {
		createPods(t, ctx, ns, appPod(fmt.Sprintf("r%d", hp), last.Name, map[string]string{"role": "restart"}, hostPorts(hp, "")...))
	}
	for _, p := range waitPodsReady(t, ctx, ns, "role=restart", len(ports)) {
		before = append(before, sandboxID(t, ctx, &p))
	}
	if out, err := runHarness(ctx, "restart", last.Name); err != nil {
		t.Fatalf("docker restart of %s: %v", last.Name, err)
	} else if out != "" {
		t.Logf("restart: %s", out)
	}
	eventually(t, ctx, 3*time.Minute, "node "+last.Name+" Ready again", func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, last.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(n) {
			return fmt.Errorf("not Ready")
		}
		return nil
	})
	eventually(t, ctx, 3*time.Minute, "the pods back in new sandboxes, their host ports answering", func() error {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "role=restart"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if !podReady(&p) {
				return fmt.Errorf("pod %s not Ready", p.Name)
			}
		}
		r := readRecord(t, ctx, last.Name)
		if n := r.attached(before...); n != 0 {
			return fmt.Errorf("%d attachments of the dead sandboxes left", n)
		}
		if bad := r.stale(); bad != nil {
			return fmt.Errorf("stale: %v", bad)
		}
		for _, hp := range ports {
			for _, pr := range hostPortProbes(last, int(hp)) {
				if got := fromHost(pr); !strings.HasPrefix(got, fmt.Sprintf("hello from r%d to ", hp)) {
					return fmt.Errorf("%v: got %q", pr, got)
				}
			}
		}
		return nil
	})
}

// routesTo: the routes of a node's main table to the CIDRs (ip route show exact).
func routesTo(ctx context.Context, nodeName string, cidrs []string) (string, error) {
	var b strings.Builder
	for _, c := range cidrs {
		fam := "-4"
		if strings.Contains(c, ":") {
			fam = "-6"
		}
		fmt.Fprintf(&b, "ip %s route show exact %s;", fam, c)
	}
	out, err := onNode(ctx, nodeName, b.String())
	return strings.TrimSpace(out), err
}

// TestDeletedNodeRoutesDropped: every node routes the pod CIDRs of every other
// node (the node agent's routes, via that node's InternalIP, or through the
// tunnel with its flows where the node is on another subnet); after `kubectl
// delete node`, the other nodes drop the routes to the deleted node's pod
// CIDRs, and the tunnel's flows for it. The node is booted again at the end (kubelet registers it anew).
func TestDeletedNodeRoutesDropped(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	gone := nodes[len(nodes)-1]
	for _, nd := range nodes[:len(nodes)-1] {
		eventually(t, ctx, time.Minute, "routes of "+nd.Name+" to "+gone.Name+"'s pod CIDRs", func() error {
			out, err := routesTo(ctx, nd.Name, gone.PodCIDRs)
			if err != nil {
				return err
			}
			direct := strings.Contains(out, "via "+gone.IPv4) && strings.Contains(out, "via "+gone.IPv6)
			tunnelled := strings.Contains(out, "via 169.254.253.1") && strings.Contains(out, "via fe80::fc5:1")
			if !direct && !tunnelled {
				return fmt.Errorf("routes to %v: %q, want them via %s and %s, or through the tunnel (another subnet)", gone.PodCIDRs, out, gone.IPv4, gone.IPv6)
			}
			if flows, err := tunnelFlowsFor(ctx, nd.Name, gone); err != nil || tunnelled != (flows != "") {
				return fmt.Errorf("tunnel flows of %s: %q (%v); routes %q", gone.Name, flows, err, out)
			}
			return nil
		})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := runHarness(ctx, "restart", gone.Name); err != nil {
			t.Logf("booting %s again: %v", gone.Name, err)
		}
		eventually(t, ctx, 3*time.Minute, "node "+gone.Name+" registered and Ready again", func() error {
			n, err := kube.CoreV1().Nodes().Get(ctx, gone.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !nodeReady(n) || len(n.Spec.PodCIDRs) == 0 {
				return fmt.Errorf("not Ready or no pod CIDRs yet")
			}
			return nil
		})
	})
	if err := kube.CoreV1().Nodes().Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting node %s: %v", gone.Name, err)
	}
	for _, nd := range nodes[:len(nodes)-1] {
		eventually(t, ctx, time.Minute, nd.Name+" drops its routes to "+gone.Name+"'s pod CIDRs", func() error {
			out, err := routesTo(ctx, nd.Name, gone.PodCIDRs)
			if err != nil {
				return err
			}
			if out != "" {
				return fmt.Errorf("routes to %v still there: %q", gone.PodCIDRs, out)
			}
			if flows, err := tunnelFlowsFor(ctx, nd.Name, gone); err != nil || flows != "" {
				return fmt.Errorf("tunnel flows of %s still there: %q (%v)", gone.Name, flows, err)
			}
			return nil
		})
	}
}

// tunnelFlowsFor: the overlay's flows of a node that name node gone (its
// pod CIDRs, its InternalIP as the tunnel's source), without counters.
func tunnelFlowsFor(ctx context.Context, nodeName string, gone node) (string, error) {
	pat := "tun_src=" + gone.IPv4 + ","
	for _, c := range gone.PodCIDRs {
		pat += "|_dst=" + c + "( |,)"
	}
	out, err := onNode(ctx, nodeName, fmt.Sprintf("ovs-ofctl --no-stats dump-flows br0 | grep -E '%s' || true", pat))
	return strings.TrimSpace(out), err
}

// TestReregisteredNodePodsOnItsNewRanges: a pod pinned to a node that is
// deleted (`kubectl delete node`) and booted again, so that kubelet
// registers it anew and the node IPAM controller gives it other pod ranges,
// runs again on the node's new ranges, never on the old ones: kubelet
// restarts the pods it still has at boot, before the node agent has read
// the new Node, and ovs-bridge serves no ADD (nor STATUS) until the agent
// has confirmed the conflist's ranges since the boot (docs/kubernetes.md).
// Before, the pod came back on an address of the old ranges, which no other
// node routes to it.
func TestReregisteredNodePodsOnItsNewRanges(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	gone := nodes[len(nodes)-1]
	ns := namespace(t, ctx)
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, appPod("pinned", gone.Name, map[string]string{"app": "pinned"}), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the pod: %v", err)
	}
	before := waitPodsReady(t, ctx, ns, "app=pinned", 1)[0]
	t.Logf("pod on %s (pod ranges %v): %v", gone.Name, gone.PodCIDRs, before.Status.PodIPs)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		eventually(t, ctx, 3*time.Minute, "node "+gone.Name+" registered and Ready again", func() error {
			n, err := kube.CoreV1().Nodes().Get(ctx, gone.Name, metav1.GetOptions{})
			if err == nil && (!nodeReady(n) || len(n.Spec.PodCIDRs) == 0) {
				err = fmt.Errorf("not Ready or no pod CIDRs yet")
			}
			return err
		})
	})
	if err := kube.CoreV1().Nodes().Delete(ctx, gone.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting node %s: %v", gone.Name, err)
	}
	// At once: the pod GC deletes the pods of a Node gone for 40 s.
	if _, err := runHarness(ctx, "restart", gone.Name); err != nil {
		t.Fatalf("booting %s again: %v", gone.Name, err)
	}
	var ranges []netip.Prefix
	eventually(t, ctx, 3*time.Minute, "node "+gone.Name+" registered again with pod ranges", func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, gone.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(n.Spec.PodCIDRs) == 0 {
			return fmt.Errorf("no pod CIDRs yet")
		}
		ranges = ranges[:0]
		for _, c := range n.Spec.PodCIDRs {
			ranges = append(ranges, netip.MustParsePrefix(c))
		}
		return nil
	})
	if fmt.Sprint(ranges) == fmt.Sprint(prefixesOf(gone.PodCIDRs)) {
		t.Fatalf("node %s registered again with the same pod ranges %v: the test proves nothing", gone.Name, ranges)
	}
	t.Logf("node %s registered again with pod ranges %v", gone.Name, ranges)
	eventually(t, ctx, 2*time.Minute, "the pod Ready again on the node's new ranges", func() error {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, "pinned", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil) {
			t.Fatalf("the pod was deleted (the pod GC) before the Node came back: the test proves nothing")
		}
		if err != nil {
			return err
		}
		if !podReady(p) || len(p.Status.PodIPs) == 0 {
			return fmt.Errorf("not Ready: addresses %v", p.Status.PodIPs)
		}
		for _, ip := range p.Status.PodIPs {
			a := netip.MustParseAddr(ip.IP)
			if !slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return r.Contains(a) }) {
				return fmt.Errorf("Ready on %s, outside the node's pod ranges %v", a, ranges)
			}
		}
		return nil
	})
}

// prefixesOf parses CIDRs.
func prefixesOf(cidrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		out = append(out, netip.MustParsePrefix(c))
	}
	return out
}
