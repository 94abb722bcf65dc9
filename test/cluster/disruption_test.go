package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// restartCounts: the restart count of every container of the pods in ns, by pod.
func restartCounts(t *testing.T, ctx context.Context, ns string) map[string]int32 {
	t.Helper()
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing pods of %s: %v", ns, err)
	}
	out := map[string]int32{}
	for _, p := range list.Items {
		for _, c := range p.Status.ContainerStatuses {
			out[p.Name] += c.RestartCount
		}
	}
	return out
}

// portSandboxes: the sandboxes with a Port row of the suite on the node, sorted.
func portSandboxes(t *testing.T, ctx context.Context, nd node) []string {
	t.Helper()
	s, err := readAttach(ctx, nd)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(s.Ports))
}

// TestContainerRestartKeepsAttachment: the app container of a pod exits (its
// PID 1 killed) and kubelet starts it again in the same sandbox: the restart
// count goes up, the pod keeps its address and its attachment, and answers
// on its host port again; every attachment on the node belongs to a running pod.
func TestContainerRestartKeepsAttachment(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	ns := namespace(t, ctx)
	const hp = 18180
	createPods(t, ctx, ns, appPod("restarted", nd.Name, map[string]string{"role": "restarted"}, hostPorts(hp, "")...))
	p := waitPodsReady(t, ctx, ns, "role=restarted", 1)[0]
	sandbox := sandboxID(t, ctx, &p)
	before := restartCounts(t, ctx, ns)["restarted"]
	if out, err := runHarness(ctx, "kubectl", "-n", ns, "exec", "restarted", "--", "sh", "-c", "kill 1"); err != nil {
		t.Logf("kill 1 in the container (exec ends with it): %v %s", err, out)
	}
	eventually(t, ctx, 2*time.Minute, "the container restarted by kubelet", func() error {
		if n := restartCounts(t, ctx, ns)["restarted"]; n <= before {
			return fmt.Errorf("restart count %d, want more than %d", n, before)
		}
		return nil
	})
	after := waitPodsReady(t, ctx, ns, "role=restarted", 1)[0]
	if got, want := podAddrs(&after), podAddrs(&p); !slices.Equal(got, want) {
		t.Errorf("addresses after the restart %v, want %v", got, want)
	}
	if got := sandboxID(t, ctx, &after); got != sandbox {
		t.Errorf("sandbox after the restart %s, want the same %s", got, sandbox)
	}
	eventually(t, ctx, time.Minute, "the host port answering after the restart", func() error {
		return hostPortAnswers(nd, hp, "restarted")
	})
	waitConsistent(t, ctx, nd, "after the container restart")
}

// TestKubeletRestartKeepsAttachments: kubelet of a node stopped while its
// pods run: their host ports keep answering; kubelet started again: the
// Node is Ready, kubelet has synced (a pod created after the restart is
// Ready), the pods keep their sandboxes and attachments (no CNI call: the
// same Port rows), no container restarted, the host ports answer and every
// attachment belongs to a running pod.
func TestKubeletRestartKeepsAttachments(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	ns := namespace(t, ctx)
	ports := []int{18181, 18182}
	for _, hp := range ports {
		createPods(t, ctx, ns, appPod(fmt.Sprintf("k%d", hp), nd.Name, map[string]string{"role": "kept"}, hostPorts(int32(hp), "")...))
	}
	waitPodsReady(t, ctx, ns, "role=kept", len(ports))
	before := portSandboxes(t, ctx, nd)
	restarts := restartCounts(t, ctx, ns)

	// node-init.sh's supervisor restarts kubelet: paused, so that kubelet stays down meanwhile.
	stop := `kp=$(pgrep -x kubelet); sup=$(ps -o ppid= -p $kp | tr -d ' ')
echo $sup >/run/oid/kubelet-supervisor
kill -STOP $sup && kill $kp
while [ -n "$(ps -o stat= -p $kp | grep -v Z)" ]; do sleep 0.1; done`
	resume := `kill -CONT $(cat /run/oid/kubelet-supervisor) && rm /run/oid/kubelet-supervisor`
	if _, err := onNode(ctx, nd.Name, stop); err != nil {
		t.Fatalf("stopping kubelet: %v", err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_, _ = onNode(context.Background(), nd.Name, resume)
		}
	})
	for _, hp := range ports {
		if err := hostPortAnswers(nd, hp, fmt.Sprintf("k%d", hp)); err != nil {
			t.Errorf("kubelet stopped: %v", err)
		}
	}
	if _, err := onNode(ctx, nd.Name, resume); err != nil {
		t.Fatalf("starting kubelet again: %v", err)
	}
	resumed = true
	eventually(t, ctx, 2*time.Minute, "kubelet running again", func() error {
		_, err := onNode(ctx, nd.Name, "pgrep -x kubelet")
		return err
	})
	eventually(t, ctx, 2*time.Minute, "node "+nd.Name+" Ready", func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, nd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(n) {
			return fmt.Errorf("not Ready")
		}
		return nil
	})
	createPods(t, ctx, ns, appPod("after", nd.Name, map[string]string{"role": "after"}))
	waitPodsReady(t, ctx, ns, "role=after", 1)

	after := portSandboxes(t, ctx, nd)
	var kept []string
	for _, s := range after {
		if slices.Contains(before, s) {
			kept = append(kept, s)
		}
	}
	if !slices.Equal(kept, before) || len(after) != len(before)+1 {
		t.Errorf("attachments before the kubelet restart %v, after %v: want the same, and the new pod's", before, after)
	}
	if got := restartCounts(t, ctx, ns); got["k18181"] != restarts["k18181"] || got["k18182"] != restarts["k18182"] {
		t.Errorf("restart counts %v, before the kubelet restart %v", got, restarts)
	}
	for _, hp := range ports {
		if err := hostPortAnswers(nd, hp, fmt.Sprintf("k%d", hp)); err != nil {
			t.Errorf("after the kubelet restart: %v", err)
		}
	}
	waitConsistent(t, ctx, nd, "after the kubelet restart")
}

// TestDrainLeavesNothingUncordonServes: kubectl drain of a node with a
// Deployment's pod that may run only there (publishing a host port) and a
// bare pod: nothing of either is left on the node (allocations, Port rows,
// veths, flows, nft), the DaemonSet's pod stays Ready; kubectl uncordon: the
// Deployment's pod comes back to the node and answers on its host port.
func TestDrainLeavesNothingUncordonServes(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	ns := namespace(t, ctx)
	const hp = 18183
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, pinned("stay", nd.Name, hostPorts(hp, "")...), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment stay: %v", err)
	}
	createPods(t, ctx, ns, appPod("bare", nd.Name, map[string]string{"app": "bare"}))
	pods := []corev1.Pod{waitPodsReady(t, ctx, ns, "app=stay", 1)[0], waitPodsReady(t, ctx, ns, "app=bare", 1)[0]}
	var sandboxes []string
	for i := range pods {
		sandboxes = append(sandboxes, sandboxID(t, ctx, &pods[i]))
	}
	t.Cleanup(func() { _, _ = runHarness(context.Background(), "kubectl", "uncordon", nd.Name) })
	if _, err := runHarness(ctx, "kubectl", "drain", nd.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=120s"); err != nil {
		t.Fatalf("kubectl drain: %v", err)
	}
	for i := range pods {
		waitGone(t, ctx, nd, "pod "+pods[i].Name+" drained", sandboxes[i], podAddrs(&pods[i]))
	}
	waitConsistent(t, ctx, nd, "after the drain")
	agents, err := agentPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := agents[nd.Name]; !ok || !podReady(&p) {
		t.Errorf("after the drain: the DaemonSet's pod on %s not Ready (%v)", nd.Name, ok)
	}
	if _, err := runHarness(ctx, "kubectl", "uncordon", nd.Name); err != nil {
		t.Fatalf("kubectl uncordon: %v", err)
	}
	back := waitPodsReady(t, ctx, ns, "app=stay", 1)[0]
	if back.Spec.NodeName != nd.Name || back.Name == pods[0].Name {
		t.Fatalf("after the uncordon: pod %s on %s, want a new pod on %s", back.Name, back.Spec.NodeName, nd.Name)
	}
	eventually(t, ctx, time.Minute, "the Deployment's pod answering after the uncordon", func() error {
		return hostPortAnswers(nd, hp, back.Name)
	})
	waitConsistent(t, ctx, nd, "after the uncordon")
}

// TestVswitchdKilledRebuiltWithoutCNI: ovs-vswitchd of a node killed (-9)
// under running pods: the agent's /readyz says br0 is not served; started
// again: the agent rebuilds the flows (its log: a reconcile pass with the
// attachments), /readyz is ready, the host port answers from this host on
// both addresses and from a pod of the node, with no CNI call (the same
// Port rows, no sandbox recreated) and no container restarted.
func TestVswitchdKilledRebuiltWithoutCNI(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	nd := nodes[len(nodes)-1]
	ns := namespace(t, ctx)
	const hp = 18184
	createPods(t, ctx, ns, appPod("served", nd.Name, map[string]string{"role": "served"}, hostPorts(hp, "")...),
		appPod("client", nd.Name, map[string]string{"role": "client"}))
	waitPodsReady(t, ctx, ns, "role=served", 1)
	client := waitPodsReady(t, ctx, ns, "role=client", 1)[0]
	before := portSandboxes(t, ctx, nd)
	restarts := restartCounts(t, ctx, ns)
	agents, err := agentPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	agent, ok := agents[nd.Name]
	if !ok {
		t.Fatalf("no agent pod on %s", nd.Name)
	}
	killedAt := metav1.Now()

	start := "ovs-vswitchd --pidfile=/run/openvswitch/ovs-vswitchd.pid --detach --log-file=/var/log/openvswitch/ovs-vswitchd.log -vconsole:warn"
	started := false
	t.Cleanup(func() {
		if !started {
			_, _ = onNode(context.Background(), nd.Name, start)
		}
	})
	if _, err := onNode(ctx, nd.Name, `pid=$(cat /run/openvswitch/ovs-vswitchd.pid) && kill -9 $pid && while kill -0 $pid 2>/dev/null; do sleep 0.05; done`); err != nil {
		t.Fatalf("killing ovs-vswitchd on %s: %v", nd.Name, err)
	}
	eventually(t, ctx, time.Minute, "/readyz saying br0 is not served", func() error {
		code, body, err := agentGet(ctx, nd.Name, "/readyz")
		if err != nil {
			return err
		}
		if code == 200 || !strings.Contains(body, "[-]bridges: no OpenFlow endpoint for bridge br0") {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
	// As TestStatusReadyOnlyOnceBridgeServed: the Node's NotReady lands
	// here, not on the next test.
	eventually(t, ctx, 2*time.Minute, "the Node NotReady with ovs-vswitchd dead", func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, nd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if nodeReady(n) {
			return fmt.Errorf("node %s still Ready", nd.Name)
		}
		return nil
	})
	if _, err := onNode(ctx, nd.Name, start); err != nil {
		t.Fatalf("starting ovs-vswitchd on %s: %v", nd.Name, err)
	}
	started = true
	eventually(t, ctx, 2*time.Minute, "/readyz ready and the host port answering from this host", func() error {
		if code, body, err := agentGet(ctx, nd.Name, "/readyz"); err != nil || code != 200 {
			return fmt.Errorf("/readyz %d %q (%v)", code, body, err)
		}
		return hostPortAnswers(nd, hp, "served")
	})
	eventually(t, ctx, time.Minute, "the host port answering a pod of the node", func() error {
		ps := hostPortProbes(nd, hp)
		out, err := inPod(ctx, &client, probeScript(ps))
		if err != nil {
			return err
		}
		got := answers(out)
		for _, pr := range ps {
			fam := 4
			if strings.Contains(pr.Addr, ":") {
				fam = 6
			}
			if w := hello("served", podIP(t, &client, fam)); !strings.HasPrefix(got[pr], w) {
				return fmt.Errorf("%v: got %q, want %q", pr, got[pr], w)
			}
		}
		return nil
	})
	eventually(t, ctx, 2*time.Minute, "the Node Ready again", func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, nd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(n) {
			return fmt.Errorf("node %s not Ready", nd.Name)
		}
		return nil
	})
	if after := portSandboxes(t, ctx, nd); !slices.Equal(after, before) {
		t.Errorf("attachments %v became %v: a CNI call", before, after)
	}
	if got := restartCounts(t, ctx, ns); !maps.Equal(got, restarts) {
		t.Errorf("restart counts %v became %v", restarts, got)
	}
	b, err := kube.CoreV1().Pods(dsNamespace).GetLogs(agent.Name, &corev1.PodLogOptions{Container: dsContainer, SinceTime: &killedAt}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("the agent's log: %v", err)
	}
	rebuilt := false
	for _, l := range strings.Split(string(b), "\n") {
		if i := strings.Index(l, "reconcile: attachments="); i >= 0 && !strings.HasPrefix(l[i:], "reconcile: attachments=0 ") && !strings.Contains(l, " error: ") {
			rebuilt = true
			t.Logf("agent: %s", l)
		}
	}
	if !rebuilt {
		t.Errorf("the agent's log since the kill has no reconcile pass with attachments:\n%s", b)
	}
}
