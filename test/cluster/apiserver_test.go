package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
)

// httpPort is where webPod serves HTTP (busybox httpd of the app image).
const httpPort = 8080

// webPod is a pod of the test app pinned to nodeName that also serves
// HTTP on httpPort: /cgi-bin/peer answers "hello from NAME to CLIENT",
// CLIENT being the address the request came from.
func webPod(name, nodeName string) *corev1.Pod {
	p := appPod(name, nodeName, map[string]string{"app": "web", "pod": name})
	script := fmt.Sprintf(`mkdir -p /tmp/www/cgi-bin
printf '#!/bin/sh\necho Content-Type: text/plain\necho\necho "hello from %s to $REMOTE_ADDR"\n' >/tmp/www/cgi-bin/peer
chmod +x /tmp/www/cgi-bin/peer
/bin/busybox httpd -p %d -h /tmp/www
exec /rt-echo -tcp 80 -udp 53`, name, httpPort)
	p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", script}
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: httpPort}}
	p.Spec.Containers[0].ReadinessProbe.ProbeHandler = corev1.ProbeHandler{
		TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(httpPort)}}
	return p
}

// peerOf parses webPod's answer: the pod's name and the client address it saw.
func peerOf(answer string) (name string, client netip.Addr, err error) {
	f := strings.Fields(answer)
	if len(f) != 5 || f[0] != "hello" || f[1] != "from" || f[3] != "to" {
		return "", client, fmt.Errorf("answer %q: want \"hello from NAME to CLIENT\"", answer)
	}
	// busybox httpd writes an IPv6 client in brackets, an IPv4 one on its
	// dual-stack socket as IPv4-mapped.
	client, err = netip.ParseAddr(strings.Trim(f[4], "[]"))
	return f[2], client.Unmap(), err
}

// viaAPIServer GETs from kube-apiserver's proxy (req) with a bounded wait,
// and checks that pod name answered a client of the family (4 or 6):
// kube-apiserver itself dialled the pod on that family. It logs the answer.
func viaAPIServer(t *testing.T, ctx context.Context, req rest.ResponseWrapper, name string, family int) error {
	// Longer than kube-apiserver's own dial timeout (30 s): a pod it cannot
	// reach fails with its "dial tcp ...: i/o timeout", not with ours.
	ctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	defer cancel()
	body, err := req.DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("%w: %s", err, body)
	}
	got, client, err := peerOf(strings.TrimSpace(string(body)))
	if err != nil {
		return err
	}
	if got != name || client.Is4() != (family == 4) {
		return fmt.Errorf("answered by %s to %s, want by %s to an IPv%d address", got, client, name, family)
	}
	t.Logf("%s answered kube-apiserver at %s", name, client)
	return nil
}

// TestAPIServerReachesPodOnEveryNode: kube-apiserver's proxy (what
// `kubectl get --raw .../pods/NAME:PORT/proxy/` and the conformance test
// "Proxy version v1 should proxy through a service and a pod" use; admission
// webhooks and aggregated APIs served by pods need the same path) reaches a
// pod on every node: through the pod (its first address, of the cluster's
// first family) and through an IPv6 Service of that pod alone (its
// endpoints, of the Service's family), so on both families. The
// control-plane host is no Node: its routes to the pods are the agent's
// routes mode's.
func TestAPIServerReachesPodOnEveryNode(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 1)
	ns := namespace(t, ctx)
	for _, nd := range nodes {
		createPods(t, ctx, ns, webPod("web-"+nd.Name, nd.Name))
		v6 := corev1.IPFamilyPolicySingleStack
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web-" + nd.Name + "-v6"},
			Spec: corev1.ServiceSpec{
				Selector:       map[string]string{"pod": "web-" + nd.Name},
				IPFamilyPolicy: &v6,
				IPFamilies:     []corev1.IPFamily{corev1.IPv6Protocol},
				Ports:          []corev1.ServicePort{{Name: "http", Port: httpPort, TargetPort: intstr.FromString("http")}},
			},
		}
		if _, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating service %s: %v", svc.Name, err)
		}
	}
	pods := waitPodsReady(t, ctx, ns, "app=web", len(nodes))
	for _, p := range pods {
		first := 4
		if strings.Contains(p.Status.PodIPs[0].IP, ":") {
			first = 6
		}
		eventually(t, ctx, 2*time.Minute, fmt.Sprintf("pods/%s:%d/proxy on %s (%s)", p.Name, httpPort, p.Spec.NodeName, p.Status.PodIPs[0].IP), func() error {
			return viaAPIServer(t, ctx, kube.CoreV1().Pods(ns).ProxyGet("http", p.Name, fmt.Sprint(httpPort), "/cgi-bin/peer", nil), p.Name, first)
		})
		eventually(t, ctx, 2*time.Minute, fmt.Sprintf("services/%s-v6:http/proxy on %s (%s)", p.Name, p.Spec.NodeName, podIP(t, &p, 6)), func() error {
			return viaAPIServer(t, ctx, kube.CoreV1().Services(ns).ProxyGet("http", p.Name+"-v6", "http", "/cgi-bin/peer", nil), p.Name, 6)
		})
	}
}
