package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// agentGet: an HTTP GET of the node agent's endpoint on the node's loopback
// (127.0.0.1:9469, where only the node reaches it), from the node itself
// (bash's /dev/tcp: the node has no HTTP client). Returns the status code and the body.
func agentGet(ctx context.Context, nodeName, path string) (int, string, error) {
	return agentGetAt(ctx, nodeName, 9469, path)
}

// agentGetAt: agentGet of an agent listening on another port of the node's loopback.
func agentGetAt(ctx context.Context, nodeName string, port int, path string) (int, string, error) {
	out, err := onNode(ctx, nodeName, fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%d && printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 && timeout 5 cat <&3`, port, path))
	if err != nil {
		return 0, out, err
	}
	head, body, _ := strings.Cut(out, "\r\n\r\n")
	f := strings.Fields(head)
	if len(f) < 2 {
		return 0, out, fmt.Errorf("GET %s on %s: no HTTP answer: %q", path, nodeName, out)
	}
	code, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, out, fmt.Errorf("GET %s on %s: status %q: %w", path, nodeName, f[1], err)
	}
	return code, body, nil
}

// agentPods: the DaemonSet's pods, by node.
func agentPods(ctx context.Context) (map[string]corev1.Pod, error) {
	list, err := kube.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + dsName})
	if err != nil {
		return nil, err
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out[p.Spec.NodeName] = p
		}
	}
	return out, nil
}

// agentReady: whether the agent container of a DaemonSet pod is ready (its /readyz probe).
func agentReady(p *corev1.Pod) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == dsContainer {
			return c.Ready
		}
	}
	return false
}

// conflistSubnets: the IPAM subnets of a node's conflist, sorted.
func conflistSubnets(ctx context.Context, nodeName string) ([]string, error) {
	return conflistSubnetsAt(ctx, nodeName, "/etc/cni/net.d/10-ovsflow.conflist")
}

// conflistSubnetsAt: conflistSubnets of the conflist at path on the node.
func conflistSubnetsAt(ctx context.Context, nodeName, path string) ([]string, error) {
	out, err := onNode(ctx, nodeName, "cat "+path)
	if err != nil {
		return nil, err
	}
	var c struct {
		Plugins []struct {
			IPAM struct {
				Ranges [][]struct{ Subnet string } `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		return nil, fmt.Errorf("the conflist of %s: %w: %s", nodeName, err, out)
	}
	var got []string
	for _, p := range c.Plugins {
		for _, set := range p.IPAM.Ranges {
			for _, r := range set {
				got = append(got, r.Subnet)
			}
		}
	}
	slices.Sort(got)
	return got, nil
}

// TestDaemonSetReadyOnEveryNode: deploy/ovsflow-cni.yaml is rolled out: on
// every node one pod of the DaemonSet, Ready, its agent container ready (its
// /readyz probe); every Node Ready with an IPv4 and an IPv6 pod CIDR; the
// node's conflist carries exactly its own Node's spec.podCIDRs; the agent
// answers /healthz and /readyz on the node's loopback.
func TestDaemonSetReadyOnEveryNode(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	waitRolledOut(t, ctx)
	pods, err := agentPods(ctx)
	if err != nil {
		t.Fatalf("the DaemonSet's pods: %v", err)
	}
	for _, nd := range nodes {
		t.Run(nd.Name, func(t *testing.T) {
			p, ok := pods[nd.Name]
			if !ok {
				t.Fatalf("no pod of the DaemonSet on %s", nd.Name)
			}
			if !podReady(&p) || !agentReady(&p) {
				t.Errorf("pod %s: Ready %v, agent container ready %v, want both", p.Name, podReady(&p), agentReady(&p))
			}
			var v4, v6 int
			for _, c := range nd.PodCIDRs {
				if strings.Contains(c, ":") {
					v6++
				} else {
					v4++
				}
			}
			if v4 != 1 || v6 != 1 {
				t.Errorf("Node %s spec.podCIDRs %v, want one IPv4 and one IPv6", nd.Name, nd.PodCIDRs)
			}
			want := slices.Sorted(slices.Values(nd.PodCIDRs))
			got, err := conflistSubnets(ctx, nd.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("the conflist's subnets %v, want the Node's spec.podCIDRs %v", got, want)
			}
			for _, path := range []string{"/healthz", "/readyz"} {
				code, body, err := agentGet(ctx, nd.Name, path)
				if err != nil || code != 200 {
					t.Errorf("GET %s: %d %q (%v), want 200", path, code, body, err)
				}
			}
		})
	}
}

// TestAgentMetricsNameHostPorts: the agent's /metrics (Prometheus text) on
// the node of a pod publishing a host port says it is up and names the
// pod's host ports and attachment, reconcile passes and conntrack zone limits.
func TestAgentMetricsNameHostPorts(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	ns := namespace(t, ctx)
	const hp = 18170
	createPods(t, ctx, ns, appPod("metered", nd.Name, map[string]string{"role": "metered"}, hostPorts(hp, "")...))
	waitPodsReady(t, ctx, ns, "role=metered", 1)
	eventually(t, ctx, time.Minute, "/metrics on "+nd.Name+" naming pod metered's host ports", func() error {
		code, m, err := agentGet(ctx, nd.Name, "/metrics")
		if err != nil || code != 200 {
			return fmt.Errorf("GET /metrics: %d (%v)", code, err)
		}
		var ports []string
		for _, l := range strings.Split(m, "\n") {
			if strings.HasPrefix(l, "ovsflow_host_ports{") && strings.Contains(l, `pod="metered"`) && strings.Contains(l, `namespace="`+ns+`"`) {
				ports = append(ports, l)
			}
		}
		if ports == nil {
			return fmt.Errorf("no ovsflow_host_ports line of pod %s/metered:\n%s", ns, grepLines(m, "ovsflow_host_ports"))
		}
		for _, w := range []string{"ovsflow_up 1", "ovsflow_reconcile_total{", "ovsflow_conntrack_zone_limit{"} {
			if !strings.Contains(m, w) {
				return fmt.Errorf("/metrics has no %s", w)
			}
		}
		t.Logf("%s", strings.Join(ports, "\n"))
		return nil
	})
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
