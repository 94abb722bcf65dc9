// Package kube holds the single-node Kubernetes suite: `hack/kube.sh test`
// runs these tests inside the node of hack/kube.sh (its network and mount
// namespaces: the node's routes through netlink, its OVSDB socket), after
// the DaemonSet of deploy/ is up: the agent's routes and conflist against a
// real API server, with Node objects that no kubelet runs. What a cluster
// of several nodes shows (pods, host ports, restarts, drain) is test/cluster's.
// Without OVSFLOW_KUBECONFIG (the cluster's admin kubeconfig) they skip.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ovsflow/ovs-cni/pkg/agent"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
	"github.com/ovsflow/ovs-cni/test/framework"
)

func client(t *testing.T) (*kubernetes.Clientset, string) {
	t.Helper()
	kc := os.Getenv("OVSFLOW_KUBECONFIG")
	if kc == "" {
		// Not CI's to fail: hack/test.sh runs every package without a
		// cluster; hack/kube.sh test runs these with one.
		t.Skip("*** no OVSFLOW_KUBECONFIG: the agent's Kubernetes tests are SKIPPED (hack/kube.sh test runs them) ***")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs, kc
}

// node creates (or replaces) a Node that no kubelet runs, with podCIDRs and
// InternalIPs, and deletes it at the end of the test.
func node(t *testing.T, cs *kubernetes.Clientset, name string, cidrs []string, ips ...string) {
	t.Helper()
	ctx := context.Background()
	deleteNode(t, cs, name)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"suite": "okube-agent"}},
		Spec: corev1.NodeSpec{PodCIDRs: cidrs, Unschedulable: true}}
	if len(cidrs) > 0 {
		n.Spec.PodCIDR = cidrs[0]
	}
	created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	t.Cleanup(func() { deleteNode(t, cs, name) })
	setAddrs(t, cs, created, ips...)
}

func setAddrs(t *testing.T, cs *kubernetes.Clientset, n *corev1.Node, ips ...string) {
	t.Helper()
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		cur, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: n.Name}}
		for _, ip := range ips {
			cur.Status.Addresses = append(cur.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
		}
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || attempt > 10 {
			t.Fatalf("node %s status: %v", n.Name, err)
		}
	}
}

func deleteNode(t *testing.T, cs *kubernetes.Clientset, name string) {
	t.Helper()
	ctx := context.Background()
	err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting node %s: %v", name, err)
		return
	}
	err = framework.Wait(10*time.Second, func() error {
		if _, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("node %s is still there (%v)", name, err)
		}
		return nil
	})
	if err != nil {
		t.Errorf("deleting node %s: %v", name, err)
	}
}

// ourRoutes lists the routes of the agent's protocol in table, as
// "dst via gw dev onlink" lines, sorted.
func ourRoutes(t *testing.T, table int) []string {
	t.Helper()
	if table == 0 {
		table = 254
	}
	var out []string
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: table, Protocol: podroutes.DefaultProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			dev := "?"
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			line := fmt.Sprintf("%s via %s dev %s", r.Dst, r.Gw, dev)
			if r.Flags&int(netlink.FLAG_ONLINK) != 0 {
				line += " onlink"
			}
			out = append(out, line)
		}
	}
	slices.Sort(out)
	return out
}

// eventually waits (framework.Eventually, a minute) until cond holds, or
// fails with what it last said.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	framework.Eventually(t, time.Minute, what, func() error {
		if ok, why := cond(); !ok {
			return errors.New(why)
		}
		return nil
	})
}

func routesAre(t *testing.T, table int, want ...string) func() (bool, string) {
	slices.Sort(want)
	return func() (bool, string) {
		got := ourRoutes(t, table)
		return slices.Equal(got, want), fmt.Sprintf("routes of protocol %d %q, want %q", podroutes.DefaultProtocol, got, want)
	}
}

// TestAgentRoutes: the DaemonSet's agent routes every other Node's pod
// ranges via its InternalIP of the same family, follows their changes and
// deletions, removes a route of its protocol that no Node explains (while
// it runs, and at start), and leaves a route of another protocol alone
// (one that a Node's range would take over too).
func TestAgentRoutes(t *testing.T) {
	cs, _ := client(t)
	// Routes in the main table of the node (this process runs in its netns).
	for _, r := range ourRoutes(t, 0) {
		t.Logf("routes of the agent at start: %s", r)
	}
	// Not the agent's: a static route in the same range of destinations.
	_, static, _ := net.ParseCIDR("192.0.2.224/27")
	br0, err := netlink.LinkByName("br0")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: br0.Attrs().Index, Dst: static, Gw: net.ParseIP("203.0.113.99"),
		Flags: int(netlink.FLAG_ONLINK), Protocol: 4}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.RouteDel(&netlink.Route{LinkIndex: br0.Attrs().Index, Dst: static}) })

	node(t, cs, "okube-peer-a", []string{"192.0.2.0/26", "2001:db8:c1::/64"}, "203.0.113.31", "2001:db8:15::31")
	eventually(t, "a new Node's pod ranges are routed via its InternalIPs", routesAre(t, 0,
		"192.0.2.0/26 via 203.0.113.31 dev br0 onlink", "2001:db8:c1::/64 via 2001:db8:15::31 dev br0 onlink"))

	a, err := cs.CoreV1().Nodes().Get(context.Background(), "okube-peer-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setAddrs(t, cs, a, "203.0.113.32")
	eventually(t, "a changed InternalIP moves the route; a family without one loses its route", routesAre(t, 0,
		"192.0.2.0/26 via 203.0.113.32 dev br0 onlink"))

	// podCIDRs cannot change once set: a Node that gets others is a new Node of that name.
	node(t, cs, "okube-peer-a", []string{"192.0.2.64/26"}, "203.0.113.32")
	eventually(t, "a Node created again with other podCIDRs", routesAre(t, 0, "192.0.2.64/26 via 203.0.113.32 dev br0 onlink"))

	// A route of the agent's protocol that no Node explains (left by an
	// agent that was killed, say) goes at the next pass: a new Node's.
	_, stray, _ := net.ParseCIDR("192.0.2.128/27")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: br0.Attrs().Index, Dst: stray, Gw: net.ParseIP("203.0.113.98"),
		Flags: int(netlink.FLAG_ONLINK), Protocol: podroutes.DefaultProtocol}); err != nil {
		t.Fatal(err)
	}
	node(t, cs, "okube-peer-b", []string{"192.0.2.160/27"}, "203.0.113.33")
	eventually(t, "the stray route is removed, the new Node's is there", routesAre(t, 0,
		"192.0.2.64/26 via 203.0.113.32 dev br0 onlink", "192.0.2.160/27 via 203.0.113.33 dev br0 onlink"))

	// A Node whose range has the static route: that route is left alone.
	node(t, cs, "okube-peer-d", []string{"192.0.2.224/27"}, "203.0.113.35")
	eventually(t, "a range with a route of another protocol is not taken over", routesAre(t, 0,
		"192.0.2.64/26 via 203.0.113.32 dev br0 onlink", "192.0.2.160/27 via 203.0.113.33 dev br0 onlink"))
	deleteNode(t, cs, "okube-peer-d")

	// The agent restarted: a stray route found at start goes, the Nodes'
	// routes stay.
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: br0.Attrs().Index, Dst: stray, Gw: net.ParseIP("203.0.113.98"),
		Flags: int(netlink.FLAG_ONLINK), Protocol: podroutes.DefaultProtocol}); err != nil {
		t.Fatal(err)
	}
	restartAgent(t, cs)
	eventually(t, "after a restart, the stray route is gone, the Nodes' routes are there", routesAre(t, 0,
		"192.0.2.64/26 via 203.0.113.32 dev br0 onlink", "192.0.2.160/27 via 203.0.113.33 dev br0 onlink"))

	deleteNode(t, cs, "okube-peer-a")
	deleteNode(t, cs, "okube-peer-b")
	eventually(t, "deleted Nodes' routes are gone", routesAre(t, 0))
	rs, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: static}, netlink.RT_FILTER_DST)
	if len(rs) != 1 || rs[0].Protocol != 4 || !rs[0].Gw.Equal(net.ParseIP("203.0.113.99")) {
		t.Errorf("the static route of protocol 4 was touched: %+v", rs)
	}
}

// TestAgentRouteClaims: Node objects that no kubelet runs claim what they
// should not: a range overlapping a real peer's (created after it), a
// range inside this node's subnet, a /32 of the API server (this node's
// address), the default route (refused as overlapping this node's pod
// range, checked first). The DaemonSet's agent installs none of them and
// keeps the real peer's route all along; its metrics count them.
func TestAgentRouteClaims(t *testing.T) {
	cs, _ := client(t)
	real := "192.0.2.0/26 via 203.0.113.41 dev br0 onlink"
	// creationTimestamp counts seconds: a Node created within the same
	// second is as old, and the name decides (podroutes.Plan), so the real
	// peer's name sorts first.
	node(t, cs, "okube-claim-a-real", []string{"192.0.2.0/26"}, "203.0.113.41")
	eventually(t, "the real peer's range is routed", routesAre(t, 0, real))
	node(t, cs, "okube-claim-overlap", []string{"192.0.2.0/24"}, "203.0.113.42")
	node(t, cs, "okube-claim-subnet", []string{"203.0.113.64/26"}, "203.0.113.43")
	node(t, cs, "okube-claim-apiserver", []string{"203.0.113.10/32"}, "203.0.113.44")
	node(t, cs, "okube-claim-default", []string{"0.0.0.0/0"}, "203.0.113.45")
	eventually(t, "the agent counts the refused claims, and only the real route is there", func() (bool, string) {
		if got := ourRoutes(t, 0); !slices.Equal(got, []string{real}) {
			t.Fatalf("routes %q, want %q only (at every pass)", got, real)
		}
		m, err := metrics()
		if err != nil {
			return false, err.Error()
		}
		want := []string{`ovsflow_pod_ranges_not_routed{reason="conflict"} 1`, `ovsflow_pod_ranges_not_routed{reason="local"} 2`}
		for _, w := range want {
			if !strings.Contains(m, w) {
				return false, fmt.Sprintf("/metrics has no %s", w)
			}
		}
		return true, ""
	})
	deleteNode(t, cs, "okube-claim-a-real")
	eventually(t, "the real peer gone, the newer claim overlapping it is routed", routesAre(t, 0,
		"192.0.2.0/24 via 203.0.113.42 dev br0 onlink"))
}

// metrics reads the DaemonSet agent's /metrics (it runs in this netns).
func metrics() (string, error) {
	res, err := http.Get("http://127.0.0.1:9469/metrics")
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

// restartAgent deletes the DaemonSet's pod and waits for its successor to
// be Ready.
func restartAgent(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	ctx := context.Background()
	pods := cs.CoreV1().Pods("kube-system")
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=ovsflow-cni"}
	old, err := pods.List(ctx, sel)
	if err != nil || len(old.Items) != 1 {
		t.Fatalf("the agent's pod: %v, %v", old, err)
	}
	if err := pods.Delete(ctx, old.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new agent pod Ready", func() (bool, string) {
		l, err := pods.List(ctx, sel)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range l.Items {
			if p.Name == old.Items[0].Name {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d pods, none new and Ready", len(l.Items))
	})
}

// TestAgentConflistAndReadiness runs an agent in this process for a Node
// that does not exist yet (the routes in a table of its own, so that it
// does not meet the DaemonSet's agent): /readyz says why it is not ready;
// the conflist follows the Node's podCIDRs; /readyz flips.
func TestAgentConflistAndReadiness(t *testing.T) {
	cs, kc := client(t)
	const self, table, addr = "okube-self-b", 157, "127.0.0.1:19469"
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "10-ovsflow.conflist")
	confirm := filepath.Join(dir, "run", "pod-ranges")
	if err := os.WriteFile(tmpl, []byte(`{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0"],"name":"ovsflow","plugins":[{"type":"ovs-bridge",
	  "confirmedRanges":"`+confirm+`", "ipam":{"type":"host-local","ranges":[[{"subnet":"192.0.2.0/24"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	confDir := filepath.Join(dir, "net.d")
	deleteNode(t, cs, self)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logf, _ := os.Create(filepath.Join(dir, "agent.log"))
	go func() {
		done <- agent.Run(ctx, agent.Config{NodeName: self, Kubeconfig: kc, ConfTemplate: tmpl, CNIConfDir: confDir,
			OVSDB: endpoint.MustParse("unix:/run/openvswitch/db.sock"), Routes: true, RouteTable: table, HealthAddr: addr,
			Resync: 5 * time.Second, Log: logf})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
		podroutes.Table{Table: table, Protocol: podroutes.DefaultProtocol}.RemoveAll()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("the agent's log:\n%s", b)
		}
	})
	readyz := func() (int, string) {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	notReady := func(why string) func() (bool, string) {
		return func() (bool, string) {
			code, body := readyz()
			return code == 503 && strings.Contains(body, why), fmt.Sprintf("/readyz %d %q, want 503 saying %q", code, body, why)
		}
	}
	eventually(t, "/readyz without the Node", notReady(`[-]conflist: no Node "`+self+`"`))
	conflist := filepath.Join(confDir, "10-ovsflow.conflist")
	if _, err := os.Stat(conflist); err == nil {
		t.Error("a conflist was written without the Node's podCIDRs")
	}
	subnets := func(want ...string) func() (bool, string) {
		return func() (bool, string) {
			b, err := os.ReadFile(conflist)
			if err != nil {
				return false, err.Error()
			}
			var c struct {
				Plugins []struct {
					IPAM struct {
						Ranges [][]struct{ Subnet string } `json:"ranges"`
					} `json:"ipam"`
				} `json:"plugins"`
			}
			json.Unmarshal(b, &c)
			var got []string
			for _, p := range c.Plugins {
				for _, set := range p.IPAM.Ranges {
					for _, r := range set {
						got = append(got, r.Subnet)
					}
				}
			}
			return slices.Equal(got, want), fmt.Sprintf("conflist subnets %q, want %q", got, want)
		}
	}
	ready := func() (bool, string) {
		code, body := readyz()
		return code == 200, fmt.Sprintf("/readyz %d %q", code, body)
	}
	// The agent's confirmation that the conflist's ranges are the Node's
	// (what ovs-bridge serves ADD and STATUS on): the ranges, or none.
	confirmed := func(want ...string) func() (bool, string) {
		return func() (bool, string) {
			b, err := os.ReadFile(confirm)
			if len(want) == 0 {
				return os.IsNotExist(err), fmt.Sprintf("%s: %q, %v: want none", confirm, b, err)
			}
			slices.Sort(want)
			return err == nil && string(b) == strings.Join(want, "\n")+"\n", fmt.Sprintf("%s: %q, %v: want %q", confirm, b, err, want)
		}
	}
	if ok, why := confirmed()(); !ok {
		t.Errorf("without the Node: %s", why)
	}
	node(t, cs, self, []string{"192.0.2.128/26", "2001:db8:c2::/64"}, "203.0.113.10", "2001:db8:15::10")
	eventually(t, "the conflist carries the Node's podCIDRs", subnets("192.0.2.128/26", "2001:db8:c2::/64"))
	eventually(t, "the agent confirms them", confirmed("192.0.2.128/26", "2001:db8:c2::/64"))
	eventually(t, "/readyz once the conflist is in place and reconcile passed", ready)
	// The other Nodes are routed in the agent's own table; the real node
	// is not, its InternalIP being this (pretended) node's too.
	node(t, cs, "okube-peer-c", []string{"192.0.2.192/27"}, "203.0.113.34")
	eventually(t, "another Node's pod range in the agent's table", routesAre(t, table, "192.0.2.192/27 via 203.0.113.34 dev br0 onlink"))

	deleteNode(t, cs, self)
	eventually(t, "/readyz with the Node gone", notReady(`[-]conflist: no Node "`+self+`"`))
	eventually(t, "the confirmation withdrawn with the Node gone", confirmed())
	node(t, cs, self, []string{"192.0.2.160/27"}, "203.0.113.10")
	eventually(t, "the conflist follows the new podCIDRs", subnets("192.0.2.160/27"))
	eventually(t, "the agent confirms the new ones", confirmed("192.0.2.160/27"))
	eventually(t, "/readyz again", ready)
	b, _ := os.ReadFile(conflist)
	if strings.Contains(string(b), `"::/0"`) {
		t.Errorf("an IPv4-only node's conflist keeps the IPv6 default route: %s", b)
	}
}
