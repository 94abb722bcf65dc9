package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// The DaemonSet of deploy/ovsflow-cni.yaml and its agent container.
const (
	dsNamespace = "kube-system"
	dsName      = "ovsflow-cni"
	dsContainer = "agent"
)

// suiteStateScript prints, per section ("== NAME"), what the suite keeps on
// a node for its attachments: the flows of the suite's cookie tag, the Port
// and Interface rows it owns, the routes of the agent's protocol (157) and
// the nft tables of the host ports; sorted, with no counters. A deleted
// port's tombstone (its drop flow with hard_timeout, which expires by
// itself 10 s after a DEL) is no attachment's state: left out.
const suiteStateScript = `echo "== flows"
ovs-ofctl --no-stats dump-flows br0 | sed 's/^ *//' | grep -E '^cookie=0x0?fc50' | grep -v 'hard_timeout=' | sort
echo "== records"
for t in Port Interface; do
	ovs-vsctl --format=csv --no-headings --columns=name,external_ids find $t external_ids:ovsflow.io/owner=ovsflow-cni | sed "s/^/$t /" | sort
done
echo "== routes"
{ ip -4 route show table all proto 157; ip -6 route show table all proto 157; } | sort
echo "== nft"
for f in ip ip6; do nft list table $f ovsflow_hostport 2>/dev/null | sed "s/^/$f /"; done
`

// nodeState: section -> lines, as suiteStateScript (or oid-snapshot) prints them.
type nodeState map[string][]string

func parseState(out string) nodeState {
	st := nodeState{}
	sec := ""
	for _, l := range strings.Split(out, "\n") {
		if name, ok := strings.CutPrefix(l, "== "); ok {
			sec = name
			st[sec] = st[sec][:0:0]
			continue
		}
		if sec != "" && strings.TrimSpace(l) != "" {
			st[sec] = append(st[sec], l)
		}
	}
	return st
}

func suiteState(t *testing.T, ctx context.Context, nodeName string) nodeState {
	t.Helper()
	out, err := onNode(ctx, nodeName, suiteStateScript)
	if err != nil {
		t.Fatalf("reading the suite's state on %s: %v", nodeName, err)
	}
	return parseState(out)
}

// diffLines: the lines only in a ("-") and only in b ("+").
func diffLines(a, b []string) []string {
	count := map[string]int{}
	for _, l := range a {
		count[l]--
	}
	for _, l := range b {
		count[l]++
	}
	var out []string
	for l, n := range count {
		for ; n < 0; n++ {
			out = append(out, "- "+l)
		}
		for ; n > 0; n-- {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return out
}

// duplicates: the lines found more than once (a key: the whole line).
func duplicates(lines []string) []string {
	seen := map[string]int{}
	var out []string
	for _, l := range lines {
		if seen[l]++; seen[l] == 2 {
			out = append(out, l)
		}
	}
	return out
}

// routeDuplicates: routes of the same destination (and table) more than once.
func routeDuplicates(lines []string) []string {
	var keys []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		key := f[0]
		for i := range f {
			if f[i] == "table" && i+1 < len(f) {
				key += " table " + f[i+1]
			}
		}
		keys = append(keys, key)
	}
	return duplicates(keys)
}

// localAddress: whether addr is an address of this host too (the harness's
// network may overlap this host's own: then the node is not reachable there from here).
func localAddress(addr string) bool {
	as, _ := net.InterfaceAddrs()
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(net.ParseIP(addr)) {
			return true
		}
	}
	return false
}

// agentImage: the DaemonSet's agent image.
func agentImage(ds *appsv1.DaemonSet) string {
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == dsContainer {
			return c.Image
		}
	}
	return ""
}

// setAgentImage sets the DaemonSet's agent image and waits until the rollout
// is done: every node runs an available pod of the new template.
func setAgentImage(t *testing.T, ctx context.Context, image string) {
	t.Helper()
	setAgent(t, ctx, "image "+image, func(c *corev1.Container) { c.Image = image })
}

// setAgent changes the DaemonSet's agent container by change (what names
// the change) and waits until the rollout is done.
func setAgent(t *testing.T, ctx context.Context, what string, change func(*corev1.Container)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := kube.AppsV1().DaemonSets(dsNamespace).Get(ctx, dsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range ds.Spec.Template.Spec.Containers {
			if ds.Spec.Template.Spec.Containers[i].Name == dsContainer {
				change(&ds.Spec.Template.Spec.Containers[i])
			}
		}
		_, err = kube.AppsV1().DaemonSets(dsNamespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("setting the DaemonSet's agent's %s: %v", what, err)
	}
	waitRolledOut(t, ctx)
}

// waitRolledOut waits as `kubectl rollout status daemonset` does.
func waitRolledOut(t *testing.T, ctx context.Context) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := kube.AppsV1().DaemonSets(dsNamespace).Get(ctx, dsName, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		s := ds.Status
		last = fmt.Sprintf("generation %d observed %d, desired %d updated %d available %d", ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberAvailable)
		return s.ObservedGeneration >= ds.Generation && s.DesiredNumberScheduled > 0 &&
			s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled &&
			s.NumberUnavailable == 0, nil
	})
	if err != nil {
		t.Fatalf("DaemonSet %s/%s not rolled out: %s: %v", dsNamespace, dsName, last, err)
	}
}

// udpStream is one UDP flow from this host to a host port: a datagram with
// a sequence number, then its answer awaited (up to a second) before the
// next one, every interval. One socket: one conntrack entry, established
// by the first answer.
type udpStream struct {
	addr     string
	interval time.Duration
	got      []bool // by sequence number: answered
	err      error
}

func (s *udpStream) run(stop <-chan struct{}) {
	c, err := net.Dial("udp", s.addr)
	if err != nil {
		s.err = err
		return
	}
	defer c.Close()
	buf := make([]byte, 512)
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return
		default:
		}
		answered := false
		if _, err := fmt.Fprintf(c, "seq %d\n", seq); err == nil {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			if n, err := c.Read(buf); err == nil && strings.HasPrefix(string(buf[:n]), "hello from ") {
				answered = true
			}
		}
		s.got = append(s.got, answered)
		<-tick.C
	}
}

// lost: the datagrams never answered, and the longest run of them (by sequence number).
func (s *udpStream) lost() (lost, longest int) {
	run := 0
	for _, ok := range s.got {
		if ok {
			run = 0
			continue
		}
		lost++
		if run++; run > longest {
			longest = run
		}
	}
	return lost, longest
}

// tcpProber opens a new TCP connection to a host port every interval and
// reads the app's line (each connection is new: the app closes it after
// its line).
type tcpProber struct {
	addr     string
	interval time.Duration
	ok       []bool
}

func (p *tcpProber) run(stop <-chan struct{}) {
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		default:
		}
		good := false
		if c, err := net.DialTimeout("tcp", p.addr, 2*time.Second); err == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 256)
			n, _ := c.Read(buf)
			good = strings.HasPrefix(string(buf[:n]), "hello from ")
			c.Close()
		}
		p.ok = append(p.ok, good)
		<-tick.C
	}
}

func (p *tcpProber) failed() (failed, longest int) {
	s := udpStream{got: p.ok}
	return s.lost()
}

// TestDaemonSetUpgradeKeepsHostPorts: a hostPort pod on every node, each
// reached from this host on both node addresses by a UDP flow of numbered
// datagrams (one every 20 ms) and by a new TCP connection every 100 ms
// (with nodes on two subnets, also from a pod to a pod of the other
// subnet, both families, through the tunnel); the DaemonSet is rolled to another image of
// the same tree (hack/ovs-in-docker.sh image: another tag, another version
// stamped into the agent and the plugins it installs). Every datagram is
// answered and every connection served (no datapath state changes: the
// flows live in ovs-vswitchd, the host ports in nft, the routes in the
// kernel); the suite's flows, records, routes and nft tables of every node
// are what they were, none duplicated; the plugins on the nodes are the new
// build's. Prints the longest gap as a FIGURE line. The DaemonSet is rolled
// back at the end.
func TestDaemonSetUpgradeKeepsHostPorts(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	const hp = 18120
	for _, nd := range nodes {
		createPods(t, ctx, ns, appPod("up-"+nd.Name, nd.Name, map[string]string{"role": "upgrade"}, hostPorts(hp, "")...))
	}
	waitPodsReady(t, ctx, ns, "role=upgrade", len(nodes))
	// Nodes on two subnets: a client pod and a server pod on either side
	// of the tunnel.
	var tunClient, tunServer *corev1.Pod
	var tunNetns string
	var tunnelFams []int
	if os.Getenv("OVSFLOW_CLUSTER_SUBNETS") == "2" {
		a, b, _ := acrossSubnets(t, nodesBySubnet(t, ctx))
		createPods(t, ctx, ns,
			appPod("tun-client", a.Name, map[string]string{"role": "tun-client"}),
			appPod("tun-server", b.Name, map[string]string{"role": "tun-server"}))
		tunClient = &waitPodsReady(t, ctx, ns, "role=tun-client", 1)[0]
		tunServer = &waitPodsReady(t, ctx, ns, "role=tun-server", 1)[0]
		tunNetns, tunnelFams = podNetns(t, ctx, tunClient), []int{4, 6}
	}

	ds, err := kube.AppsV1().DaemonSets(dsNamespace).Get(ctx, dsName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the DaemonSet: %v", err)
	}
	oldImage := agentImage(ds)
	const tag = "v0.1.1-upgrade"
	out, err := runHarness(ctx, "image", tag)
	if err != nil {
		t.Fatalf("building the second image: %v", err)
	}
	newImage := ""
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "IMAGE="); ok {
			newImage = v
		}
	}
	if newImage == "" || newImage == oldImage {
		t.Fatalf("second image %q (the DaemonSet runs %q): %s", newImage, oldImage, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		setAgentImage(t, ctx, oldImage)
	})

	before := map[string]nodeState{}
	for _, nd := range nodes {
		before[nd.Name] = suiteState(t, ctx, nd.Name)
		if len(before[nd.Name]["flows"]) == 0 || len(before[nd.Name]["records"]) == 0 {
			t.Fatalf("node %s: no flows or records of the pod before the upgrade: %v", nd.Name, before[nd.Name])
		}
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	udp := map[string]*udpStream{}
	tcp := map[string]*tcpProber{}
	var targets []string // node/address
	for _, nd := range nodes {
		for _, a := range []string{nd.IPv4, nd.IPv6} {
			if localAddress(a) {
				t.Logf("node %s: %s is also an address of this host: not reached from here", nd.Name, a)
				continue
			}
			key := nd.Name + "/" + a
			targets = append(targets, key)
			addr := net.JoinHostPort(a, fmt.Sprint(hp))
			udp[key] = &udpStream{addr: addr, interval: 20 * time.Millisecond}
			tcp[key] = &tcpProber{addr: addr, interval: 100 * time.Millisecond}
			wg.Add(2)
			go func(s *udpStream) { defer wg.Done(); s.run(stop) }(udp[key])
			go func(p *tcpProber) { defer wg.Done(); p.run(stop) }(tcp[key])
		}
	}
	// With nodes on two subnets, the same from a pod to a pod of a node on
	// the other subnet, through the tunnel (the client's side in its pod's
	// netns).
	for _, fam := range tunnelFams {
		dst := podIP(t, tunServer, fam)
		key := "tunnel " + tunClient.Name + "@" + tunClient.Spec.NodeName + " -> " + tunServer.Name + "@" + tunServer.Spec.NodeName + "/" + dst
		targets = append(targets, key)
		udp[key] = &udpStream{addr: net.JoinHostPort(dst, "53"), interval: 20 * time.Millisecond}
		tcp[key] = &tcpProber{addr: net.JoinHostPort(dst, "80"), interval: 100 * time.Millisecond}
		wg.Add(2)
		go func(s *udpStream) {
			defer wg.Done()
			if err := inNetns(tunNetns, func() error { s.run(stop); return nil }); err != nil {
				s.err = err
			}
		}(udp[key])
		go func(p *tcpProber) {
			defer wg.Done()
			if err := inNetns(tunNetns, func() error { p.run(stop); return nil }); err != nil {
				p.ok = append(p.ok, false)
			}
		}(tcp[key])
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	time.Sleep(2 * time.Second) // time is the subject: 2 s of traffic before the rollout (the flow established)
	setAgentImage(t, ctx, newImage)
	time.Sleep(3 * time.Second) // time is the subject: 3 s of it after the rollout
	halt()

	for _, key := range targets {
		s, p := udp[key], tcp[key]
		if s.err != nil {
			t.Fatalf("UDP to %s: %v", s.addr, s.err)
		}
		lost, gap := s.lost()
		failed, tgap := p.failed()
		fmt.Printf("FIGURE daemonset-upgrade to=%s udp-sent=%d udp-lost=%d udp-longest-gap=%d datagrams (%v each) tcp-connections=%d tcp-failed=%d tcp-longest-gap=%d connections (%v each)\n",
			s.addr, len(s.got), lost, gap, s.interval, len(p.ok), failed, tgap, p.interval)
		if len(s.got) == 0 || !s.got[0] {
			t.Errorf("%s: the first datagram was not answered: the flow was never established", s.addr)
		}
		if lost != 0 {
			t.Errorf("%s: %d of %d datagrams of an established UDP flow lost across the upgrade (longest gap %d), want 0", s.addr, lost, len(s.got), gap)
		}
		if failed != 0 {
			t.Errorf("%s: %d of %d new TCP connections to the host port failed across the upgrade (longest run %d), want 0", s.addr, failed, len(p.ok), tgap)
		}
	}

	for _, nd := range nodes {
		after := suiteState(t, ctx, nd.Name)
		for _, sec := range []string{"flows", "records", "routes", "nft"} {
			if d := diffLines(before[nd.Name][sec], after[sec]); d != nil {
				t.Errorf("node %s: the suite's %s changed across the upgrade:\n%s", nd.Name, sec, strings.Join(d, "\n"))
			}
		}
		for _, sec := range []string{"flows", "records", "routes"} { // one a line (nft's are a ruleset's lines)
			if d := duplicates(after[sec]); d != nil {
				t.Errorf("node %s: %s duplicated: %v", nd.Name, sec, d)
			}
		}
		if d := routeDuplicates(after["routes"]); d != nil {
			t.Errorf("node %s: more than one route to %v", nd.Name, d)
		}
		if len(after["routes"]) != len(nodes)*2-2 {
			t.Errorf("node %s: %d routes of protocol 157, want %d (both families to every other node):\n%s", nd.Name, len(after["routes"]), len(nodes)*2-2, strings.Join(after["routes"], "\n"))
		}
		// The plugins on the node are the new build's (skel prints the about string without CNI_COMMAND).
		got, err := onNode(ctx, nd.Name, "/opt/cni/bin/ovs-bridge 2>&1; /opt/cni/bin/ovs-portmap 2>&1; true")
		if err != nil || strings.Count(got, tag) != 2 {
			t.Errorf("node %s: the installed plugins after the upgrade say %q, want version %s: %v", nd.Name, got, tag, err)
		}
	}
}

// runtimeNetworkReady: the NetworkReady condition of the node's container
// runtime, as kubelet reads it (the CRI Status call; crictl info makes the
// same call): "true" or "false", and its message.
func runtimeNetworkReady(ctx context.Context, nodeName string) (string, string, error) {
	out, err := onNode(ctx, nodeName, `crictl info -o go-template --template '{{range .status.conditions}}{{if eq .type "NetworkReady"}}{{.status}} {{.message}}{{end}}{{end}}'`)
	if err != nil {
		return "", "", err
	}
	status, msg, _ := strings.Cut(strings.TrimSpace(out), " ")
	return status, msg, nil
}

// TestStatusReadyOnlyOnceBridgeServed: containerd 2.x calls the conflist's
// STATUS (cniVersions has 1.1.0) on every CRI Status call, which kubelet
// makes every 5 s. With ovs-vswitchd of a node stopped (OVSDB still
// answers and still has br0's row), the runtime's NetworkReady is false
// with ovs-bridge's reason, and kubelet says the runtime network is not
// ready; with ovs-vswitchd started again it is true, the Node is Ready and
// the node's hostPort pod answers. (On this harness the node's only link is
// br0, so the Node object cannot be updated while ovs-vswitchd is down:
// kubelet's own view is what is asserted then.)
func TestStatusReadyOnlyOnceBridgeServed(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	nd := nodes[len(nodes)-1]
	const hp = 18140
	createPods(t, ctx, ns, appPod("st-"+nd.Name, nd.Name, map[string]string{"role": "status"}, hostPorts(hp, "")...))
	waitPodsReady(t, ctx, ns, "role=status", 1)

	if st, msg, err := runtimeNetworkReady(ctx, nd.Name); err != nil || st != "true" {
		t.Fatalf("control: node %s: runtime NetworkReady %q %q before the stop (%v), want true", nd.Name, st, msg, err)
	}
	mark, err := onNode(ctx, nd.Name, "wc -l </var/log/oid/kubelet.log")
	if err != nil {
		t.Fatal(err)
	}
	mark = strings.TrimSpace(mark)
	// ovs-vswitchd as node-init.sh starts it.
	start := "ovs-vswitchd --pidfile=/run/openvswitch/ovs-vswitchd.pid --detach --log-file=/var/log/openvswitch/ovs-vswitchd.log -vconsole:warn"
	started := false
	t.Cleanup(func() {
		if !started {
			_, _ = onNode(context.Background(), nd.Name, start)
		}
	})
	if _, err := onNode(ctx, nd.Name, `pid=$(cat /run/openvswitch/ovs-vswitchd.pid) && kill -9 $pid && while kill -0 $pid 2>/dev/null; do sleep 0.05; done`); err != nil {
		t.Fatalf("stopping ovs-vswitchd on %s: %v", nd.Name, err)
	}
	eventually(t, ctx, time.Minute, "the runtime's NetworkReady false with ovs-vswitchd stopped", func() error {
		st, msg, err := runtimeNetworkReady(ctx, nd.Name)
		if err != nil {
			return err
		}
		if st != "false" || !strings.Contains(msg, `bridge "br0" is not served`) {
			return fmt.Errorf("NetworkReady %s %q, want false naming br0 not served", st, msg)
		}
		t.Logf("node %s, ovs-vswitchd stopped: NetworkReady=false %s", nd.Name, msg)
		return nil
	})
	eventually(t, ctx, time.Minute, "kubelet: the runtime network not ready", func() error {
		out, err := onNode(ctx, nd.Name, fmt.Sprintf(`tail -n +%s /var/log/oid/kubelet.log | grep 'Container runtime network not ready' | grep -c 'is not served'`, mark))
		if err != nil || strings.TrimSpace(out) == "0" {
			return fmt.Errorf("no line of kubelet says so yet (%v)", err)
		}
		return nil
	})
	// The Node's own Ready goes false too before ovs-vswitchd comes back:
	// kubelet posts its status only every so often, so a Ready seen after
	// the restart could otherwise be the status from before the stop, and
	// the NotReady would land after this test, on the next one.
	eventually(t, ctx, time.Minute, "the Node NotReady with ovs-vswitchd stopped", func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, nd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if nodeReady(n) {
			return fmt.Errorf("node %s still Ready", nd.Name)
		}
		return nil
	})

	if _, err := onNode(ctx, nd.Name, start); err != nil {
		t.Fatalf("starting ovs-vswitchd on %s: %v", nd.Name, err)
	}
	started = true
	eventually(t, ctx, time.Minute, "the runtime's NetworkReady true with ovs-vswitchd started again", func() error {
		st, msg, err := runtimeNetworkReady(ctx, nd.Name)
		if err != nil {
			return err
		}
		if st != "true" {
			return fmt.Errorf("NetworkReady %s %q, want true", st, msg)
		}
		return nil
	})
	eventually(t, ctx, 2*time.Minute, "the Node Ready and its hostPort pod answering", func() error {
		n, err := kube.CoreV1().Nodes().Get(ctx, nd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(n) {
			return fmt.Errorf("node %s not Ready", nd.Name)
		}
		for _, pr := range hostPortProbes(nd, hp) {
			if localAddress(pr.Addr) {
				continue
			}
			if got := fromHost(pr); !strings.HasPrefix(got, "hello from st-"+nd.Name+" to ") {
				return fmt.Errorf("%v: got %q", pr, got)
			}
		}
		return nil
	})
}

// loseDel removes a pod's sandbox behind containerd's back, so that no CNI
// DEL ever runs for it: kubelet is stopped (its supervisor paused, so that
// it is not started again yet), the sandbox removed through containerd's
// sandbox API (its controller stops the pause container and forgets the
// sandbox; the CRI plugin's teardown, where DEL is called, is not on that
// path), containerd restarted (its CRI plugin recovers the sandboxes it
// still has), kubelet let start again.
func loseDel(t *testing.T, ctx context.Context, nodeName, sandbox string) {
	t.Helper()
	script := fmt.Sprintf(`set -eo pipefail
kp=$(pgrep -x kubelet); sup=$(ps -o ppid= -p $kp | tr -d ' ')
kill -STOP $sup
trap 'kill -CONT $sup' EXIT
kill $kp
# (the paused supervisor does not reap it: gone or a zombie)
while [ -n "$(ps -o stat= -p $kp | grep -v Z)" ]; do sleep 0.1; done
/opt/ovsflow-kube/bin/ctr -n k8s.io sandboxes rm -f %s 2>&1 | { grep -v DEPRECATION || true; }
cp=$(pgrep -x containerd); kill $cp
while kill -0 $cp 2>/dev/null; do sleep 0.1; done
for i in $(seq 300); do crictl info >/dev/null 2>&1 && break; sleep 0.2; done
crictl info >/dev/null
echo "sandboxes after the restart: $(crictl pods -q | tr '\n' ' ')"`, sandbox)
	out, err := onNode(ctx, nodeName, script)
	if err != nil {
		t.Fatalf("losing the DEL of sandbox %s on %s: %v", sandbox, nodeName, err)
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// dropNetns destroys the netns of a sandbox whose DEL was lost, as a
// reboot of the node would: containerd pinned it under its state dir and,
// its teardown never run, still does, and the pod's app container may
// still run in it. Its veth goes with it.
func dropNetns(t *testing.T, ctx context.Context, nodeName, sandbox string) {
	t.Helper()
	script := fmt.Sprintf(`set -eo pipefail
port=$(ovs-vsctl --bare --columns=name find Port external_ids:ovsflow.io/container-id=%s)
netns=$(ovs-vsctl get Port "$port" external_ids:ovsflow.io/netns | tr -d '"')
# What still runs in it (the pod's app container: the sandbox went, not
# its task) goes too, as in a reboot.
ino=$(stat -L -c %%i "$netns")
for p in /proc/[0-9]*; do
	[ "$(stat -L -c %%i $p/ns/net 2>/dev/null)" = "$ino" ] && kill -9 ${p#/proc/} 2>/dev/null || true
done
umount "$netns"; rm -f "$netns"
for i in $(seq 200); do ip link show "$port" >/dev/null 2>&1 || break; sleep 0.1; done
if ip link show "$port" >/dev/null 2>&1; then echo "veth $port still there"; exit 1; fi
echo "netns $netns destroyed, veth $port gone"`, sandbox)
	out, err := onNode(ctx, nodeName, script)
	if err != nil {
		t.Fatalf("destroying the netns of sandbox %s on %s: %v: %s", sandbox[:12], nodeName, err, out)
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// TestLostDelReplayed: containerd 2.4 never calls CNI GC (its CRI plugin
// calls go-cni, whose CNI interface has no GC: containerd v2.4.2's go.mod
// pins github.com/containerd/go-cni v1.1.14, whose cni.go declares Setup,
// SetupSerially, Remove, Check, Load, Status, GetConfig; nothing in
// containerd calls libcni's GCNetworkList, not at start, not on a timer).
// So a DEL lost behind containerd's back (loseDel: the sandbox removed
// while kubelet and containerd are down) is never run by the runtime. Once
// the sandbox's netns is gone (dropNetns, as a reboot would), the node
// agent replays it (pkg/orphan): the attachment's host veth went with the
// netns, so two of its passes (30 s apart) see it
// orphaned and it runs the conflist's DEL for exactly that attachment. The
// lost attachment goes and nothing else; the pod's next sandbox gets the
// host port and answers, without any GC.
func TestLostDelReplayed(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nodes := readyNodes(t, ctx, 2)
	ns := namespace(t, ctx)
	nd := nodes[len(nodes)-1]
	const hp = 18155
	createPods(t, ctx, ns, appPod("lost", nd.Name, map[string]string{"role": "lost"}, hostPorts(hp, "")...),
		appPod("keep", nd.Name, map[string]string{"role": "keep"}))
	pods := waitPodsReady(t, ctx, ns, "role=lost", 1)
	keepPod := waitPodsReady(t, ctx, ns, "role=keep", 1)[0]
	lost := sandboxID(t, ctx, &pods[0])
	keep := sandboxID(t, ctx, &keepPod)

	loseDel(t, ctx, nd.Name, lost)
	if r := readRecord(t, ctx, nd.Name); r.Sandboxes[lost] || r.attached(lost) != 1 {
		t.Fatalf("sandbox %s still known to containerd (%v), or its attachment already gone (ports %v): the DEL was not lost",
			lost[:12], r.Sandboxes[lost], r.Ports)
	}
	dropNetns(t, ctx, nd.Name, lost)

	eventually(t, ctx, 3*time.Minute, "the lost attachment removed by the agent, the pod back with its host port", func() error {
		r := readRecord(t, ctx, nd.Name)
		if r.attached(lost) != 0 {
			return fmt.Errorf("the lost attachment's port is still there")
		}
		if r.attached(keep) != 1 {
			return fmt.Errorf("the live attachment of pod keep is gone")
		}
		if bad := r.stale(); bad != nil {
			return fmt.Errorf("stale: %v", bad)
		}
		p, err := kube.CoreV1().Pods(ns).Get(ctx, "lost", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !podReady(p) {
			return fmt.Errorf("pod lost not Ready again (kubelet's back-off)")
		}
		for _, pr := range hostPortProbes(nd, hp) {
			if localAddress(pr.Addr) {
				continue
			}
			if got := fromHost(pr); !strings.HasPrefix(got, "hello from lost to ") {
				return fmt.Errorf("%v: got %q", pr, got)
			}
		}
		return nil
	})
	// It was the agent's DEL (not the runtime's, which was lost): its log
	// names the lost attachment once, and never the live one.
	agents, err := kube.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=" + dsName, FieldSelector: "spec.nodeName=" + nd.Name})
	if err != nil || len(agents.Items) != 1 {
		t.Fatalf("the agent pod of %s: %d pods, %v", nd.Name, len(agents.Items), err)
	}
	b, err := kube.CoreV1().Pods(dsNamespace).GetLogs(agents.Items[0].Name, &corev1.PodLogOptions{Container: dsContainer}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("the agent's log: %v", err)
	}
	var replayed []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "orphans: DEL of ") {
			replayed = append(replayed, l)
		}
	}
	t.Logf("agent on %s:\n%s", nd.Name, strings.Join(replayed, "\n"))
	// (Earlier tests may have left the agent's log lines of their own.)
	var ofLost int
	for _, l := range replayed {
		if strings.Contains(l, "DEL of "+keep+"/") {
			t.Errorf("the agent replayed the DEL of the live pod keep: %s", l)
		}
		if strings.Contains(l, "DEL of "+lost+"/eth0 replayed") {
			ofLost++
		}
	}
	if ofLost != 1 {
		t.Errorf("agent's replayed DELs %q: %d of %s/eth0, want 1", replayed, ofLost, lost)
	}
}
