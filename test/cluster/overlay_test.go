package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// The overlay's tests need nodes on two subnets behind a router
// (`hack/ovs-in-docker.sh test -kube -subnets 2`, which sets
// OVSFLOW_CLUSTER_SUBNETS=2 and runs them; a cluster on one subnet runs
// them not at all).

// needSubnets stops a test of the overlay on a cluster whose nodes share
// one subnet, and returns the ready nodes by subnet, at least two of them.
func needSubnets(t *testing.T, ctx context.Context) map[netip.Prefix][]node {
	t.Helper()
	needCluster(t)
	if os.Getenv("OVSFLOW_CLUSTER_SUBNETS") != "2" {
		t.Skip("*** the nodes share one subnet (OVSFLOW_CLUSTER_SUBNETS is not 2): the overlay NOT tested ***")
	}
	by := nodesBySubnet(t, ctx)
	if len(by) < 2 {
		t.Fatalf("nodes by subnet %v: want two subnets", by)
	}
	return by
}

// oneSegment returns the ready nodes of the subnet that has the most of
// them, at least two: a secondary network on a VLAN of the bridges is one
// L2 segment across the nodes' uplinks, which a router between subnets
// does not join.
func oneSegment(t *testing.T, ctx context.Context) []node {
	t.Helper()
	var most []node
	for _, ns := range nodesBySubnet(t, ctx) {
		if len(ns) > len(most) {
			most = ns
		}
	}
	if len(most) < 2 {
		t.Fatalf("no two ready nodes on one subnet (one L2 segment): %v", most)
	}
	return most
}

// nodesBySubnet returns the ready nodes (two at least) by subnet: the
// prefix of each one's InternalIP on its bridge interface.
func nodesBySubnet(t *testing.T, ctx context.Context) map[netip.Prefix][]node {
	t.Helper()
	by := map[netip.Prefix][]node{}
	for _, nd := range readyNodes(t, ctx, 2) {
		p4, _, out, err := uplinkPrefixes(ctx, nd)
		if err != nil {
			t.Fatal(err)
		}
		if !p4.IsValid() {
			t.Fatalf("node %s: no address %s on br0: %s", nd.Name, nd.IPv4, out)
		}
		by[p4.Masked()] = append(by[p4.Masked()], nd)
	}
	return by
}

// acrossSubnets returns two nodes on different subnets, and a third on
// the first one's subnet where there is one.
func acrossSubnets(t *testing.T, by map[netip.Prefix][]node) (a, b node, same *node) {
	t.Helper()
	var first, second []node
	for _, ns := range by {
		if first == nil || len(ns) > len(first) {
			first, second = ns, first
		} else if second == nil {
			second = ns
		}
	}
	a, b = first[0], second[0]
	if len(first) > 1 {
		same = &first[1]
	}
	return a, b, same
}

// TestOverlayAcrossSubnets: pods on nodes of different subnets, whose
// traffic goes through the node agent's tunnel (hybrid: nodes on one
// subnet route host-gw). The pods' MTU is the uplink's less the tunnel's
// 50 bytes; a 4,000-byte UDP datagram (fragments through the tunnel)
// reaches the other pod and is answered; 10 MB over TCP arrive whole, both
// families; the node routes the other subnet's pod ranges into the tunnel
// and its own subnet's to the node itself.
func TestOverlayAcrossSubnets(t *testing.T) {
	ctx := testContext(t)
	a, b, same := acrossSubnets(t, needSubnets(t, ctx))
	podsThroughTunnel(t, ctx, a, b, same, 50)
}

// TestOverlayOverIPv6Underlay: with -underlay=ipv6 on every node's agent
// the tunnel goes from each node's IPv6 InternalIP (the tunnel port's
// local_ip, changed in place) and carries both families of pods as over
// IPv4, with the pods' MTU 70 bytes less than the uplink's.
func TestOverlayOverIPv6Underlay(t *testing.T) {
	ctx := testContext(t)
	a, b, same := acrossSubnets(t, needSubnets(t, ctx))
	const flag = "-underlay=ipv6"
	t.Cleanup(func() {
		setAgent(t, ctx, "command without "+flag, func(c *corev1.Container) {
			c.Command = slices.DeleteFunc(c.Command, func(s string) bool { return s == flag })
		})
	})
	setAgent(t, ctx, "command with "+flag, func(c *corev1.Container) { c.Command = append(c.Command, flag) })
	for _, nd := range []node{a, b} {
		eventually(t, ctx, time.Minute, "node "+nd.Name+"'s tunnel from its IPv6 InternalIP "+nd.IPv6, func() error {
			out, err := onNode(ctx, nd.Name, "ovs-vsctl get Interface ovsflow-tun options:local_ip")
			if got := strings.Trim(strings.TrimSpace(out), `"`); err != nil || netip.MustParseAddr(nd.IPv6).String() != got {
				return fmt.Errorf("local_ip %q (%v)", got, err)
			}
			return nil
		})
	}
	podsThroughTunnel(t, ctx, a, b, same, 70)
}

// podsThroughTunnel: a client pod on node a and a server pod on node b
// (another subnet) reach each other through the tunnel, whose overhead
// is what the pods' MTU is below the uplink's; same, a node on a's
// subnet, is reached by host-gw.
func podsThroughTunnel(t *testing.T, ctx context.Context, a, b node, same *node, overhead int) {
	t.Helper()
	ns := namespace(t, ctx)
	createPods(t, ctx, ns,
		appPod("client", a.Name, map[string]string{"role": "client"}),
		appPod("server", b.Name, map[string]string{"role": "server"}))
	client := waitPodsReady(t, ctx, ns, "role=client", 1)[0]
	server := waitPodsReady(t, ctx, ns, "role=server", 1)[0]

	// The routes of node a: node b's pod ranges through the tunnel's next
	// hop, a node of its own subnet's directly.
	out, err := onNode(ctx, a.Name, fmt.Sprintf("ip -o route get %s; ip -o -6 route get %s", podIP(t, &server, 4), podIP(t, &server, 6)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, " via 169.254.253.1 ")+strings.Count(out, " via fe80::fc5:1 ") != 2 {
		t.Errorf("node %s's routes to pod %s on %s (another subnet): %s; want both through the tunnel's next hops", a.Name, server.Name, b.Name, out)
	}
	if same != nil {
		out, err := onNode(ctx, a.Name, "ip -o route show proto 157")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, " via "+same.IPv4+" ") {
			t.Errorf("node %s's routes: %s; want node %s's pod range via its address %s (its subnet: host-gw)", a.Name, out, same.Name, same.IPv4)
		}
	}
	// (ip, not /sys: nsenter enters the pod's netns, not a sysfs of it)
	mtuOf := func(out string) string { _, m, _ := strings.Cut(out, " mtu "); return strings.Fields(m + " ?")[0] }
	out, err = inPod(ctx, &client, "ip -o link show dev eth0")
	if err != nil {
		t.Fatal(err)
	}
	uplink, err := onNode(ctx, a.Name, "ip -o link show dev eth0")
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := strconv.Atoi(mtuOf(uplink)); mtuOf(out) != strconv.Itoa(u-overhead) {
		t.Errorf("pod %s's MTU %s, want node %s's uplink's %s less %d", client.Name, mtuOf(out), a.Name, mtuOf(uplink), overhead)
	}

	for _, fam := range []int{4, 6} {
		dst := podIP(t, &server, fam)
		// A datagram of 4,000 bytes: the server answers it (it reads the
		// first 1,500 bytes) once its fragments came through the tunnel.
		want := hello(server.Name, podIP(t, &client, fam))
		eventually(t, ctx, 20*time.Second, fmt.Sprintf("a 4,000-byte UDP datagram to %s answered", dst), func() error {
			out, err := inPod(ctx, &client, fmt.Sprintf(`exec 3<>/dev/udp/%s/53 && head -c 4000 /dev/zero >&3 && timeout 3 head -1 <&3`, dst))
			if !strings.HasPrefix(out, want) {
				return fmt.Errorf("got %q (%v), want %q...", out, err, want)
			}
			return nil
		})
		// 10 MB over TCP: the server pod counts what arrives.
		const size = 10_000_000
		port := 9000 + fam
		var wg sync.WaitGroup
		var got string
		var serr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, serr = inPod(ctx, &server, fmt.Sprintf("timeout 120 socat -u TCP%d-LISTEN:%d,reuseaddr - | wc -c", fam, port))
		}()
		addr := dst
		if fam == 6 {
			addr = "[" + dst + "]"
		}
		if out, err := inPod(ctx, &client, fmt.Sprintf("head -c %d /dev/zero | socat -u - TCP%d:%s:%d,retry=100,interval=0.2", size, fam, addr, port)); err != nil {
			t.Errorf("sending %d bytes to %s: %v: %s", size, dst, err, out)
		}
		wg.Wait()
		if serr != nil || strings.TrimSpace(got) != strconv.Itoa(size) {
			t.Errorf("TCP to %s:%d: pod %s counted %q (%v), want %d bytes", dst, port, server.Name, strings.TrimSpace(got), serr, size)
		}
	}
}

// TestOverlayForgedOuterSourceDropped: a Geneve packet sent from the
// router to a node, with an outer source that is no node's, is dropped by
// the node's tunnel flows and counted by the node agent's metric
// (reason overlay-refused); the same packet with a node of the other
// subnet as its outer source is the tunnel's (its flow counts it), which
// shows the packet itself is well formed.
func TestOverlayForgedOuterSourceDropped(t *testing.T) {
	ctx := testContext(t)
	a, b, _ := acrossSubnets(t, needSubnets(t, ctx))
	ns := namespace(t, ctx)
	createPods(t, ctx, ns, appPod("target", a.Name, map[string]string{"role": "target"}))
	target := waitPodsReady(t, ctx, ns, "role=target", 1)[0]
	dst := netip.MustParseAddr(podIP(t, &target, 4))
	nodeA, nodeB := netip.MustParseAddr(a.IPv4), netip.MustParseAddr(b.IPv4)
	forged := netip.MustParseAddr("192.0.2.99")
	inner := netip.MustParseAddr("192.0.2.77")

	refused := func() float64 {
		t.Helper()
		code, m, err := agentGet(ctx, a.Name, "/metrics")
		if err != nil || code != 200 {
			t.Fatalf("GET /metrics on %s: %d, %v", a.Name, code, err)
		}
		return metricValue(m, "ovsflow_overlay_dropped_packets_total", `reason="overlay-refused"`)
	}
	fromPeer := func() int {
		t.Helper()
		out, err := onNode(ctx, a.Name, fmt.Sprintf("ovs-ofctl dump-flows br0 'table=51,ip,tun_src=%s'", nodeB))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range strings.Fields(out) {
			if v, ok := strings.CutPrefix(strings.TrimSuffix(f, ","), "n_packets="); ok {
				k, _ := strconv.Atoi(v)
				n += k
			}
		}
		return n
	}

	before := refused()
	eventually(t, ctx, 30*time.Second, fmt.Sprintf("node %s counts a Geneve packet from %s as refused", a.Name, forged), func() error {
		sendGeneve(t, ctx, forged, nodeA, inner, dst)
		if got := refused(); got <= before {
			return fmt.Errorf("overlay-refused %v, as before", got)
		}
		return nil
	})
	peer := fromPeer()
	eventually(t, ctx, 30*time.Second, fmt.Sprintf("node %s takes the same packet from node %s's address", a.Name, b.Name), func() error {
		sendGeneve(t, ctx, nodeB, nodeA, inner, dst)
		if got := fromPeer(); got <= peer {
			return fmt.Errorf("the flow of node %s's packets counts %d, as before", b.Name, got)
		}
		return nil
	})
}

// metricValue is the sum of the samples of metric name whose labels hold
// label, in Prometheus's text format.
func metricValue(text, name, label string) float64 {
	sum := 0.0
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok || !strings.Contains(rest, label) {
			continue
		}
		f := strings.Fields(rest)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// sendGeneve sends, from the router's network namespace, one Geneve packet
// (UDP 6081, the overlay's VNI 0xfc5) from outer source src to node
// address to, holding a UDP datagram from inner to a pod's port 53.
func sendGeneve(t *testing.T, ctx context.Context, src, to, inner, pod netip.Addr) {
	t.Helper()
	pid, err := exec.CommandContext(ctx, harness, "pid", "router").Output()
	if err != nil {
		t.Fatalf("the router's process: %v", err)
	}
	frame := binary.BigEndian.AppendUint16([]byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2}, 0x0800)
	frame = append(frame, ipv4UDP(inner, pod, 4000, 53, []byte("forged\n"))...)
	const vni = 0xfc5
	geneve := append([]byte{0, 0, 0x65, 0x58, vni >> 16, vni >> 8 & 0xff, vni & 0xff, 0}, frame...)
	pkt := ipv4UDP(src, to, 50000, 6081, geneve)

	err = inNetns("/proc/"+strings.TrimSpace(string(pid))+"/ns/net", func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: to.As4()})
	})
	if err != nil {
		t.Fatalf("sending a Geneve packet from %s to %s: %v", src, to, err)
	}
}

// ipv4UDP is an IPv4 packet (header checksum set) holding a UDP datagram
// (no checksum) of body.
func ipv4UDP(src, dst netip.Addr, sport, dport uint16, body []byte) []byte {
	udp := binary.BigEndian.AppendUint16(nil, sport)
	udp = binary.BigEndian.AppendUint16(udp, dport)
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(body)))
	udp = append(binary.BigEndian.AppendUint16(udp, 0), body...)
	h := []byte{0x45, 0, 0, 0, 0, 0, 0, 0, 64, unix.IPPROTO_UDP, 0, 0}
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(udp)))
	h = append(append(h, src.AsSlice()...), dst.AsSlice()...)
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	sum = sum&0xffff + sum>>16
	sum += sum >> 16
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
	return append(h, udp...)
}

// TestOverlayControlWithoutTunnel: the control. With the agents at
// -overlay none (host-gw to every Node), a pod reaches no pod of the other
// subnet (the next hop of those pod ranges, the other node's address, is
// on no link of this node), and still reaches a pod of its own subnet's
// other node; the DaemonSet as it was (hybrid), across the subnets again.
func TestOverlayControlWithoutTunnel(t *testing.T) {
	ctx := testContext(t)
	a, b, same := acrossSubnets(t, needSubnets(t, ctx))
	ns := namespace(t, ctx)
	createPods(t, ctx, ns,
		appPod("client", a.Name, map[string]string{"role": "client"}),
		appPod("far", b.Name, map[string]string{"role": "far"}))
	client := waitPodsReady(t, ctx, ns, "role=client", 1)[0]
	far := waitPodsReady(t, ctx, ns, "role=far", 1)[0]
	var near *corev1.Pod
	if same != nil {
		createPods(t, ctx, ns, appPod("near", same.Name, map[string]string{"role": "near"}))
		near = &waitPodsReady(t, ctx, ns, "role=near", 1)[0]
	}
	// failed: the probes of client to dst (TCP, both families) that went
	// unanswered.
	failed := func(dst *corev1.Pod) []string {
		var ps []probe
		for _, fam := range []int{4, 6} {
			ps = append(ps, probe{"tcp", podIP(t, dst, fam), 80})
		}
		out, err := inPod(ctx, &client, probeScript(ps))
		if err != nil {
			t.Fatal(err)
		}
		got := answers(out)
		var bad []string
		for _, pr := range ps {
			if !strings.HasPrefix(got[pr], "hello from "+dst.Name+" to ") {
				bad = append(bad, pr.String())
			}
		}
		return bad
	}
	reaches := func(dst *corev1.Pod) func() error {
		return func() error {
			if bad := failed(dst); len(bad) > 0 {
				return fmt.Errorf("unanswered: %v", bad)
			}
			return nil
		}
	}
	eventually(t, ctx, 30*time.Second, "the client reaches the pod on the other subnet (hybrid)", reaches(&far))

	const flag = "-overlay=none"
	restored := false
	restore := func() {
		if !restored {
			restored = true
			setAgent(t, ctx, "command without "+flag, func(c *corev1.Container) {
				c.Command = slices.DeleteFunc(c.Command, func(s string) bool { return s == flag })
			})
		}
	}
	t.Cleanup(restore)
	setAgent(t, ctx, "command with "+flag, func(c *corev1.Container) { c.Command = append(c.Command, flag) })
	eventually(t, ctx, time.Minute, "no tunnel on node "+a.Name+" and its routes to node "+b.Name+"'s pods via "+b.IPv4, func() error {
		out, err := onNode(ctx, a.Name, fmt.Sprintf("ovs-vsctl --bare --columns=name find Interface name=ovsflow-tun; ip -o route get %s", podIP(t, &far, 4)))
		if err != nil {
			return err
		}
		if strings.Contains(out, "ovsflow-tun") || !strings.Contains(out, " via "+b.IPv4+" ") {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
	if bad := failed(&far); len(bad) != 2 {
		t.Errorf("-overlay none: from %s to the pod on %s (another subnet), unanswered %v: want both families unanswered", a.Name, b.Name, bad)
	}
	if near != nil {
		eventually(t, ctx, 30*time.Second, "-overlay none: the pod on "+same.Name+" (the same subnet) still answers", reaches(near))
	}
	restore()
	eventually(t, ctx, time.Minute, "the tunnel back: the pod on the other subnet answers again", reaches(&far))
}
