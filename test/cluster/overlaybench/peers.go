package main

// The agent's cost with many peers: its CPU time and RSS on the client
// node with the cluster's own Nodes, then with simulated Nodes added until
// there are `peers` in all (Node objects only, each with an InternalIP on
// another subnet than every real node's and pod ranges of its own, so
// that every agent tunnels to them), and how long the agents take to put
// the new peers' flows in and to take them out again.

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// simLabel marks the simulated Nodes (they are deleted by it).
const simLabel = "ovsflow.io/overlaybench-sim"

// simNode is simulated Node i (from 1): its InternalIPs in 198.19.250.0/24
// and 2001:db8:fe::/64 (no real node's subnet), its pod ranges
// 198.18.i.0/24 and 2001:db8:fe:i::/64 (the benchmark range; no real
// pod's).
func simNode(i int) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sim-%02d", i), Labels: map[string]string{simLabel: "1"}},
		Spec: corev1.NodeSpec{
			PodCIDR:  fmt.Sprintf("198.18.%d.0/24", i),
			PodCIDRs: []string{fmt.Sprintf("198.18.%d.0/24", i), fmt.Sprintf("2001:db8:fe:%x::/64", i)},
			Taints:   []corev1.Taint{{Key: simLabel, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.19.250.%d", i)},
			{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8:fe::%x", i)},
		}},
	}
}

// agentUsage is the agent's CPU time (user and system, s) and its RSS and
// peak RSS (MiB) on node, from its /proc.
type agentUsage struct{ cpu, rss, peak float64 }

func (b *bench) agentUsage(ctx context.Context, node string) (agentUsage, error) {
	out, err := b.exec(ctx, node, `p=$(pgrep -xo ovsflow-agent) || { echo "no ovsflow-agent"; exit 1; }
echo "$(getconf CLK_TCK) $(cut -d' ' -f14,15 /proc/$p/stat) $(awk '/^VmRSS|^VmHWM/ {print $2}' /proc/$p/status | tr '\n' ' ')"`)
	if err != nil {
		return agentUsage{}, err
	}
	f := strings.Fields(out)
	var v [5]float64
	if len(f) != 5 {
		return agentUsage{}, fmt.Errorf("the agent's /proc on %s: %q", node, out)
	}
	for i := range f {
		if v[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return agentUsage{}, fmt.Errorf("the agent's /proc on %s: %q", node, out)
		}
	}
	// VmHWM and VmRSS in kB, in the order /proc prints them (VmHWM first).
	return agentUsage{cpu: (v[1] + v[2]) / v[0], peak: v[3] / 1024, rss: v[4] / 1024}, nil
}

// tunnelled is the number of table 50's peer flows on node (one per
// tunnelled pod range).
func (b *bench) tunnelled(ctx context.Context, node string) (int, error) {
	out, err := b.exec(ctx, node, "ovs-ofctl dump-flows br0 table=50 | grep -c priority=100 || true")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// peers runs the measure on node client with the cluster's Nodes, then
// with simulated Nodes up to peers Nodes in all, each state held for
// window, and prints its table.
func (b *bench) peers(ctx context.Context, w io.Writer, client string, peers int, window time.Duration) error {
	nodes, err := b.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	real := len(nodes.Items)
	sims := peers - real
	if sims <= 0 || sims > 250 {
		return fmt.Errorf("-peers %d with %d Nodes: want 1 to 250 simulated Nodes", peers, real)
	}
	defer b.deleteSims(context.Background())
	base, err := b.tunnelled(ctx, client)
	if err != nil {
		return err
	}
	hold := func() (agentUsage, float64, error) {
		u0, err := b.agentUsage(ctx, client)
		if err != nil {
			return u0, 0, err
		}
		select { // time is the subject: the agent's use over a window of its steady state
		case <-time.After(window):
		case <-ctx.Done():
			return u0, 0, ctx.Err()
		}
		u1, err := b.agentUsage(ctx, client)
		return u1, (u1.cpu - u0.cpu) / window.Seconds() * 100, err
	}
	fmt.Fprintf(w, "# The node agent with many peers\n\n- command: hack/ovs-in-docker.sh bench -overlay (-peers %d); on %s, each state held %s (the agent's resync is 30 s)\n", peers, client, window)
	fmt.Fprintf(w, "- simulated Nodes: Node objects only, InternalIPs on another subnet (198.19.250.0/24, 2001:db8:fe::/64), pod ranges 198.18.N.0/24 and 2001:db8:fe:N::/64: every agent tunnels to them\n\n")
	fmt.Fprintf(w, "| Nodes | ranges through the tunnel | agent CPU, %% of a core | RSS MiB | peak RSS MiB |\n|---|---|---|---|---|\n")
	u, pct, err := hold()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "| %d | %d | %.2f | %.1f | %.1f |\n", real, base, pct, u.rss, u.peak)

	before, err := b.agentUsage(ctx, client)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for i := 1; i <= sims; i++ {
		if _, err := b.kube.CoreV1().Nodes().Create(ctx, simNode(i), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("simulated Node %d: %w", i, err)
		}
	}
	want := base + 2*sims
	added, err := b.waitTunnelled(ctx, client, want, t0)
	if err != nil {
		return err
	}
	after, err := b.agentUsage(ctx, client)
	if err != nil {
		return err
	}
	u, pct, err = hold()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "| %d | %d | %.2f | %.1f | %.1f |\n\n", peers, want, pct, u.rss, u.peak)
	t0 = time.Now()
	if err := b.deleteSims(ctx); err != nil {
		return err
	}
	removed, err := b.waitTunnelled(ctx, client, base, t0)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "- %d Nodes created at once: their %d ranges' flows on %s after %.1f s (the agent's CPU meanwhile %.2f s); deleted: their flows gone after %.1f s\n\n",
		sims, 2*sims, client, added.Seconds(), after.cpu-before.cpu, removed.Seconds())
	return nil
}

// waitTunnelled waits until node's table 50 holds want peer flows, and
// returns the time since t0.
func (b *bench) waitTunnelled(ctx context.Context, node string, want int, t0 time.Time) (time.Duration, error) {
	var got int
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := b.tunnelled(ctx, node)
		got = n
		return err == nil && n == want, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%s: %d tunnelled ranges, want %d: %w", node, got, want, err)
	}
	return time.Since(t0), nil
}

// deleteSims deletes the simulated Nodes.
func (b *bench) deleteSims(ctx context.Context) error {
	return b.kube.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: simLabel})
}
