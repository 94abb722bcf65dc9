package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Multus in front of ovsflow (`hack/ovs-in-docker.sh up -kube -multus`, what
// `test -kube` runs): the cluster default network is the agent's
// 10-ovsflow.conflist, and NetworkAttachmentDefinitions of ovs-bridge put
// further interfaces of a pod on VLANs of the nodes' br0, whose uplink
// carries them tagged to the other nodes. The secondary networks' addresses
// (198.51.100.224/27, 2001:db8:22:200::/63) live only inside the pods and
// on the nodes' bridges.

const (
	nadGroupPath     = "/apis/k8s.cni.cncf.io/v1"
	networksAnnot    = "k8s.v1.cni.cncf.io/networks"
	netStatusAnnot   = "k8s.v1.cni.cncf.io/network-status"
	vlanSecure       = 100 // port security on (the default)
	vlanOpen         = 101 // the unprotected control: portSecurity false
	secureV4, open4  = "198.51.100.240/28", "198.51.100.224/28"
	secureV6, open6  = "2001:db8:22:200::/64", "2001:db8:22:201::/64"
	secureNAD, openN = "vlan100", "vlan101-open"
)

// needMultus skips a test on a cluster without the NetworkAttachmentDefinition
// API, unless OVSFLOW_CLUSTER_MULTUS=1 (test -kube) says it must be there.
func needMultus(t *testing.T, ctx context.Context) {
	t.Helper()
	needCluster(t)
	err := kube.CoreV1().RESTClient().Get().AbsPath(nadGroupPath).Do(ctx).Error()
	if err == nil {
		return
	}
	if os.Getenv("OVSFLOW_CLUSTER_MULTUS") == "1" {
		t.Fatalf("OVSFLOW_CLUSTER_MULTUS=1 but %s does not answer: %v", nadGroupPath, err)
	}
	t.Skipf("no Multus on this cluster (%s: %v): up -kube -multus", nadGroupPath, err)
}

// exampleNAD reads the CNI config of a NetworkAttachmentDefinition in
// examples/ (its "config: |" block), so that the examples are what runs.
func exampleNAD(t *testing.T, file string) string {
	t.Helper()
	raw, err := os.ReadFile("../../examples/" + file)
	if err != nil {
		t.Fatalf("reading example: %v", err)
	}
	_, block, ok := strings.Cut(string(raw), "  config: |\n")
	if !ok {
		t.Fatalf("examples/%s: no \"  config: |\" block", file)
	}
	var b strings.Builder
	for _, line := range strings.Split(block, "\n") {
		if !strings.HasPrefix(line, "    ") && strings.TrimSpace(line) != "" {
			break
		}
		b.WriteString(strings.TrimPrefix(line, "    ") + "\n")
	}
	if !json.Valid([]byte(b.String())) {
		t.Fatalf("examples/%s: config is not JSON: %s", file, b.String())
	}
	return b.String()
}

// vlanNAD is examples/multus-nad.yaml's network (ovs-bridge on br0's VLAN
// 100, host-local with secureV4 and secureV6, the "ips" capability: host-local
// is per node, so the pods name their addresses; host-local keeps each
// range's first address as its gateway, so they start at the second),
// renamed, on VLAN vlan with the ranges v4 and v6 and portSecurity as given.
func vlanNAD(t *testing.T, name string, vlan int, v4, v6 string, portSecurity bool) string {
	t.Helper()
	var conf map[string]any
	if err := json.Unmarshal([]byte(exampleNAD(t, "multus-nad.yaml")), &conf); err != nil {
		t.Fatal(err)
	}
	conf["name"] = name
	pl := conf["plugins"].([]any)[0].(map[string]any)
	pl["vlan"], pl["portSecurity"] = vlan, portSecurity
	pl["ipam"].(map[string]any)["ranges"] = []any{[]any{map[string]string{"subnet": v4}}, []any{map[string]string{"subnet": v6}}}
	b, _ := json.Marshal(conf)
	return string(b)
}

// createNAD makes a NetworkAttachmentDefinition in ns with the CNI config.
func createNAD(t *testing.T, ctx context.Context, ns, name, config string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1",
		"kind":       "NetworkAttachmentDefinition",
		"metadata":   map[string]string{"name": name, "namespace": ns},
		"spec":       map[string]string{"config": config},
	})
	err := kube.CoreV1().RESTClient().Post().AbsPath(nadGroupPath, "namespaces", ns, "network-attachment-definitions").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating NetworkAttachmentDefinition %s/%s: %v", ns, name, err)
	}
}

// attachment is one element of a pod's networks annotation.
type attachment struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips,omitempty"`
}

// multusPod: the app on nodeName with the secondary networks of atts.
func multusPod(name, nodeName string, atts []attachment, ports ...corev1.ContainerPort) *corev1.Pod {
	p := appPod(name, nodeName, map[string]string{"role": name}, ports...)
	b, _ := json.Marshal(atts)
	p.Annotations = map[string]string{networksAnnot: string(b)}
	return p
}

// addr: the host number i of a CIDR of each family ("198.51.100.240/28", 3 -> "198.51.100.243").
func addr(cidr string, i int) string {
	base := strings.Split(cidr, "/")[0]
	if strings.Contains(base, ":") {
		return strings.TrimSuffix(base, "::") + "::" + strconv.FormatInt(int64(i), 16)
	}
	oct := strings.Split(base, ".")
	last, _ := strconv.Atoi(oct[3])
	return fmt.Sprintf("%s.%s.%s.%d", oct[0], oct[1], oct[2], last+i)
}

func withLen(ip, cidr string) string { return ip + "/" + strings.Split(cidr, "/")[1] }

// networkStatus reads the pod's network-status annotation (Multus writes it):
// interface -> its addresses.
func networkStatus(t *testing.T, p *corev1.Pod) map[string][]string {
	t.Helper()
	var sts []struct {
		Name      string   `json:"name"`
		Interface string   `json:"interface"`
		IPs       []string `json:"ips"`
		Default   bool     `json:"default"`
	}
	raw := p.Annotations[netStatusAnnot]
	if err := json.Unmarshal([]byte(raw), &sts); err != nil {
		t.Fatalf("pod %s: annotation %s %q: %v", p.Name, netStatusAnnot, raw, err)
	}
	out := map[string][]string{}
	for _, s := range sts {
		out[s.Interface] = s.IPs
	}
	return out
}

// ovsPort is a Port row of br0 that ovs-bridge tagged as its own.
type ovsPort struct {
	Name string
	Tag  int // 0: none
	IDs  map[string]string
}

// podPorts lists the Port rows of one pod's sandbox on its node, by ifname.
func podPorts(t *testing.T, ctx context.Context, p *corev1.Pod) map[string]ovsPort {
	t.Helper()
	sb := sandboxID(t, ctx, p)
	out, err := onNode(ctx, p.Spec.NodeName, "ovs-vsctl --format=json --columns=name,tag,external_ids list Port")
	if err != nil {
		t.Fatalf("listing ports: %v", err)
	}
	var tbl struct {
		Data [][]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &tbl); err != nil {
		t.Fatalf("ovs-vsctl list Port: %v: %s", err, out)
	}
	ports := map[string]ovsPort{}
	for _, row := range tbl.Data {
		var pt ovsPort
		_ = json.Unmarshal(row[0], &pt.Name)
		_ = json.Unmarshal(row[1], &pt.Tag) // ["set",[]] when none: stays 0
		var m []json.RawMessage
		_ = json.Unmarshal(row[2], &m)
		var pairs [][2]string
		if len(m) == 2 {
			_ = json.Unmarshal(m[1], &pairs)
		}
		pt.IDs = map[string]string{}
		for _, kv := range pairs {
			pt.IDs[kv[0]] = kv[1]
		}
		if pt.IDs["ovsflow.io/container-id"] == sb {
			ports[pt.IDs["ovsflow.io/ifname"]] = pt
		}
	}
	return ports
}

// TestMultusSecondaryVLANReachesOtherNode: a pod on node 1 and a pod on node
// 2, each with eth0 (the cluster default network, ovsflow through Multus)
// and net1 (a NetworkAttachmentDefinition of ovs-bridge on VLAN 100 of br0).
// net1 of each answers net1 of the other over TCP and UDP, IPv4 and IPv6,
// and sees the caller's net1 address; eth0 of each still answers the other's
// eth0; both ports are on VLAN 100 in OVSDB and eth0 on none.
func TestMultusSecondaryVLANReachesOtherNode(t *testing.T) {
	ctx := testContext(t)
	needMultus(t, ctx)
	nodes := oneSegment(t, ctx)
	ns := namespace(t, ctx)
	createNAD(t, ctx, ns, secureNAD, vlanNAD(t, secureNAD, vlanSecure, secureV4, secureV6, true))
	names := []string{"a", "b"}
	for i, name := range names {
		createPods(t, ctx, ns, multusPod(name, nodes[i].Name, []attachment{{Name: secureNAD, Interface: "net1",
			IPs: []string{withLen(addr(secureV4, 2+i), secureV4), withLen(addr(secureV6, 2+i), secureV6)}}}))
	}
	var pods []corev1.Pod
	for _, name := range names {
		pods = append(pods, waitPodsReady(t, ctx, ns, "role="+name, 1)[0])
	}
	for i := range pods {
		p := &pods[i]
		st := networkStatus(t, p)
		want := []string{addr(secureV4, 2+i), addr(secureV6, 2+i)}
		got := append([]string(nil), st["net1"]...)
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pod %s: network-status net1 %v, want %v (all: %v)", p.Name, st["net1"], want, st)
		}
		ports := podPorts(t, ctx, p)
		if ports["net1"].Tag != vlanSecure || ports["eth0"].Name == "" || ports["eth0"].Tag != 0 {
			t.Errorf("pod %s on %s: ports %+v, want net1 on VLAN %d and eth0 untagged", p.Name, p.Spec.NodeName, ports, vlanSecure)
		}
	}
	for i := range pods {
		src, dst := &pods[i], &pods[1-i]
		var ps []probe
		want := map[probe]string{}
		for _, fam := range []struct{ dst, src string }{
			{addr(secureV4, 3-i), addr(secureV4, 2+i)},
			{addr(secureV6, 3-i), addr(secureV6, 2+i)},
			{podIP(t, dst, 4), podIP(t, src, 4)},
			{podIP(t, dst, 6), podIP(t, src, 6)},
		} {
			for _, pr := range []probe{{"tcp", fam.dst, 80}, {"udp", fam.dst, 53}} {
				ps = append(ps, pr)
				want[pr] = hello(dst.Name, fam.src)
			}
		}
		eventually(t, ctx, time.Minute, fmt.Sprintf("from %s on %s", src.Name, src.Spec.NodeName), func() error {
			out, err := inPod(ctx, src, probeScript(ps))
			if err != nil {
				return err
			}
			got := answers(out)
			var bad []string
			for _, pr := range ps {
				if !strings.HasPrefix(got[pr], want[pr]) {
					bad = append(bad, fmt.Sprintf("%v: got %q, want %q", pr, got[pr], want[pr]))
				}
			}
			if bad != nil {
				return fmt.Errorf("%s", strings.Join(bad, "; "))
			}
			return nil
		})
	}
	// DEL through Multus: both attachments of pod a go, ports and addresses.
	deletedLeavesNothing(t, ctx, &pods[0])
}

// deletedLeavesNothing deletes the pod and waits until its node holds no
// Port row of its sandbox and no host-local allocation of it (eth0's and
// the secondary networks').
func deletedLeavesNothing(t *testing.T, ctx context.Context, p *corev1.Pod) {
	t.Helper()
	sb := sandboxID(t, ctx, p)
	zero := int64(0)
	if err := kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatalf("deleting pod %s: %v", p.Name, err)
	}
	eventually(t, ctx, 2*time.Minute, "pod "+p.Name+"'s ports and addresses gone from "+p.Spec.NodeName, func() error {
		out, err := onNode(ctx, p.Spec.NodeName, fmt.Sprintf(
			`ovs-vsctl --bare --columns=name find Port 'external_ids:"ovsflow.io/container-id"="%[1]s"'; grep -rl '%[1]s' /var/lib/cni/networks || true`, sb))
		if err != nil {
			return err
		}
		if left := strings.TrimSpace(out); left != "" {
			return fmt.Errorf("left of sandbox %s: %s", sb, left)
		}
		return nil
	})
}

// echoCount: the ICMP echo requests the pod's network namespace has received.
func echoCount(t *testing.T, ctx context.Context, p *corev1.Pod) int {
	t.Helper()
	out, err := inPod(ctx, p, "nstat -asz IcmpInEchos | awk '$1 == \"IcmpInEchos\" {print $2}'")
	n, perr := strconv.Atoi(strings.TrimSpace(out))
	if err != nil || perr != nil {
		t.Fatalf("echo count of pod %s: %q %v %v", p.Name, out, err, perr)
	}
	return n
}

// TestMultusSecondarySpoofDropped: pods on two nodes, each with net1 on VLAN
// 100 (port security, the default) and net2 on VLAN 101 (portSecurity
// false: the unprotected control). From the attacker's netns, real ICMP echo
// frames go out of each interface to the victim's same-network address
// (its MAC a permanent neighbour, so no ARP is needed): unspoofed, then from
// another source IP (an address added in the subnet, own MAC), then from
// another source MAC (the interface's address changed, own IP), then
// unspoofed again. The victim's IcmpInEchos counts what arrived: on net1
// the unspoofed ones only; on net2 the spoofed ones too (so the count can
// see them).
func TestMultusSecondarySpoofDropped(t *testing.T) {
	ctx := testContext(t)
	needMultus(t, ctx)
	nodes := oneSegment(t, ctx)
	ns := namespace(t, ctx)
	createNAD(t, ctx, ns, secureNAD, vlanNAD(t, secureNAD, vlanSecure, secureV4, secureV6, true))
	createNAD(t, ctx, ns, openN, vlanNAD(t, openN, vlanOpen, open4, open6, false))
	names := []string{"attacker", "victim"}
	for i, name := range names {
		createPods(t, ctx, ns, multusPod(name, nodes[i].Name, []attachment{
			{Name: secureNAD, Interface: "net1", IPs: []string{withLen(addr(secureV4, 4+i), secureV4), withLen(addr(secureV6, 4+i), secureV6)}},
			{Name: openN, Interface: "net2", IPs: []string{withLen(addr(open4, 4+i), open4), withLen(addr(open6, 4+i), open6)}},
		}))
	}
	attacker := waitPodsReady(t, ctx, ns, "role=attacker", 1)[0]
	victim := waitPodsReady(t, ctx, ns, "role=victim", 1)[0]

	const n = 3 // frames per kind
	for _, c := range []struct {
		ifname, cidr string
		protected    bool
	}{
		{"net1", secureV4, true},
		{"net2", open4, false},
	} {
		t.Run(c.ifname, func(t *testing.T) {
			own, dst, spoofIP := addr(c.cidr, 4), addr(c.cidr, 5), addr(c.cidr, 13)
			const spoofMAC = "02:00:5e:10:00:99"
			vmac, err := inPod(ctx, &victim, "ip -br link show dev "+c.ifname+" | awk '{print $3}'")
			if err != nil {
				t.Fatal(err)
			}
			vmac = strings.TrimSpace(vmac)
			neigh := fmt.Sprintf("ip neigh replace %s lladdr %s dev %s nud permanent", dst, vmac, c.ifname)
			send := func(what, script string) int {
				t.Helper()
				before := echoCount(t, ctx, &victim)
				if out, err := inPod(ctx, &attacker, "set -e\n"+script); err != nil {
					t.Fatalf("%s: %v: %s", what, err, out)
				}
				got := echoCount(t, ctx, &victim) - before
				t.Logf("%s on %s: %d of %d echo requests reached the victim", what, c.ifname, got, n)
				return got
			}
			ping := func(src string) string {
				return fmt.Sprintf("ping -c %d -i 0.2 -W 1 -I %s %s >/dev/null || true", n, src, dst)
			}
			// The control: the path works before the spoofs.
			eventually(t, ctx, time.Minute, "unspoofed echo requests on "+c.ifname, func() error {
				if got := send("unspoofed", neigh+"\n"+ping(own)); got < n {
					return fmt.Errorf("%d of %d arrived", got, n)
				}
				return nil
			})
			gotIP := send("spoofed source IP "+spoofIP, fmt.Sprintf("ip addr add %s/32 dev %s\n%s\n%s\nip addr del %s/32 dev %s",
				spoofIP, c.ifname, neigh, ping(spoofIP), spoofIP, c.ifname))
			gotMAC := send("spoofed source MAC "+spoofMAC, fmt.Sprintf(`m=$(ip -br link show dev %[1]s | awk '{print $3}')
ip link set %[1]s address %[2]s
%[3]s
%[4]s
ip link set %[1]s address "$m"
%[3]s`, c.ifname, spoofMAC, neigh, ping(own)))
			after := send("unspoofed, after", neigh+"\n"+ping(own))
			if after < n {
				t.Errorf("unspoofed after the spoofs: %d of %d arrived, want all", after, n)
			}
			if c.protected {
				if gotIP != 0 || gotMAC != 0 {
					t.Errorf("port security on %s: spoofed IP %d, spoofed MAC %d of %d arrived, want 0", c.ifname, gotIP, gotMAC, n)
				}
			} else if gotIP < n || gotMAC < n {
				t.Errorf("control without port security on %s: spoofed IP %d, spoofed MAC %d of %d arrived, want all (else this test cannot see a spoof)", c.ifname, gotIP, gotMAC, n)
			}
		})
	}
}

// TestMultusPortMappingsToDelegate: what Multus v4.2.3 passes of the pod's
// port mappings. containerd gives Multus runtimeConfig.portMappings (the
// pod's hostPorts: examples/multus.conflist has the capability); Multus
// hands that runtimeConfig to the cluster default network's delegate
// unchanged, and to each NetworkAttachmentDefinition's delegate too unless
// the network selection sets its own portMappings (pkg/types/conf.go,
// mergeCNIRuntimeConfig); libcni then gives it only to a plugin with the
// capability. So: the hostPort reaches the pod on its node's addresses
// (ovs-portmap of 10-ovsflow.conflist published it on eth0's attachment),
// and net1's attachment (ovs-bridge only, no capability) records no host
// port.
func TestMultusPortMappingsToDelegate(t *testing.T) {
	ctx := testContext(t)
	needMultus(t, ctx)
	nodes := oneSegment(t, ctx)
	ns := namespace(t, ctx)
	createNAD(t, ctx, ns, secureNAD, vlanNAD(t, secureNAD, vlanSecure, secureV4, secureV6, true))
	const hp = 18100
	first := nodes[0]
	createPods(t, ctx, ns, multusPod("pm", first.Name, []attachment{{Name: secureNAD, Interface: "net1",
		IPs: []string{withLen(addr(secureV4, 6), secureV4), withLen(addr(secureV6, 6), secureV6)}}}, hostPorts(hp, "")...))
	pod := waitPodsReady(t, ctx, ns, "role=pm", 1)[0]
	if st := networkStatus(t, &pod); len(st["net1"]) != 2 {
		t.Errorf("pod pm: network-status %v, want net1 with two addresses", st)
	}
	ports := podPorts(t, ctx, &pod)
	if ports["eth0"].IDs["ovsflow.io/portmap"] == "" {
		t.Errorf("pod pm: eth0's port %+v records no host port, want the pod's hostPorts", ports["eth0"])
	}
	if _, ok := ports["net1"]; !ok {
		t.Errorf("pod pm: no port of net1 (ports %v)", ports)
	} else if hpRec := ports["net1"].IDs["ovsflow.io/portmap"]; hpRec != "" {
		t.Errorf("pod pm: net1's port records host ports %q, want none (its delegate has no portMappings capability)", hpRec)
	}
	for _, pr := range hostPortProbes(first, hp) {
		eventually(t, ctx, time.Minute, fmt.Sprintf("host port %v from this host", pr), func() error {
			if got := fromHost(pr); !strings.HasPrefix(got, "hello from pm to ") {
				return fmt.Errorf("got %q, want hello from pm", got)
			}
			return nil
		})
	}
	other := nodes[1]
	out, err := onNode(ctx, other.Name, probeScript(hostPortProbes(first, hp)))
	if err != nil {
		t.Fatal(err)
	}
	for pr, got := range answers(out) {
		peer := other.IPv4
		if strings.Contains(pr.Addr, ":") {
			peer = other.IPv6
		}
		if !strings.HasPrefix(got, hello("pm", peer)) {
			t.Errorf("host port %v from node %s: got %q, want %q", pr, other.Name, got, hello("pm", peer))
		}
	}
}

// TestMultusOVSCNIConfigNAD: examples/multus-ovs-cni-nad.yaml, a
// NetworkAttachmentDefinition whose config is ovs-cni's (its README's: cniVersion 0.4.0, one plugin, "bridge", "vlan",
// plus its socket_file and link state keys), with "type" ovs-bridge, runs
// through Multus: pods on two nodes get net1 on VLAN 102 with no address
// (no IPAM: MAC-only port security), and once each has an address put on
// by hand, each reaches the other over it; the pod's DEL leaves nothing.
func TestMultusOVSCNIConfigNAD(t *testing.T) {
	ctx := testContext(t)
	needMultus(t, ctx)
	nodes := oneSegment(t, ctx)
	ns := namespace(t, ctx)
	const nad, vlan, subnet = "ovs-cni-style", 102, "198.51.100.208/28" // as in examples/multus-ovs-cni-nad.yaml
	createNAD(t, ctx, ns, nad, exampleNAD(t, "multus-ovs-cni-nad.yaml"))
	names := []string{"c", "d"}
	for i, name := range names {
		createPods(t, ctx, ns, multusPod(name, nodes[i].Name, []attachment{{Name: nad, Interface: "net1"}}))
	}
	var pods []corev1.Pod
	for i, name := range names {
		p := waitPodsReady(t, ctx, ns, "role="+name, 1)[0]
		if ports := podPorts(t, ctx, &p); ports["net1"].Tag != vlan {
			t.Errorf("pod %s: ports %+v, want net1 on VLAN %d", p.Name, ports, vlan)
		}
		if out, err := inPod(ctx, &p, fmt.Sprintf("ip addr add %s dev net1", withLen(addr(subnet, 2+i), subnet))); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		pods = append(pods, p)
	}
	for i := range pods {
		src, dst := &pods[i], &pods[1-i]
		ps := []probe{{"tcp", addr(subnet, 3-i), 80}, {"udp", addr(subnet, 3-i), 53}}
		eventually(t, ctx, time.Minute, fmt.Sprintf("from %s on %s over net1", src.Name, src.Spec.NodeName), func() error {
			out, err := inPod(ctx, src, probeScript(ps))
			if err != nil {
				return err
			}
			got := answers(out)
			for _, pr := range ps {
				if want := hello(dst.Name, addr(subnet, 2+i)); !strings.HasPrefix(got[pr], want) {
					return fmt.Errorf("%v: got %q, want %q", pr, got[pr], want)
				}
			}
			return nil
		})
	}
	deletedLeavesNothing(t, ctx, &pods[0])
}
