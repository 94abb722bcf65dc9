// Command overlaybench is the overlay's benchmark of `hack/ovs-in-docker.sh
// bench -overlay`: on a cluster of the harness with nodes on two subnets
// (up -kube -nodes 3 -subnets 2), a pod on one node sends to a pod on a
// node of its own subnet (host-gw) and to a pod on a node of the other
// subnet (the agent's tunnel): TCP throughput (a transfer counted by the
// receiving pod) and round-trip time (ICMP echo), IPv4 and IPv6, and the
// tunnel's figures as ratios of host-gw's on the same harness (the
// userspace datapath's absolute figures mean nothing elsewhere). A
// benchmark: it prints figures and asserts none.
//
// Then the node agent's CPU and RSS with the cluster's Nodes and with
// simulated Nodes up to -peers (peers.go).
//
//	overlaybench -kubeconfig F -harness hack/ovs-in-docker.sh [-mb 200] [-reps 3] [-pings 200] [-peers 50] [-window 60s] [-parts paths,peers] [-out FILE]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type bench struct {
	kube    kubernetes.Interface
	harness string
	ns      string
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the admin kubeconfig")
	harness := flag.String("harness", "hack/ovs-in-docker.sh", "the harness (its exec runs a command in a node)")
	mb := flag.Int("mb", 200, "MB per TCP transfer")
	reps := flag.Int("reps", 3, "transfers per path and family (the median is kept)")
	pings := flag.Int("pings", 200, "echo requests per path and family")
	peers := flag.Int("peers", 50, "Nodes in all, simulated ones added to the cluster's, for the agent's figures")
	window := flag.Duration("window", time.Minute, "how long each state is held for the agent's CPU figure")
	parts := flag.String("parts", "paths,peers", "what to measure: paths (host-gw against the tunnel), peers (the agent with many Nodes)")
	out := flag.String("out", "", "also write the report to this file")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	b := &bench{kube: kubernetes.NewForConfigOrDie(cfg), harness: *harness, ns: "overlay-bench"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fail(err)
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	client, near, far, err := b.nodes(ctx)
	if err != nil {
		fail(err)
	}
	for _, part := range strings.Split(*parts, ",") {
		switch part {
		case "paths":
			err = b.run(ctx, w, client, near, far, *mb, *reps, *pings)
		case "peers":
			err = b.peers(ctx, w, client, *peers, *window)
		default:
			err = fmt.Errorf("-parts: unknown part %q", part)
		}
		if err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "overlaybench:", err)
	os.Exit(1)
}

// run places the pods, measures both paths and both families, and prints the report.
func (b *bench) run(ctx context.Context, w io.Writer, client, near, far string, mb, reps, pings int) error {
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	defer b.kube.CoreV1().Namespaces().Delete(context.Background(), b.ns, metav1.DeleteOptions{})
	pods := map[string]*corev1.Pod{}
	var err error
	for role, node := range map[string]string{"client": client, "near": near, "far": far} {
		if pods[role], err = b.pod(ctx, role, node); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "# The overlay across two subnets\n\n- command: hack/ovs-in-docker.sh bench -overlay (a %d MB TCP transfer ×%d, median; %d echo requests)\n", mb, reps, pings)
	fmt.Fprintf(w, "- client pod on %s; host-gw: a pod on %s (its subnet); tunnel: a pod on %s (the other subnet)\n\n", client, near, far)
	fmt.Fprintf(w, "| family | host-gw MB/s | tunnel MB/s | tunnel/host-gw | host-gw RTT ms | tunnel RTT ms | tunnel/host-gw |\n|---|---|---|---|---|---|---|\n")
	for _, fam := range []int{4, 6} {
		var tput, rtt [2]float64
		for i, dst := range []*corev1.Pod{pods["near"], pods["far"]} {
			addr := podIP(dst, fam)
			var rates []float64
			for r := 0; r < reps; r++ {
				v, err := b.transfer(ctx, pods["client"], dst, addr, fam, mb)
				if err != nil {
					return err
				}
				rates = append(rates, v)
			}
			slices.Sort(rates)
			tput[i] = rates[len(rates)/2]
			if rtt[i], err = b.rtt(ctx, pods["client"], addr, pings); err != nil {
				return err
			}
		}
		fmt.Fprintf(w, "| IPv%d | %.1f | %.1f | %.2f | %.3f | %.3f | %.2f |\n", fam, tput[0], tput[1], tput[1]/tput[0], rtt[0], rtt[1], rtt[1]/rtt[0])
	}
	fmt.Fprintln(w)
	return nil
}

// nodes picks a client node, a node of its subnet and one of the other
// subnet (the subnet: the prefix of the node's InternalIP on br0).
func (b *bench) nodes(ctx context.Context) (client, near, far string, err error) {
	list, err := b.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", "", err
	}
	by := map[netip.Prefix][]string{}
	for _, n := range list.Items {
		out, err := b.exec(ctx, n.Name, "ip -o -4 addr show dev br0")
		if err != nil {
			return "", "", "", err
		}
		for _, a := range n.Status.Addresses {
			for _, f := range strings.Fields(out) {
				if p, err := netip.ParsePrefix(f); err == nil && a.Type == corev1.NodeInternalIP && p.Addr().String() == a.Address {
					by[p.Masked()] = append(by[p.Masked()], n.Name)
				}
			}
		}
	}
	var two, one []string
	for _, ns := range by {
		slices.Sort(ns)
		if len(ns) >= 2 {
			two = ns
		} else {
			one = ns
		}
	}
	if len(by) != 2 || two == nil || one == nil {
		return "", "", "", fmt.Errorf("nodes by subnet %v: want two subnets, one with two nodes (up -kube -nodes 3 -subnets 2)", by)
	}
	return two[0], two[1], one[0], nil
}

// pod runs the app on node and waits until it is Ready.
func (b *bench) pod(ctx context.Context, name, node string) (*corev1.Pod, error) {
	grace := int64(0)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{Name: "app", Image: "rt.local/ovsflow-app:1", ImagePullPolicy: corev1.PullNever}}}}
	if _, err := b.kube.CoreV1().Pods(b.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if p, err = b.kube.CoreV1().Pods(b.ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && len(p.Status.PodIPs) == 2 {
				return true, nil
			}
		}
		return false, nil
	})
	return p, err
}

func podIP(p *corev1.Pod, fam int) string {
	for _, ip := range p.Status.PodIPs {
		if strings.Contains(ip.IP, ":") == (fam == 6) {
			return ip.IP
		}
	}
	return ""
}

// transfer sends mb MB from pod src to pod dst's addr over TCP and returns
// MB/s: from the client's start to the receiver's count of every byte.
func (b *bench) transfer(ctx context.Context, src, dst *corev1.Pod, addr string, fam, mb int) (float64, error) {
	const port = 9200
	size := mb * 1_000_000
	got := make(chan string, 1)
	go func() {
		out, _ := b.inPod(ctx, dst, fmt.Sprintf("timeout 300 socat -u TCP%d-LISTEN:%d,reuseaddr - | wc -c", fam, port))
		got <- strings.TrimSpace(out)
	}()
	// The listener first (a wait on it, not on time).
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _ := b.inPod(ctx, dst, fmt.Sprintf("ss -ltnH 'sport = :%d'", port))
		return strings.Contains(out, strconv.Itoa(port)), nil
	}); err != nil {
		return 0, fmt.Errorf("the receiver on %s: %w", dst.Spec.NodeName, err)
	}
	if fam == 6 {
		addr = "[" + addr + "]"
	}
	out, err := b.inPod(ctx, src, fmt.Sprintf(`s=$(date +%%s%%N); head -c %d /dev/zero | socat -u - TCP%d:%s:%d; e=$(date +%%s%%N); echo $((e-s))`, size, fam, addr, port))
	if err != nil {
		return 0, err
	}
	if n := <-got; n != strconv.Itoa(size) {
		return 0, fmt.Errorf("%s counted %q bytes of %d", dst.Name, n, size)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil || ns <= 0 {
		return 0, fmt.Errorf("transfer time %q: %v", out, err)
	}
	return float64(mb) / (float64(ns) / 1e9), nil
}

// rtt is the mean round-trip time of pings echo requests from pod src to addr, ms.
func (b *bench) rtt(ctx context.Context, src *corev1.Pod, addr string, pings int) (float64, error) {
	out, err := b.inPod(ctx, src, fmt.Sprintf("ping -q -c %d -i 0.01 %s", pings, addr))
	if err != nil {
		return 0, err
	}
	_, stats, ok := strings.Cut(out, "rtt min/avg/max/mdev = ")
	f := strings.Split(stats, "/")
	if !ok || len(f) < 2 {
		return 0, fmt.Errorf("ping to %s: %q", addr, out)
	}
	return strconv.ParseFloat(f[1], 64)
}

// inPod runs a bash script in pod p's network namespace, entered on its
// node (the script is the entering shell's $0: nothing of it expands there).
func (b *bench) inPod(ctx context.Context, p *corev1.Pod, script string) (string, error) {
	return b.exec(ctx, p.Spec.NodeName, fmt.Sprintf(`pod=$(crictl pods -q --name '^%s$' --namespace '%s' --state ready | head -1)
netns=$(crictl inspectp -o go-template --template '{{range .info.runtimeSpec.linux.namespaces}}{{if eq .type "network"}}{{.path}}{{end}}{{end}}' "$pod")
exec nsenter --net="$netns" bash -c "$0"`, p.Name, p.Namespace), script)
}

// exec runs a bash script in a node of the harness (args: its $0, $1...).
func (b *bench) exec(ctx context.Context, node, script string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, b.harness, append([]string{"exec", node, "bash", "-c", script}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("on %s: %w: %s", node, err, out)
	}
	return string(out), nil
}
