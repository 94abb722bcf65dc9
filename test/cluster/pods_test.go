package cluster

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// spread is a Deployment of the app, replicas pods spread evenly over the nodes.
func spread(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	spec := appPodSpec("", 1)
	spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
	}}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// TestPodsReachEveryPodAcrossNodes: 3 pods on each node (a Deployment of 3×N
// spread over the N nodes); from every pod, every other pod answers over TCP
// and UDP, IPv4 and IPv6, and sees the caller's own pod address (no NAT on
// the pod network, across nodes or on one).
func TestPodsReachEveryPodAcrossNodes(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	n := int32(3 * len(nodes))
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, spread("mesh", n), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment mesh: %v", err)
	}
	pods := waitPodsReady(t, ctx, ns, "app=mesh", int(n))
	per := map[string]int{}
	for _, p := range pods {
		per[p.Spec.NodeName]++
	}
	for _, nd := range nodes {
		if per[nd.Name] != 3 {
			t.Fatalf("pods per node %v, want 3 on each of %d nodes", per, len(nodes))
		}
	}
	// Round 1 counts the exchanges lost to first contact (a figure, printed);
	// then the failed ones are tried again until each has been answered,
	// within 20 s.
	first := meshRound(t, pods, nil)
	left, rounds := first, 1
	eventually(t, ctx, 20*time.Second, "every pod answering every pod", func() error {
		if len(left) == 0 {
			return nil
		}
		rounds++
		if left = meshRound(t, pods, left); len(left) != 0 {
			return fmt.Errorf("%d exchange(s) still failing, the first: %s", len(left), left[0])
		}
		return nil
	})
	t.Logf("%d pods on %d nodes, %d exchanges each: %d failed in the first round, all answered after %d round(s)",
		len(pods), len(nodes), 4*(len(pods)-1), len(first), rounds)
}

// meshRound probes from every pod every other pod (TCP, UDP; IPv4, IPv6); only
// the exchanges in only (all with nil). It returns the failed ones.
func meshRound(t *testing.T, pods []corev1.Pod, only []string) []string {
	ctx := testContext(t)
	retry := map[string]bool{}
	for _, f := range only {
		retry[f[:strings.Index(f, ": got")]] = true
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed []string
	for i := range pods {
		src := &pods[i]
		var ps []probe
		want := map[probe]string{}
		key := func(pr probe) string { return fmt.Sprintf("from %s (%s) %v", src.Name, src.Spec.NodeName, pr) }
		for j := range pods {
			if i == j {
				continue
			}
			dst := &pods[j]
			for _, fam := range []int{4, 6} {
				for _, pr := range []probe{{"tcp", podIP(t, dst, fam), 80}, {"udp", podIP(t, dst, fam), 53}} {
					if only != nil && !retry[key(pr)] {
						continue
					}
					ps = append(ps, pr)
					want[pr] = hello(dst.Name, podIP(t, src, fam))
				}
			}
		}
		if len(ps) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := inPod(ctx, src, probeScript(ps))
			got := answers(out)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: got %v", key(ps[0]), err))
				return
			}
			for _, pr := range ps {
				if !strings.HasPrefix(got[pr], want[pr]) {
					failed = append(failed, fmt.Sprintf("%s: got %q, want %q...", key(pr), got[pr], want[pr]))
				}
			}
		}()
	}
	wg.Wait()
	return failed
}

// service makes a dual-stack Service of the app's pods labelled app=name: TCP 80, UDP 53.
func service(t *testing.T, ns, name string, typ corev1.ServiceType) *corev1.Service {
	t.Helper()
	pol := corev1.IPFamilyPolicyRequireDualStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:           typ,
			Selector:       map[string]string{"app": name},
			IPFamilyPolicy: &pol,
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{
				{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)},
				{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
			},
		},
	}
	got, err := kube.CoreV1().Services(ns).Create(testContext(t), svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service %s: %v", name, err)
	}
	return got
}

// fromEveryNode runs probes from one pod on each node (the Deployment's), until
// every answer names one of the backends (kube-proxy programs its rules
// shortly after the endpoints are ready).
func fromEveryNode(t *testing.T, pods []corev1.Pod, ps func(src *corev1.Pod) []probe) {
	t.Helper()
	ctx := testContext(t)
	seen := map[string]bool{}
	for i := range pods {
		src := &pods[i]
		if seen[src.Spec.NodeName] {
			continue
		}
		seen[src.Spec.NodeName] = true
		list := ps(src)
		tries, firstBad := 0, ""
		eventually(t, ctx, time.Minute, fmt.Sprintf("from %s on %s", src.Name, src.Spec.NodeName), func() error {
			tries++
			out, err := inPod(ctx, src, probeScript(list))
			if err != nil {
				return err
			}
			got := answers(out)
			var bad []string
			for _, pr := range list {
				if !strings.HasPrefix(got[pr], "hello from "+pods[0].Labels["app"]+"-") {
					bad = append(bad, fmt.Sprintf("%v: got %q", pr, got[pr]))
				}
			}
			if bad != nil {
				if firstBad == "" {
					firstBad = strings.Join(bad, "; ")
				}
				return fmt.Errorf("%s\n%s", strings.Join(bad, "; "), out)
			}
			return nil
		})
		if tries > 1 {
			t.Logf("from %s on %s: every answer after %d rounds; the first round's failures: %s", src.Name, src.Spec.NodeName, tries, firstBad)
		}
	}
}

// TestClusterIPServiceFromPodsOnEveryNode: a dual-stack ClusterIP Service in
// front of pods spread over the nodes answers, over TCP and UDP on both of
// its addresses, a pod on every node (kube-proxy's DNAT on the node, then the
// pod network to whichever backend, on that node or another).
func TestClusterIPServiceFromPodsOnEveryNode(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, spread("cip", int32(len(nodes))), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment: %v", err)
	}
	svc := service(t, ns, "cip", corev1.ServiceTypeClusterIP)
	pods := waitPodsReady(t, ctx, ns, "app=cip", len(nodes))
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("Service ClusterIPs %v, want one of each family", svc.Spec.ClusterIPs)
	}
	fromEveryNode(t, pods, func(*corev1.Pod) []probe {
		var ps []probe
		for _, ip := range svc.Spec.ClusterIPs {
			ps = append(ps, probe{"tcp", ip, 80}, probe{"udp", ip, 53})
		}
		return ps
	})
}

// TestClusterIPServiceBackendOnClientNode: a dual-stack ClusterIP Service
// whose every backend is another pod on the client's node answers it, TCP
// and UDP on both addresses, from the Service's address (the backend's
// answers go back through the node, which un-DNATs them: pkg/flows,
// gateway.go). TestClusterIPServiceFromPodsOnEveryNode reaches a local
// backend only by chance, and then often the client itself, which
// kube-proxy masquerades.
func TestClusterIPServiceBackendOnClientNode(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 1)[0]
	ns := namespace(t, ctx)
	pinned := func(name string, replicas int32) *appsv1.Deployment {
		labels := map[string]string{"app": name}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: appPodSpec(nd.Name, 1)},
			},
		}
	}
	for _, d := range []*appsv1.Deployment{pinned("cipb", 2), pinned("cipc", 1)} {
		if _, err := kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Deployment %s: %v", d.Name, err)
		}
	}
	svc := service(t, ns, "cipb", corev1.ServiceTypeClusterIP)
	waitPodsReady(t, ctx, ns, "app=cipb", 2)
	client := &waitPodsReady(t, ctx, ns, "app=cipc", 1)[0]
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("Service ClusterIPs %v, want one of each family", svc.Spec.ClusterIPs)
	}
	var list []probe
	for _, ip := range svc.Spec.ClusterIPs {
		list = append(list, probe{"tcp", ip, 80}, probe{"udp", ip, 53})
	}
	// Several rounds: kube-proxy chooses a backend per connection, and
	// every one of them is on the client's node.
	for round := range 3 {
		eventually(t, ctx, time.Minute, fmt.Sprintf("round %d from %s on %s", round, client.Name, nd.Name), func() error {
			out, err := inPod(ctx, client, probeScript(list))
			if err != nil {
				return err
			}
			got := answers(out)
			var bad []string
			for _, pr := range list {
				if !strings.HasPrefix(got[pr], "hello from cipb-") {
					bad = append(bad, fmt.Sprintf("%v: got %q", pr, got[pr]))
				}
			}
			if bad != nil {
				return fmt.Errorf("%s", strings.Join(bad, "; "))
			}
			return nil
		})
	}
}

// TestNodePortServiceFromPodsOnEveryNode: a NodePort Service answers a pod on
// every node on every node's addresses (IPv4 and IPv6), TCP and UDP.
func TestNodePortServiceFromPodsOnEveryNode(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, spread("np", int32(len(nodes))), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment: %v", err)
	}
	svc := service(t, ns, "np", corev1.ServiceTypeNodePort)
	pods := waitPodsReady(t, ctx, ns, "app=np", len(nodes))
	var tcpPort, udpPort int
	for _, p := range svc.Spec.Ports {
		if p.Protocol == corev1.ProtocolTCP {
			tcpPort = int(p.NodePort)
		} else {
			udpPort = int(p.NodePort)
		}
	}
	fromEveryNode(t, pods, func(*corev1.Pod) []probe {
		var ps []probe
		for _, nd := range nodes {
			for _, ip := range []string{nd.IPv4, nd.IPv6} {
				ps = append(ps, probe{"tcp", ip, tcpPort}, probe{"udp", ip, udpPort})
			}
		}
		return ps
	})
}
