package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The cluster DNS of deploy/coredns.yaml, as kubeadm names it.
const (
	dnsNamespace = "kube-system"
	dnsService   = "kube-dns"
)

// singleStack makes a Service of one family in front of the app's pods labelled app=selector: TCP 80.
func singleStack(t *testing.T, ctx context.Context, ns, name, selector string, family corev1.IPFamily) *corev1.Service {
	t.Helper()
	pol := corev1.IPFamilyPolicySingleStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector:       map[string]string{"app": selector},
			IPFamilyPolicy: &pol,
			IPFamilies:     []corev1.IPFamily{family},
			Ports:          []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}},
		},
	}
	got, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating Service %s: %v", name, err)
	}
	return got
}

// lookup asks server ("": the pod's nameserver, from its /etc/resolv.conf)
// for name (busybox nslookup: A and AAAA) and returns the addresses of the
// answers, sorted.
func lookup(ctx context.Context, p *corev1.Pod, name, server string) ([]string, error) {
	out, err := inContainer(ctx, p, strings.TrimSpace("busybox timeout 10 busybox nslookup "+name+" "+server))
	// The answers' lines: "Name: NAME" then "Address: ADDR" (the server's own
	// "Address: ADDR:53" follows "Server:").
	var addrs []string
	answer := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "Name:":
			answer = true
		case len(f) == 2 && f[0] == "Address:" && answer:
			addrs = append(addrs, f[1])
		}
	}
	if len(addrs) == 0 {
		if err == nil {
			err = fmt.Errorf("no answer")
		}
		return nil, fmt.Errorf("nslookup %s: %w: %s", name, err, out)
	}
	slices.Sort(addrs)
	return slices.Compact(addrs), nil
}

// TestClusterDNSFromPodsOnEveryNode: a pod of dnsPolicy ClusterFirst on every
// node has the kube-dns Service's addresses as its nameservers (kubelet's
// clusterDNS) and its namespace first in its search path; through them it
// resolves kubernetes.default.svc.cluster.local to the API server's Service
// (asking each of the kube-dns Service's addresses too) and a dual-stack Service of its own namespace to both of its ClusterIPs
// (A and AAAA), and it connects by name (through the search path) to that
// Service and to an IPv4-only and an IPv6-only one, each answering over its
// own family.
func TestClusterDNSFromPodsOnEveryNode(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	dns, err := kube.CoreV1().Services(dnsNamespace).Get(ctx, dnsService, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the cluster DNS Service %s/%s: %v", dnsNamespace, dnsService, err)
	}
	api, err := kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the API server's Service default/kubernetes: %v", err)
	}
	ns := namespace(t, ctx)
	d := spread("web", int32(len(nodes)))
	d.Spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment web: %v", err)
	}
	web := service(t, ns, "web", corev1.ServiceTypeClusterIP)
	web4 := singleStack(t, ctx, ns, "web4", "web", corev1.IPv4Protocol)
	web6 := singleStack(t, ctx, ns, "web6", "web", corev1.IPv6Protocol)
	pods := waitPodsReady(t, ctx, ns, "app=web", len(nodes))

	resolves := map[string][]string{ // name -> its addresses
		"kubernetes.default.svc.cluster.local": api.Spec.ClusterIPs,
		"web." + ns + ".svc.cluster.local":     web.Spec.ClusterIPs,
		"web4." + ns + ".svc.cluster.local":    web4.Spec.ClusterIPs,
		"web6." + ns + ".svc.cluster.local":    web6.Spec.ClusterIPs,
	}
	connects := []struct {
		name   string
		family int // 4 or 6: the family the answer must have come over; 0: either
	}{
		{"web", 0},
		{"web4." + ns, 4},
		{"web6." + ns + ".svc", 6},
	}
	for i := range pods {
		p := &pods[i]
		out, err := inContainer(ctx, p, "cat /etc/resolv.conf")
		if err != nil {
			t.Fatal(err)
		}
		var servers, search []string
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && f[0] == "nameserver" {
				servers = append(servers, f[1])
			}
			if len(f) > 1 && f[0] == "search" {
				search = f[1:]
			}
		}
		if want := dns.Spec.ClusterIPs; !sameSet(servers, want) {
			t.Errorf("pod %s on %s: nameservers %v, want the %s Service's %v\n%s", p.Name, p.Spec.NodeName, servers, dnsService, want, out)
		}
		if len(search) == 0 || search[0] != ns+".svc.cluster.local" {
			t.Errorf("pod %s on %s: search %v, want %s.svc.cluster.local first", p.Name, p.Spec.NodeName, search, ns)
		}
		tries := 0
		eventually(t, ctx, time.Minute, fmt.Sprintf("names from pod %s on %s", p.Name, p.Spec.NodeName), func() error {
			tries++
			for _, server := range dns.Spec.ClusterIPs {
				got, err := lookup(ctx, p, "kubernetes.default.svc.cluster.local", server)
				if err != nil {
					return err
				}
				if !sameSet(got, api.Spec.ClusterIPs) {
					return fmt.Errorf("kubernetes.default.svc.cluster.local from %s resolved to %v, want %v", server, got, api.Spec.ClusterIPs)
				}
			}
			for name, want := range resolves {
				got, err := lookup(ctx, p, name, "")
				if err != nil {
					return err
				}
				if !sameSet(got, want) {
					return fmt.Errorf("%s resolved to %v, want %v", name, got, want)
				}
			}
			for _, c := range connects {
				out, err := inContainer(ctx, p, "busybox timeout 5 nc "+c.name+" 80 </dev/null")
				if err != nil {
					return fmt.Errorf("connecting to %s:80: %w", c.name, err)
				}
				ans := strings.TrimSpace(out)
				if !strings.HasPrefix(ans, "hello from web-") {
					return fmt.Errorf("%s:80 answered %q, want the app of Deployment web", c.name, ans)
				}
				if v6 := strings.Contains(ans, " to ["); (c.family == 6 && !v6) || (c.family == 4 && v6) {
					return fmt.Errorf("%s:80 answered %q, want it over IPv%d", c.name, ans, c.family)
				}
			}
			return nil
		})
		if tries > 1 {
			t.Logf("pod %s on %s: every name resolved and answered after %d rounds", p.Name, p.Spec.NodeName, tries)
		}
	}
}

// sameSet: a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
