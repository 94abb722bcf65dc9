package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// attachScript prints what the plugins hold on a node for its pods, one
// kind a line: host-local's allocations of the network "ovsflow" ("ipam
// FILE SANDBOX"), the suite's Port rows ("port SANDBOX"), the host veths
// ("veth NAME"); then the suite's flows and the host-port nft tables, as text.
const attachScript = `for f in /var/lib/cni/networks/ovsflow/*; do [ -f "$f" ] && echo "ipam ${f##*/} $(head -1 "$f" | tr -d '\r')"; done
ovs-vsctl --bare --columns=external_ids find Port external_ids:ovsflow.io/owner=ovsflow-cni | grep -o 'ovsflow.io/container-id=[0-9a-f]*' | sed 's/.*=/port /'
ip -o link show type veth | grep -o 'ovf[0-9a-f]*' | sed 's/^/veth /'
echo "== text"
ovs-ofctl --no-stats dump-flows br0 | grep -E 'cookie=0x0?fc50'
for f in ip ip6; do nft list table $f ovsflow_hostport 2>/dev/null; done
true
`

// attachState: what the plugins hold on one node (attachScript), and the
// node's pod CIDRs, to tell pod addresses in the text from others.
type attachState struct {
	IPAM  map[string]string // allocated address -> sandbox
	Ports map[string]bool   // sandboxes with a Port row of the suite
	Veths map[string]bool   // host veths of the plugins (ovf...)
	Text  string            // the suite's flows and nft tables
	cidrs []netip.Prefix
}

func readAttach(ctx context.Context, nd node) (attachState, error) {
	out, err := onNode(ctx, nd.Name, attachScript)
	if err != nil {
		return attachState{}, err
	}
	s := attachState{IPAM: map[string]string{}, Ports: map[string]bool{}, Veths: map[string]bool{}}
	head, text, _ := strings.Cut(out, "== text\n")
	s.Text = text
	for _, l := range strings.Split(head, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "ipam":
			if _, err := netip.ParseAddr(f[1]); err == nil { // not last_reserved_ip.0, lock
				s.IPAM[f[1]] = f[2]
			}
		case len(f) == 2 && f[0] == "port":
			s.Ports[f[1]] = true
		case len(f) == 2 && f[0] == "veth":
			s.Veths[f[1]] = true
		}
	}
	for _, c := range nd.PodCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return s, fmt.Errorf("node %s: pod CIDR %q: %w", nd.Name, c, err)
		}
		s.cidrs = append(s.cidrs, p.Masked())
	}
	return s, nil
}

// hostVeth: the host veth of a sandbox's eth0 (pkg/link.HostVethName).
func hostVeth(sandbox string) string {
	sum := sha256.Sum256([]byte(sandbox + "/eth0"))
	return "ovf" + hex.EncodeToString(sum[:6])
}

// textAddrs: the pod addresses the flows and nft tables name: addresses in
// the node's pod CIDRs other than each CIDR's own address and its gateway (the first).
func (s attachState) textAddrs() map[string]bool {
	out := map[string]bool{}
	tokens := strings.FieldsFunc(s.Text, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f' || r >= 'A' && r <= 'F' || r == '.' || r == ':')
	})
	for _, tok := range tokens {
		a, err := netip.ParseAddr(tok)
		if err != nil {
			continue
		}
		for _, c := range s.cidrs {
			if c.Contains(a) && a != c.Addr() && a != c.Addr().Next() {
				out[a.String()] = true
			}
		}
	}
	return out
}

// holds: where on the node anything of a gone pod (its sandbox, its addresses) is still found.
func (s attachState) holds(sandbox string, addrs []string) []string {
	var bad []string
	for a, sb := range s.IPAM {
		if sb == sandbox {
			bad = append(bad, "an IP allocation ("+a+") of sandbox "+sandbox[:12])
		}
	}
	if s.Ports[sandbox] {
		bad = append(bad, "the Port row of sandbox "+sandbox[:12])
	}
	if v := hostVeth(sandbox); s.Veths[v] {
		bad = append(bad, "its veth "+v)
	}
	text := s.textAddrs()
	for _, a := range addrs {
		if _, ok := s.IPAM[a]; ok {
			bad = append(bad, "the IP allocation of "+a)
		}
		if text[a] {
			bad = append(bad, "a flow or nft element of "+a)
		}
	}
	sort.Strings(bad)
	return bad
}

// runningPodAddrs: the addresses of the pods on a node that are running
// (not host network, not finished, not being deleted).
func runningPodAddrs(ctx context.Context, nodeName string) (map[string]bool, error) {
	list, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, p := range list.Items {
		if p.Spec.HostNetwork || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				out[a.String()] = true
			}
		}
	}
	return out, nil
}

// consistent: every attachment on the node belongs to a running pod: the IP
// allocations are the running pods' addresses, each allocation's sandbox has
// a Port row and each Port row an allocation, the veths are those of the
// attachments, and every pod address in a flow or nft element is a running pod's.
func consistent(ctx context.Context, nd node) error {
	s, err := readAttach(ctx, nd)
	if err != nil {
		return err
	}
	want, err := runningPodAddrs(ctx, nd.Name)
	if err != nil {
		return err
	}
	var bad []string
	sandboxes := map[string]bool{}
	for a, sb := range s.IPAM {
		sandboxes[sb] = true
		if !want[a] {
			bad = append(bad, "allocation of "+a+" (sandbox "+sb[:12]+"): no running pod has it")
		}
	}
	for a := range want {
		if _, ok := s.IPAM[a]; !ok {
			bad = append(bad, "running pod address "+a+": no allocation")
		}
	}
	veths := map[string]bool{}
	for sb := range sandboxes {
		if !s.Ports[sb] {
			bad = append(bad, "sandbox "+sb[:12]+" has allocations, no Port row")
		}
		veths[hostVeth(sb)] = true
	}
	for sb := range s.Ports {
		if !sandboxes[sb] {
			bad = append(bad, "Port row of sandbox "+sb[:12]+", no allocation")
		}
	}
	for v := range s.Veths {
		if !veths[v] {
			bad = append(bad, "veth "+v+" of no attachment")
		}
	}
	for v := range veths {
		if !s.Veths[v] {
			bad = append(bad, "no veth "+v)
		}
	}
	for a := range s.textAddrs() {
		if !want[a] {
			bad = append(bad, "a flow or nft element of "+a+": no running pod has it")
		}
	}
	if bad != nil {
		sort.Strings(bad)
		return fmt.Errorf("node %s: %s", nd.Name, strings.Join(bad, "; "))
	}
	return nil
}

// waitConsistent waits until consistent holds on the node.
func waitConsistent(t *testing.T, ctx context.Context, nd node, when string) {
	t.Helper()
	eventually(t, ctx, time.Minute, when+": every attachment on "+nd.Name+" belongs to a running pod", func() error {
		return consistent(ctx, nd)
	})
}

// waitGone waits until nothing of a gone pod (its sandbox, its addresses) is left on the node.
func waitGone(t *testing.T, ctx context.Context, nd node, what, sandbox string, addrs []string) {
	t.Helper()
	eventually(t, ctx, time.Minute, what+": nothing of it left on "+nd.Name+" (allocations, Port row, veth, flows, nft)", func() error {
		s, err := readAttach(ctx, nd)
		if err != nil {
			return err
		}
		if bad := s.holds(sandbox, addrs); bad != nil {
			return fmt.Errorf("still there: %s", strings.Join(bad, "; "))
		}
		return nil
	})
}

// mustHold: the control of waitGone: a running pod's attachment is found
// where waitGone looks (an allocation and a flow of each address, its Port row, its veth).
func mustHold(t *testing.T, ctx context.Context, nd node, what, sandbox string, addrs []string) {
	t.Helper()
	s, err := readAttach(ctx, nd)
	if err != nil {
		t.Fatal(err)
	}
	got := s.holds(sandbox, addrs)
	if want := 3*len(addrs) + 2; len(addrs) != 2 || len(got) != want {
		t.Fatalf("%s, running: found %q on %s, want its allocations, Port row, veth, and a flow of each of %v", what, got, nd.Name, addrs)
	}
}

func podAddrs(p *corev1.Pod) []string {
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	return out
}

// pinned is a Deployment of one app pod (Recreate) that the scheduler may
// place only on nodeName (a required node affinity, so that a cordon holds it off).
func pinned(name, nodeName string, ports ...corev1.ContainerPort) *appsv1.Deployment {
	one := int32(1)
	labels := map[string]string{"app": name}
	spec := appPodSpec("", 1, ports...)
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}},
		}}},
	}}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

// hostPortAnswers: the host port hp of node nd answers from this host (TCP
// and UDP, both families) with the app of pod name, which sees this host's address.
func hostPortAnswers(nd node, hp int, name string) error {
	for _, pr := range hostPortProbes(nd, hp) {
		if localAddress(pr.Addr) {
			continue
		}
		if got := fromHost(pr); !strings.HasPrefix(got, "hello from "+name+" to ") {
			return fmt.Errorf("%v: got %q, want hello from %s", pr, got, name)
		}
	}
	return nil
}

// TestHostPortFromPodOnSameNode: a pod reaches a host port published on its
// own node's addresses (IPv4 and IPv6, TCP and UDP), and the app sees the
// caller's pod address (no SNAT on the node's own bridge either).
func TestHostPortFromPodOnSameNode(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	ns := namespace(t, ctx)
	const hp = 18160
	createPods(t, ctx, ns, appPod("server", nd.Name, map[string]string{"role": "server"}, hostPorts(hp, "")...),
		appPod("client", nd.Name, map[string]string{"role": "client"}))
	waitPodsReady(t, ctx, ns, "role=server", 1)
	c := waitPodsReady(t, ctx, ns, "role=client", 1)[0]
	ps := hostPortProbes(nd, hp)
	out, err := inPod(ctx, &c, probeScript(ps))
	if err != nil {
		t.Fatal(err)
	}
	got := answers(out)
	for _, pr := range ps {
		fam := 4
		if strings.Contains(pr.Addr, ":") {
			fam = 6
		}
		if w := hello("server", podIP(t, &c, fam)); !strings.HasPrefix(got[pr], w) {
			t.Errorf("from pod client on the same node %v: got %q, want %q...", pr, got[pr], w)
		}
	}
}

// TestPodDeleteLeavesNothingOnNode: a Deployment's pod publishing a host
// port and a bare pod publishing another, on one node. kubectl delete of the
// Deployment's pod: its addresses and sandbox leave the node (IP
// allocations, Port row, veth, flows, nft elements); the Deployment's new
// pod answers on the host port; the other pod keeps answering; every
// attachment left belongs to a running pod. Both deleted: nothing of them is left.
func TestPodDeleteLeavesNothingOnNode(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	ns := namespace(t, ctx)
	const hpDep, hpBare = 18161, 18162
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, pinned("web", nd.Name, hostPorts(hpDep, "")...), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Deployment web: %v", err)
	}
	createPods(t, ctx, ns, appPod("bare", nd.Name, map[string]string{"app": "bare"}, hostPorts(hpBare, "")...))
	old := waitPodsReady(t, ctx, ns, "app=web", 1)[0]
	bare := waitPodsReady(t, ctx, ns, "app=bare", 1)[0]
	oldSandbox, bareSandbox := sandboxID(t, ctx, &old), sandboxID(t, ctx, &bare)
	eventually(t, ctx, time.Minute, "both host ports answering", func() error {
		if err := hostPortAnswers(nd, hpDep, old.Name); err != nil {
			return err
		}
		return hostPortAnswers(nd, hpBare, "bare")
	})
	waitConsistent(t, ctx, nd, "before the delete")
	mustHold(t, ctx, nd, "pod "+old.Name, oldSandbox, podAddrs(&old))

	if err := kube.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod %s: %v", old.Name, err)
	}
	waitGone(t, ctx, nd, "pod "+old.Name+" deleted", oldSandbox, podAddrs(&old))
	eventually(t, ctx, 2*time.Minute, "the Deployment's new pod answering on its host port", func() error {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Name != old.Name && podReady(&p) {
				return hostPortAnswers(nd, hpDep, p.Name)
			}
		}
		return fmt.Errorf("no new pod Ready")
	})
	if err := hostPortAnswers(nd, hpBare, "bare"); err != nil {
		t.Errorf("the other pod, after the delete: %v", err)
	}
	waitConsistent(t, ctx, nd, "after the delete")

	cur := waitPodsReady(t, ctx, ns, "app=web", 1)[0]
	curSandbox := sandboxID(t, ctx, &cur)
	if err := kube.AppsV1().Deployments(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Deployment web: %v", err)
	}
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "bare", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod bare: %v", err)
	}
	waitGone(t, ctx, nd, "pod "+cur.Name+" deleted", curSandbox, podAddrs(&cur))
	waitGone(t, ctx, nd, "pod bare deleted", bareSandbox, podAddrs(&bare))
	waitConsistent(t, ctx, nd, "after every pod deleted")
}

// TestHostPortConflictClearsWhenHolderDeleted: the refused pod of a host
// port conflict (see TestHostPortConflictRefusedWithEventNamingHolder) stays
// in ContainerCreating and its failed sandboxes leave nothing on the node;
// once the holder is deleted (its attachment gone), it starts and answers
// on the host port; with both deleted, every attachment left belongs to a running pod.
func TestHostPortConflictClearsWhenHolderDeleted(t *testing.T) {
	needCluster(t)
	ctx := testContext(t)
	nd := readyNodes(t, ctx, 2)[0]
	ns := namespace(t, ctx)
	const hp = 18163
	createPods(t, ctx, ns, appPod("holder", nd.Name, map[string]string{"role": "holder"}, hostPorts(hp, "::")...))
	holder := waitPodsReady(t, ctx, ns, "role=holder", 1)[0]
	holderSandbox := sandboxID(t, ctx, &holder)
	createPods(t, ctx, ns, appPod("second", nd.Name, map[string]string{"role": "second"}, hostPorts(hp, nd.IPv6)...))
	eventually(t, ctx, 2*time.Minute, "pod second refused: an event naming the holder's sandbox", func() error {
		evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=second,reason=FailedCreatePodSandBox"})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, "host port conflict") && strings.Contains(e.Message, holderSandbox) {
				return nil
			}
		}
		return fmt.Errorf("%d FailedCreatePodSandBox events, none naming %s", len(evs.Items), holderSandbox[:12])
	})
	p, err := kube.CoreV1().Pods(ns).Get(ctx, "second", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil ||
		p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("pod second: container statuses %+v, want waiting in ContainerCreating", p.Status.ContainerStatuses)
	}
	waitConsistent(t, ctx, nd, "pod second refused")

	if err := kube.CoreV1().Pods(ns).Delete(ctx, "holder", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod holder: %v", err)
	}
	waitGone(t, ctx, nd, "pod holder deleted", holderSandbox, podAddrs(&holder))
	eventually(t, ctx, 3*time.Minute, "pod second Ready and answering on its host port", func() error {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, "second", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !podReady(p) {
			return fmt.Errorf("pod second not Ready")
		}
		for _, pr := range []probe{{"tcp", nd.IPv6, hp}, {"udp", nd.IPv6, hp}} {
			if got := fromHost(pr); !strings.HasPrefix(got, "hello from second to ") {
				return fmt.Errorf("%v: got %q", pr, got)
			}
		}
		return nil
	})
	second := waitPodsReady(t, ctx, ns, "role=second", 1)[0]
	secondSandbox := sandboxID(t, ctx, &second)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, "second", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod second: %v", err)
	}
	waitGone(t, ctx, nd, "pod second deleted", secondSandbox, podAddrs(&second))
	waitConsistent(t, ctx, nd, "both deleted")
}
