package cluster

// The node agent against Node objects that no kubelet runs, which the tests
// create, edit and delete (named ovsflow-test-*, unschedulable): the agent's
// routes follow them, it refuses what a hostile Node claims, and an agent
// of the tests' own on a node follows its Node in the conflist and /readyz.
// Each test looks at the first node (n1), and only at routes to 192.0.2.0/24
// and 2001:db8:c0::/44, which nothing else of the cluster routes; the fake
// Nodes' InternalIPs are free addresses of n1's own subnet, so that its
// agent routes them directly (host-gw), as it does its real peers there.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// agentProtocol is the routes' protocol number that marks them as the
// agent's (pkg/podroutes.DefaultProtocol; this module does not import the
// plugins' module).
const agentProtocol = 157

// The tests' destinations: documentation ranges no Node of the cluster has.
var (
	testRange4 = netip.MustParsePrefix("192.0.2.0/24")
	testRange6 = netip.MustParsePrefix("2001:db8:c0::/44")
)

// fakeNode creates (or replaces) a Node that no kubelet runs, unschedulable,
// with podCIDRs and InternalIPs, and deletes it at the end of the test.
func fakeNode(t *testing.T, ctx context.Context, name string, cidrs []string, ips ...string) {
	t.Helper()
	deleteFakeNode(t, ctx, name)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"ovsflow.io/test-node": "fake"}},
		Spec: corev1.NodeSpec{PodCIDRs: cidrs, Unschedulable: true}}
	if len(cidrs) > 0 {
		n.Spec.PodCIDR = cidrs[0]
	}
	if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		deleteFakeNode(t, ctx, name)
	})
	setNodeAddrs(t, ctx, name, ips...)
}

// setNodeAddrs sets a fake Node's InternalIPs (its status: kubelet's part).
func setNodeAddrs(t *testing.T, ctx context.Context, name string, ips ...string) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		cur, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
		for _, ip := range ips {
			cur.Status.Addresses = append(cur.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		_, err = kube.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || attempt > 10 {
			t.Fatalf("node %s status: %v", name, err)
		}
	}
}

// deleteFakeNode deletes a Node and waits until it is gone.
func deleteFakeNode(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if err := kube.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting node %s: %v", name, err)
		return
	}
	eventually(t, ctx, 30*time.Second, "node "+name+" gone", func() error {
		if _, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
}

// agentRoutes lists a node's routes of the agent's protocol in a table (0:
// main) to the tests' ranges, as "DST via GW dev DEV[ onlink]" lines, sorted.
func agentRoutes(ctx context.Context, nodeName string, table int) ([]string, error) {
	tbl := "main"
	if table != 0 {
		tbl = fmt.Sprint(table)
	}
	out, err := onNode(ctx, nodeName, fmt.Sprintf("ip -4 -o route show table %s proto %d; ip -6 -o route show table %s proto %d", tbl, agentProtocol, tbl, agentProtocol))
	if err != nil {
		return nil, err
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		dst, err := netip.ParsePrefix(f[0])
		if err != nil || !(testRange4.Overlaps(dst) || testRange6.Overlaps(dst)) {
			continue
		}
		line := dst.String()
		for i := 1; i+1 < len(f); i++ {
			if f[i] == "via" || f[i] == "dev" {
				line += " " + f[i] + " " + f[i+1]
			}
		}
		if slices.Contains(f, "onlink") {
			line += " onlink"
		}
		got = append(got, line)
	}
	slices.Sort(got)
	return got, nil
}

// routesAre: a condition for eventually, the node's agent routes to the
// tests' ranges in table are exactly want.
func routesAre(ctx context.Context, nodeName string, table int, want ...string) func() error {
	want = slices.Clone(want)
	slices.Sort(want)
	return func() error {
		got, err := agentRoutes(ctx, nodeName, table)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("routes of protocol %d on %s %q, want %q", agentProtocol, nodeName, got, want)
		}
		return nil
	}
}

// nodeSubnets: nd's IPv4 and IPv6 subnets (its uplink's, br0's prefixes
// holding its InternalIPs).
func nodeSubnets(t *testing.T, ctx context.Context, nd node) (p4, p6 netip.Prefix) {
	t.Helper()
	p4, p6, out, err := uplinkPrefixes(ctx, nd)
	if err != nil {
		t.Fatal(err)
	}
	if !p4.IsValid() || !p6.IsValid() {
		t.Fatalf("br0 of %s holds no prefix of %s and %s: %s", nd.Name, nd.IPv4, nd.IPv6, out)
	}
	return p4, p6
}

// freeAddrs: n addresses of the subnets p4 and p6 that no container of
// the harness has (below the router's and the control plane's).
func freeAddrs(t *testing.T, n int, p4, p6 netip.Prefix) (v4, v6 []string) {
	t.Helper()
	// The harness gives nodes the first addresses, the router and the
	// control plane the 29th and 30th (test/cluster/harness/topology):
	// the 20th and up are free.
	for i := 0; i < n; i++ {
		v4 = append(v4, nth(p4.Masked().Addr(), 20+i).String())
		v6 = append(v6, nth(p6.Masked().Addr(), 0xf0+i).String())
	}
	if last := netip.MustParseAddr(v4[n-1]); !p4.Contains(last) {
		t.Fatalf("no %d free addresses in %s", n, p4)
	}
	return v4, v6
}

func nth(a netip.Addr, k int) netip.Addr {
	for ; k > 0; k-- {
		a = a.Next()
	}
	return a
}

// onlink is the agent's host-gw route line to dst via gw.
func onlink(dst, gw string) string { return dst + " via " + gw + " dev br0 onlink" }

// TestAgentRoutesFollowNodes: the DaemonSet's agent routes every other
// Node's pod ranges via its InternalIP of the same family, follows their
// changes and deletions, removes a route of its protocol that no Node
// explains (while it runs, and at its start), and leaves a route of
// another protocol alone, even where a Node claims its range.
func TestAgentRoutesFollowNodes(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	p4, p6 := nodeSubnets(t, ctx, nd)
	v4, v6 := freeAddrs(t, 6, p4, p6)
	ip := func(script string) {
		t.Helper()
		if out, err := onNode(ctx, nd.Name, script); err != nil {
			t.Fatalf("%s: %v", script, out)
		}
	}
	// Not the agent's: a static route (protocol 4, static) to a range a Node will claim.
	ip("ip route replace 192.0.2.224/27 via " + v4[5] + " dev br0 onlink proto 4")
	t.Cleanup(func() { onNode(context.Background(), nd.Name, "ip route del 192.0.2.224/27 proto 4") })

	fakeNode(t, ctx, "ovsflow-test-peer-a", []string{"192.0.2.0/26", "2001:db8:c1::/64"}, v4[0], v6[0])
	eventually(t, ctx, time.Minute, "a new Node's pod ranges routed via its InternalIPs", routesAre(ctx, nd.Name, 0,
		onlink("192.0.2.0/26", v4[0]), onlink("2001:db8:c1::/64", v6[0])))

	setNodeAddrs(t, ctx, "ovsflow-test-peer-a", v4[1])
	eventually(t, ctx, time.Minute, "a changed InternalIP moves the route; a family without one loses its route", routesAre(ctx, nd.Name, 0,
		onlink("192.0.2.0/26", v4[1])))

	// podCIDRs cannot change once set: a Node that gets others is a new Node of that name.
	fakeNode(t, ctx, "ovsflow-test-peer-a", []string{"192.0.2.64/26"}, v4[1])
	eventually(t, ctx, time.Minute, "a Node created again with other podCIDRs", routesAre(ctx, nd.Name, 0, onlink("192.0.2.64/26", v4[1])))

	// A route of the agent's protocol that no Node explains (left by an
	// agent that was killed, say) goes at the next pass: a new Node's.
	stray := fmt.Sprintf("ip route add 192.0.2.128/27 via %s dev br0 onlink proto %d", v4[4], agentProtocol)
	ip(stray)
	fakeNode(t, ctx, "ovsflow-test-peer-b", []string{"192.0.2.160/27"}, v4[2])
	eventually(t, ctx, time.Minute, "the stray route removed, the new Node's there", routesAre(ctx, nd.Name, 0,
		onlink("192.0.2.64/26", v4[1]), onlink("192.0.2.160/27", v4[2])))

	// A Node whose range has the static route: that route is left alone.
	fakeNode(t, ctx, "ovsflow-test-peer-d", []string{"192.0.2.224/27"}, v4[3])
	eventually(t, ctx, time.Minute, "a range with a route of another protocol not taken over", routesAre(ctx, nd.Name, 0,
		onlink("192.0.2.64/26", v4[1]), onlink("192.0.2.160/27", v4[2])))
	deleteFakeNode(t, ctx, "ovsflow-test-peer-d")

	// The agent restarted: a stray route found at its start goes, the
	// Nodes' routes stay.
	ip(stray)
	restartAgentOn(t, ctx, nd.Name)
	eventually(t, ctx, time.Minute, "after the agent's restart, the stray route gone, the Nodes' routes there", routesAre(ctx, nd.Name, 0,
		onlink("192.0.2.64/26", v4[1]), onlink("192.0.2.160/27", v4[2])))

	deleteFakeNode(t, ctx, "ovsflow-test-peer-a")
	deleteFakeNode(t, ctx, "ovsflow-test-peer-b")
	eventually(t, ctx, time.Minute, "deleted Nodes' routes gone", routesAre(ctx, nd.Name, 0))
	if out, err := onNode(ctx, nd.Name, "ip -o route show exact 192.0.2.224/27"); err != nil ||
		!strings.Contains(out, "via "+v4[5]) || !strings.Contains(out, "proto static") {
		t.Errorf("the static route of protocol 4 was touched: %q (%v)", out, err)
	}
}

// TestAgentRefusesHostileNodeClaims: Node objects that no kubelet runs
// claim what they should not: a range overlapping a real peer's (created
// after it), a range inside this node's subnet, a /32 of the API server
// (on the node's subnet), the default route (refused as overlapping this
// node's own pod range, checked first). The DaemonSet's agent installs none
// of them, keeps the real peer's route all along, and counts them in its
// metrics; once the older peer is gone, the overlapping claim is routed.
func TestAgentRefusesHostileNodeClaims(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	sub, sub6 := nodeSubnets(t, ctx, nd)
	v4, _ := freeAddrs(t, 5, sub, sub6)
	apiserver := nth(sub.Masked().Addr(), 30) // the control plane (topology.ControlPlaneAt)
	inside := netip.PrefixFrom(nth(sub.Masked().Addr(), 16), 28)
	real := onlink("192.0.2.0/26", v4[0])
	// creationTimestamp counts seconds: a Node created within the same
	// second is as old, and the name decides (podroutes.Plan), so the real
	// peer's name sorts first.
	fakeNode(t, ctx, "ovsflow-test-claim-a-real", []string{"192.0.2.0/26"}, v4[0])
	eventually(t, ctx, time.Minute, "the real peer's range routed", routesAre(ctx, nd.Name, 0, real))
	fakeNode(t, ctx, "ovsflow-test-claim-overlap", []string{"192.0.2.0/24"}, v4[1])
	fakeNode(t, ctx, "ovsflow-test-claim-subnet", []string{inside.String()}, v4[2])
	fakeNode(t, ctx, "ovsflow-test-claim-apiserver", []string{apiserver.String() + "/32"}, v4[3])
	fakeNode(t, ctx, "ovsflow-test-claim-default", []string{"0.0.0.0/0"}, v4[4])
	eventually(t, ctx, time.Minute, "the agent counts the refused claims, and only the real route is there", func() error {
		if err := routesAre(ctx, nd.Name, 0, real)(); err != nil {
			t.Fatalf("at every pass: %v", err)
		}
		for _, c := range []string{inside.String(), apiserver.String() + "/32", "0.0.0.0/0"} {
			if out, err := onNode(ctx, nd.Name, fmt.Sprintf("ip -4 -o route show exact %s proto %d", c, agentProtocol)); err != nil || strings.TrimSpace(out) != "" {
				t.Fatalf("a route of the agent's to the claim %s: %q (%v)", c, out, err)
			}
		}
		code, m, err := agentGet(ctx, nd.Name, "/metrics")
		if err != nil || code != 200 {
			return fmt.Errorf("GET /metrics: %d (%v)", code, err)
		}
		for _, w := range []string{`ovsflow_pod_ranges_not_routed{reason="conflict"} 1`, `ovsflow_pod_ranges_not_routed{reason="local"} 2`} {
			if !strings.Contains(m, w) {
				return fmt.Errorf("/metrics has no %s", w)
			}
		}
		return nil
	})
	deleteFakeNode(t, ctx, "ovsflow-test-claim-a-real")
	eventually(t, ctx, time.Minute, "the real peer gone, the newer claim overlapping it routed", routesAre(ctx, nd.Name, 0,
		onlink("192.0.2.0/24", v4[1])))
}

// restartAgentOn deletes the DaemonSet's pod on a node and waits for its
// successor to be Ready.
func restartAgentOn(t *testing.T, ctx context.Context, nodeName string) {
	t.Helper()
	before, err := agentPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, ok := before[nodeName]
	if !ok {
		t.Fatalf("no agent pod on %s", nodeName)
	}
	if err := kube.CoreV1().Pods(dsNamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, ctx, 2*time.Minute, "a new agent pod Ready on "+nodeName, func() error {
		now, err := agentPods(ctx)
		if err != nil {
			return err
		}
		p, ok := now[nodeName]
		if !ok || p.Name == old.Name || !agentReady(&p) {
			return fmt.Errorf("no new Ready agent pod yet")
		}
		return nil
	})
}

// TestAgentOwnNodeConflistAndReadiness runs a second agent on the first
// node for a Node that does not exist yet (in a routes table of its own,
// no overlay, no plugins installed, its conflist in a directory of its
// own: it does not meet the DaemonSet's agent): /readyz says why it is not
// ready; the conflist follows the Node's podCIDRs, the confirmation of
// the ranges (what ovs-bridge serves ADD and STATUS on) with it; /readyz
// flips; the Node's deletion withdraws them.
func TestAgentOwnNodeConflistAndReadiness(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	const self, table, port = "ovsflow-test-self", 158, 19469
	dir, err := onNode(ctx, nd.Name, "mktemp -d /tmp/ovsflow-agent-test.XXXXXX")
	if err != nil {
		t.Fatal(err)
	}
	dir = strings.TrimSpace(dir)
	tmpl, confDir, confirm := dir+"/10-ovsflow.conflist", dir+"/net.d", dir+"/run/pod-ranges"
	conf := `{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0"],"name":"ovsflow","plugins":[{"type":"ovs-bridge",
  "confirmedRanges":"` + confirm + `","ipam":{"type":"host-local","ranges":[[{"subnet":"192.0.2.0/24"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}]}`
	deleteFakeNode(t, ctx, self)
	start := fmt.Sprintf(`printf '%%s' "$1" >%s && mkdir -p %s && setsid /opt/ovsflow/bin/ovsflow-agent -node-name %s -kubeconfig %s \
  -conf-template %s -cni-conf-dir %s -plugin-src '' -ovsdb unix:/run/openvswitch/db.sock -overlay none -route-table %d \
  -health-addr 127.0.0.1:%d -metrics=false -orphan-interval 0 -resync 5s >%s/agent.log 2>&1 </dev/null & echo $! >%s/pid`,
		tmpl, confDir, self, kubeconfigPath, tmpl, confDir, table, port, dir, dir)
	if out, err := onNode(ctx, nd.Name, start, conf); err != nil {
		t.Fatalf("starting the agent: %v", out)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if t.Failed() {
			out, _ := onNode(ctx, nd.Name, "cat "+dir+"/agent.log")
			t.Logf("the agent's log:\n%s", out)
		}
		onNode(ctx, nd.Name, fmt.Sprintf("kill $(cat %s/pid); while kill -0 $(cat %s/pid) 2>/dev/null; do sleep 0.1; done; ip -4 route flush table %d; ip -6 route flush table %d; rm -rf %s", dir, dir, table, table, dir))
	})
	readyz := func() (int, string) {
		code, body, err := agentGetAt(ctx, nd.Name, port, "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		return code, body
	}
	notReady := func(why string) func() error {
		return func() error {
			if code, body := readyz(); code != 503 || !strings.Contains(body, why) {
				return fmt.Errorf("/readyz %d %q, want 503 saying %q", code, body, why)
			}
			return nil
		}
	}
	ready := func() error {
		if code, body := readyz(); code != 200 {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	}
	conflist := confDir + "/10-ovsflow.conflist"
	subnets := func(want ...string) func() error {
		return func() error {
			got, err := conflistSubnetsAt(ctx, nd.Name, conflist)
			if err != nil {
				return err
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("conflist subnets %q, want %q", got, want)
			}
			return nil
		}
	}
	confirmed := func(want ...string) func() error {
		return func() error {
			out, err := onNode(ctx, nd.Name, "cat "+confirm+" 2>/dev/null || echo NONE")
			if err != nil {
				return err
			}
			w := "NONE\n"
			if len(want) > 0 {
				slices.Sort(want)
				w = strings.Join(want, "\n") + "\n"
			}
			if out != w {
				return fmt.Errorf("%s: %q, want %q", confirm, out, w)
			}
			return nil
		}
	}

	eventually(t, ctx, time.Minute, "/readyz without the Node", notReady(`[-]conflist: no Node "`+self+`"`))
	if out, _ := onNode(ctx, nd.Name, "ls "+conflist+" 2>/dev/null || true"); strings.TrimSpace(out) != "" {
		t.Error("a conflist was written without the Node's podCIDRs")
	}
	if err := confirmed()(); err != nil {
		t.Errorf("without the Node: %v", err)
	}
	// The Node's InternalIPs are the real node's: the real Node is then
	// this one's own (not routed), the others are peers.
	fakeNode(t, ctx, self, []string{"192.0.2.128/26", "2001:db8:c2::/64"}, nd.IPv4, nd.IPv6)
	eventually(t, ctx, time.Minute, "the conflist carries the Node's podCIDRs", subnets("192.0.2.128/26", "2001:db8:c2::/64"))
	eventually(t, ctx, time.Minute, "the agent confirms them", confirmed("192.0.2.128/26", "2001:db8:c2::/64"))
	eventually(t, ctx, time.Minute, "/readyz once the conflist is in place and reconcile passed", ready)
	p4, p6 := nodeSubnets(t, ctx, nd)
	v4, _ := freeAddrs(t, 1, p4, p6)
	fakeNode(t, ctx, "ovsflow-test-peer-c", []string{"192.0.2.192/27"}, v4[0])
	eventually(t, ctx, time.Minute, "another Node's pod range in the agent's own table", routesAre(ctx, nd.Name, table, onlink("192.0.2.192/27", v4[0])))

	deleteFakeNode(t, ctx, self)
	eventually(t, ctx, time.Minute, "/readyz with the Node gone", notReady(`[-]conflist: no Node "`+self+`"`))
	eventually(t, ctx, time.Minute, "the confirmation withdrawn with the Node gone", confirmed())
	fakeNode(t, ctx, self, []string{"192.0.2.160/27"}, nd.IPv4)
	eventually(t, ctx, time.Minute, "the conflist follows the new podCIDRs", subnets("192.0.2.160/27"))
	eventually(t, ctx, time.Minute, "the agent confirms the new ones", confirmed("192.0.2.160/27"))
	eventually(t, ctx, time.Minute, "/readyz again", ready)
	if out, err := onNode(ctx, nd.Name, "cat "+conflist); err != nil || strings.Contains(out, `"::/0"`) {
		t.Errorf("an IPv4-only node's conflist keeps the IPv6 default route (or is unreadable, %v): %s", err, out)
	}
}
