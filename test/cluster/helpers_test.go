package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// node is a Node of the cluster as the tests use it.
type node struct {
	Name     string
	IPv4     string   // InternalIP
	IPv6     string   // InternalIP
	PodCIDRs []string // spec.podCIDRs
}

// readyNodes lists the cluster's nodes, sorted by name, and fails unless there are at least min, each Ready.
func readyNodes(t *testing.T, ctx context.Context, min int) []node {
	t.Helper()
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing nodes: %v", err)
	}
	var out []node
	for _, n := range list.Items {
		if !nodeReady(&n) {
			t.Fatalf("node %s is not Ready", n.Name)
		}
		nd := node{Name: n.Name, PodCIDRs: n.Spec.PodCIDRs}
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if strings.Contains(a.Address, ":") {
				nd.IPv6 = a.Address
			} else {
				nd.IPv4 = a.Address
			}
		}
		if nd.IPv4 == "" || nd.IPv6 == "" {
			t.Fatalf("node %s: InternalIPs %v, want one of each family", n.Name, n.Status.Addresses)
		}
		out = append(out, nd)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(out) < min {
		t.Fatalf("got %d nodes, want at least %d", len(out), min)
	}
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// namespace makes a namespace for one test, removed (with everything in it) at its end.
func namespace(t *testing.T, ctx context.Context) string {
	t.Helper()
	name := "t-" + strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
	if len(name) > 50 {
		name = name[:50]
	}
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	// The default ServiceAccount comes from the controller manager shortly after.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s: no default ServiceAccount: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if t.Failed() {
			dumpNamespace(t, ctx, name)
			if os.Getenv("OVSFLOW_CLUSTER_KEEP") != "" {
				t.Logf("OVSFLOW_CLUSTER_KEEP: namespace %s left in place", name)
				return
			}
		}
		zero := int64(0)
		_ = kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
	return name
}

// dumpNamespace logs the pods and events of a namespace (on failure).
func dumpNamespace(t *testing.T, ctx context.Context, ns string) {
	pods, _ := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	for _, p := range pods.Items {
		t.Logf("pod %s on %s: %s %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIPs)
	}
	evs, _ := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	for _, e := range evs.Items {
		t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
	}
}

// appPod is a pod of the test app; nodeName pins it to a node ("" lets the scheduler choose).
func appPod(name, nodeName string, labels map[string]string, ports ...corev1.ContainerPort) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       appPodSpec(nodeName, grace, ports...),
	}
}

func appPodSpec(nodeName string, grace int64, ports ...corev1.ContainerPort) corev1.PodSpec {
	return corev1.PodSpec{
		NodeName:                      nodeName,
		DNSPolicy:                     corev1.DNSDefault,
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{
			Name:            "app",
			Image:           appImage,
			ImagePullPolicy: corev1.PullNever,
			Ports:           ports,
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}},
				PeriodSeconds: 1,
			},
		}},
	}
}

// hostPorts: TCP 80 and UDP 53 of the app published on the node's port hp.
func hostPorts(hp int32, hostIP string) []corev1.ContainerPort {
	return []corev1.ContainerPort{
		{ContainerPort: 80, HostPort: hp, HostIP: hostIP, Protocol: corev1.ProtocolTCP},
		{ContainerPort: 53, HostPort: hp, HostIP: hostIP, Protocol: corev1.ProtocolUDP},
	}
}

// waitPodsReady waits until the pods matching selector in ns are count, each Ready, and returns them.
func waitPodsReady(t *testing.T, ctx context.Context, ns, selector string, count int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && podReady(&p) {
				pods = append(pods, p)
			}
		}
		return len(pods) == count && len(list.Items) == count, nil
	})
	if err != nil {
		t.Fatalf("namespace %s, pods %q: %d Ready, want %d: %v", ns, selector, len(pods), count, err)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podIP returns the pod's address of the family (6 or 4).
func podIP(t *testing.T, p *corev1.Pod, family int) string {
	t.Helper()
	for _, ip := range p.Status.PodIPs {
		if strings.Contains(ip.IP, ":") == (family == 6) {
			return ip.IP
		}
	}
	t.Fatalf("pod %s: addresses %v, none of IPv%d", p.Name, p.Status.PodIPs, family)
	return ""
}

// ---- reaching things --------------------------------------------------------

// probe is one exchange with the test app: TCP (connect, read a line) or UDP
// (send a datagram, read the answer), to Addr:Port.
type probe struct {
	Proto string // "tcp" or "udp"
	Addr  string
	Port  int
}

func (p probe) String() string { return p.Proto + " " + net.JoinHostPort(p.Addr, fmt.Sprint(p.Port)) }

// script: a bash line that prints "PROTO ADDR PORT => ANSWER" (ANSWER empty when none came).
func (p probe) script() string {
	send := ""
	if p.Proto == "udp" {
		send = " && echo ping >&3"
	}
	return fmt.Sprintf(`(a=$(timeout 3 bash -c 'exec 3<>/dev/%s/%s/%d%s && head -1 <&3' 2>/dev/null); echo "%s %s %d => $a") &`,
		p.Proto, p.Addr, p.Port, send, p.Proto, p.Addr, p.Port)
}

// probeScript runs every probe at once and prints one line per probe.
func probeScript(ps []probe) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.script())
		b.WriteString("\n")
	}
	b.WriteString("wait\n")
	return b.String()
}

// answers parses probeScript's output: probe -> answer.
func answers(out string) map[probe]string {
	m := map[probe]string{}
	for _, line := range strings.Split(out, "\n") {
		head, ans, ok := strings.Cut(line, " => ")
		if !ok {
			continue
		}
		var p probe
		if _, err := fmt.Sscanf(head, "%s %s %d", &p.Proto, &p.Addr, &p.Port); err != nil {
			continue
		}
		m[p] = strings.TrimSpace(ans)
	}
	return m
}

// onNode runs a bash script in a node (its own network namespace):
// hack/ovs-in-docker.sh exec; args are the script's $1, $2, ...
func onNode(ctx context.Context, nodeName, script string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, harness, append([]string{"exec", nodeName, "bash", "-c", script, "bash"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("on node %s: %w: %s", nodeName, err, out)
	}
	return string(out), nil
}

// uplinkPrefixes: the prefixes of nd's InternalIPs on its bridge
// interface (br0: the node's uplink), each invalid where br0 has none.
func uplinkPrefixes(ctx context.Context, nd node) (p4, p6 netip.Prefix, out string, err error) {
	out, err = onNode(ctx, nd.Name, "ip -o addr show dev br0")
	for _, f := range strings.Fields(out) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			continue
		}
		switch p.Addr().String() {
		case nd.IPv4:
			p4 = p
		case nd.IPv6:
			p6 = p
		}
	}
	return p4, p6, out, err
}

// inPod runs a bash script in the network namespace of a pod (entered on its
// node, with the node's tools: the app image has neither bash nor a UDP client).
func inPod(ctx context.Context, p *corev1.Pod, script string) (string, error) {
	return inSandbox(ctx, p, `netns=$(crictl inspectp -o go-template --template '{{range .info.runtimeSpec.linux.namespaces}}{{if eq .type "network"}}{{.path}}{{end}}{{end}}' "$pod")
exec nsenter --net="$netns" bash -c "$0"`, script)
}

// inContainer runs a sh script in the app container of a pod (crictl exec on
// its node): the image's busybox, with the pod's own /etc/resolv.conf and
// /etc/hosts, as the pod's processes resolve names.
func inContainer(ctx context.Context, p *corev1.Pod, script string) (string, error) {
	return inSandbox(ctx, p, fmt.Sprintf(`id=$(crictl ps -q --pod "$pod" --name '^app$' --state running | head -1)
[ -n "$id" ] || { echo "no running app container in pod %s/%s"; exit 1; }
exec crictl exec "$id" /bin/sh -c "$0"`, p.Namespace, p.Name), script)
}

// inNetns runs fn on a thread of its own in the network namespace at path
// (/proc/PID/ns/net, or a netns file seen through /proc/PID/root), which
// is never given back: it ends with fn's goroutine, the thread locked.
func inNetns(path string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("entering the netns %s: %w", path, err)
			return
		}
		done <- fn()
	}()
	return <-done
}

// podNetns is the path, from this host, of pod p's network namespace:
// its sandbox's netns file (crictl) under its node's /proc/PID/root.
func podNetns(t *testing.T, ctx context.Context, p *corev1.Pod) string {
	t.Helper()
	// (readlink: /var/run is a symlink to /run there, which the host would
	// resolve in its own root)
	out, err := inSandbox(ctx, p, `readlink -f "$(crictl inspectp -o go-template --template '{{range .info.runtimeSpec.linux.namespaces}}{{if eq .type "network"}}{{.path}}{{end}}{{end}}' "$pod")"`, "")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "/") {
		t.Fatalf("pod %s/%s's netns: %q, %v", p.Namespace, p.Name, out, err)
	}
	pid, err := exec.CommandContext(ctx, harness, "pid", p.Spec.NodeName).Output()
	if err != nil {
		t.Fatalf("node %s's process: %v", p.Spec.NodeName, err)
	}
	return "/proc/" + strings.TrimSpace(string(pid)) + "/root" + strings.TrimSpace(out)
}

// inSandbox runs, on p's node, enter with $pod set to p's ready sandbox and
// script as its $0.
func inSandbox(ctx context.Context, p *corev1.Pod, enter, script string) (string, error) {
	find := fmt.Sprintf(`pod=$(crictl pods -q --name '^%s$' --namespace '%s' --state ready | head -1)
[ -n "$pod" ] || { echo "no ready sandbox of pod %s/%s"; exit 1; }
`, p.Name, p.Namespace, p.Namespace, p.Name) + enter
	cmd := exec.CommandContext(ctx, harness, "exec", p.Spec.NodeName, "bash", "-c", find, script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in pod %s/%s on %s: %w: %s", p.Namespace, p.Name, p.Spec.NodeName, err, out)
	}
	return string(out), nil
}

// fromHost runs the probe from this host (the test's own process).
func fromHost(p probe) string {
	c, err := net.DialTimeout(p.Proto, net.JoinHostPort(p.Addr, fmt.Sprint(p.Port)), 3*time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if p.Proto == "udp" {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return ""
		}
	}
	buf := make([]byte, 256)
	n, _ := c.Read(buf)
	return strings.TrimSpace(string(buf[:n]))
}

// hello: the answer of the app in pod name to a client at peer.
func hello(name, peer string) string {
	if strings.Contains(peer, ":") {
		peer = "[" + peer + "]"
	}
	return "hello from " + name + " to " + peer + ":"
}

// eventually retries f until it returns nil or the context's deadline (a
// loaded machine is slow; nothing here asserts a time), and fails with f's last error.
// A wait of 5 s or more is logged with its length: where a test spends its time.
func eventually(t *testing.T, ctx context.Context, limit time.Duration, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for began := time.Now(); ; {
		if last = f(); last == nil {
			if d := time.Since(began); d >= 5*time.Second {
				t.Logf("waited %.1f s: %s", d.Seconds(), what)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
