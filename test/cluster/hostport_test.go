package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// createPods creates the pods in ns.
func createPods(t *testing.T, ctx context.Context, ns string, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
}

// hostPortProbes: TCP and UDP to port hp on both addresses of a node.
func hostPortProbes(nd node, hp int) []probe {
	return []probe{{"tcp", nd.IPv4, hp}, {"udp", nd.IPv4, hp}, {"tcp", nd.IPv6, hp}, {"udp", nd.IPv6, hp}}
}

// TestHostPortOnEveryNodeFromOtherNodesPodsAndHost: a pod publishing TCP and
// UDP port 18080 on each node answers on both of that node's addresses from
// every other node's own network namespace, from a pod on every other node,
// and from this host; it sees each caller's own address (the node's, the
// pod's, this host's: no SNAT on the way in).
func TestHostPortOnEveryNodeFromOtherNodesPodsAndHost(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	const hp = 18080
	for _, nd := range nodes {
		createPods(t, ctx, ns,
			appPod("hp-"+nd.Name, nd.Name, map[string]string{"role": "server"}, hostPorts(hp, "")...),
			appPod("client-"+nd.Name, nd.Name, map[string]string{"role": "client"}))
	}
	waitPodsReady(t, ctx, ns, "role=server", len(nodes))
	clients := waitPodsReady(t, ctx, ns, "role=client", len(nodes))
	clientOn := map[string]*corev1.Pod{}
	for i := range clients {
		clientOn[clients[i].Spec.NodeName] = &clients[i]
	}
	for _, dst := range nodes {
		server := "hp-" + dst.Name
		ps := hostPortProbes(dst, hp)
		t.Run("to "+dst.Name, func(t *testing.T) {
			for _, src := range nodes {
				if src.Name == dst.Name {
					continue
				}
				out, err := onNode(ctx, src.Name, probeScript(ps))
				if err != nil {
					t.Fatalf("%v", err)
				}
				got := answers(out)
				for _, pr := range ps {
					peer := src.IPv4
					if strings.Contains(pr.Addr, ":") {
						peer = src.IPv6
					}
					if w := hello(server, peer); !strings.HasPrefix(got[pr], w) {
						t.Errorf("from node %s %v: got %q, want %q...", src.Name, pr, got[pr], w)
					}
				}
				c := clientOn[src.Name]
				out, err = inPod(ctx, c, probeScript(ps))
				if err != nil {
					t.Fatalf("%v", err)
				}
				got = answers(out)
				for _, pr := range ps {
					fam := 4
					if strings.Contains(pr.Addr, ":") {
						fam = 6
					}
					if w := hello(server, podIP(t, c, fam)); !strings.HasPrefix(got[pr], w) {
						t.Errorf("from pod %s on %s %v: got %q, want %q...", c.Name, src.Name, pr, got[pr], w)
					}
				}
			}
			for _, pr := range ps {
				if got := fromHost(pr); !strings.HasPrefix(got, "hello from "+server+" to ") {
					t.Errorf("from this host %v: got %q, want hello from %s", pr, got, server)
				}
			}
		})
	}
}

// sandboxID: the id of the pod's ready sandbox on its node (crictl).
func sandboxID(t *testing.T, ctx context.Context, p *corev1.Pod) string {
	t.Helper()
	out, err := onNode(ctx, p.Spec.NodeName, fmt.Sprintf("crictl pods -q --name '^%s$' --namespace '%s' --state ready", p.Name, p.Namespace))
	id := strings.TrimSpace(out)
	if err != nil || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("sandbox of pod %s on %s: %q %v", p.Name, p.Spec.NodeName, out, err)
	}
	return id
}

// TestHostPortConflictRefusedWithEventNamingHolder: on one node, a pod asking
// for a host port another pod holds does not start, and its events name the
// holder's attachment (its sandbox); the holder keeps answering; on the other
// nodes the same host port is free and serves. The pods ask for 18090 on "::"
// (the holder: every IPv6 address of the node, to ovs-portmap) and on the
// node's own IPv6 address: distinct to the scheduler and kubelet, so the
// plugin is the one that finds the conflict.
func TestHostPortConflictRefusedWithEventNamingHolder(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	const hp = 18090
	first := nodes[0]
	createPods(t, ctx, ns, appPod("holder", first.Name, map[string]string{"role": "holder"}, hostPorts(hp, "::")...))
	holder := waitPodsReady(t, ctx, ns, "role=holder", 1)[0]
	holderSandbox := sandboxID(t, ctx, &holder)
	var others []*corev1.Pod
	for _, nd := range nodes[1:] {
		others = append(others, appPod("other-"+nd.Name, nd.Name, map[string]string{"role": "other"}, hostPorts(hp, "::")...))
	}
	createPods(t, ctx, ns, others...)
	createPods(t, ctx, ns, appPod("second", first.Name, nil, hostPorts(hp, first.IPv6)...))

	eventually(t, ctx, 2*time.Minute, "an event of pod second naming the holder's sandbox "+holderSandbox, func() error {
		evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=second"})
		if err != nil {
			return err
		}
		var msgs []string
		for _, e := range evs.Items {
			if e.Reason == "FailedCreatePodSandBox" && strings.Contains(e.Message, "host port conflict") && strings.Contains(e.Message, holderSandbox) {
				t.Logf("event: %s", e.Message)
				return nil
			}
			msgs = append(msgs, e.Reason+": "+e.Message)
		}
		return fmt.Errorf("events: %q", msgs)
	})
	p, err := kube.CoreV1().Pods(ns).Get(ctx, "second", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting pod second: %v", err)
	}
	if p.Status.Phase == corev1.PodRunning || podReady(p) {
		t.Errorf("pod second is %s (ready %v), want it not started", p.Status.Phase, podReady(p))
	}
	waitPodsReady(t, ctx, ns, "role=other", len(nodes)-1)
	for _, pr := range []probe{{"tcp", first.IPv6, hp}, {"udp", first.IPv6, hp}} {
		if got := fromHost(pr); !strings.HasPrefix(got, "hello from holder to ") {
			t.Errorf("holder's host port %v: got %q, want hello from holder", pr, got)
		}
	}
	for _, nd := range nodes[1:] {
		for _, pr := range []probe{{"tcp", nd.IPv6, hp}, {"udp", nd.IPv6, hp}} {
			if got := fromHost(pr); !strings.HasPrefix(got, "hello from other-"+nd.Name+" to ") {
				t.Errorf("node %s, unaffected: %v: got %q, want hello from other-%s", nd.Name, pr, got, nd.Name)
			}
		}
	}
}
