package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// The node of docs/design.md (framework.WireOVSHost): node addresses on the
// bridge's internal interface, an uplink port wired to an "outside" netns,
// containers attached by ovs-bridge with their gateway on the internal
// interface.
const (
	nodeV4    = framework.NodeV4
	nodeV4b   = framework.NodeV4b // a second node address (row E)
	nodeV6    = framework.NodeV6
	outsideV4 = framework.OutsideV4
	outsideV6 = framework.OutsideV6
)

// expect dials and checks that the container `to` answered and saw `src`.
func expect(t *testing.T, from ns.NetNS, network, addr string, to *framework.Container, src string) {
	t.Helper()
	got, err := framework.Dial(from, network, addr)
	if err != nil || !strings.HasPrefix(got, "hello from "+to.ID+" ") {
		t.Errorf("%s %s: got %q, %v; want an answer from %s", network, addr, got, err, to.ID)
		return
	}
	if src != "" && !strings.Contains(got, src) {
		t.Errorf("%s %s: %s saw %q, want client address %s", network, addr, to.ID, got, src)
	}
}

// Rows A-F and H of the host-port table (docs/design.md), TCP and UDP,
// IPv4 and IPv6; CHECK; DEL without runtimeConfig.
func TestPortmapDatapath(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmdp", nil)
	a, b := framework.NewContainer(t), framework.NewContainer(t)
	capA := mappings(pm(8080, 80, "tcp", ""), pm(5353, 53, "UDP", ""), pm(9090, 90, "tcp", nodeV4))
	ra := n.MustAdd(t, a, "eth0", capA)
	rb := n.MustAdd(t, b, "eth0", nil)
	t.Cleanup(func() { n.Del(a, "eth0", nil); n.Del(b, "eth0", nil) })
	for _, port := range []int{80, 90} {
		a.ServeTCP(t, port)
	}
	a.ServeUDP(t, 53)
	b.ServeTCP(t, 80)
	aV4, aV6, bV4 := framework.AddrOf(t, ra, false), framework.AddrOf(t, ra, true), framework.AddrOf(t, rb, false)
	t.Logf("A=%s,%s B=%s", aV4, aV6, bV4)

	// A: outside → node:hostPort, real source address.
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8080), a, outsideV4)
	expect(t, h.Outside.NS, "tcp", hp(nodeV6, 8080), a, outsideV6)
	expect(t, h.Outside.NS, "udp", hp(nodeV4, 5353), a, outsideV4)
	expect(t, h.Outside.NS, "udp", hp(nodeV6, 5353), a, outsideV6)
	expect(t, h.Outside.NS, "tcp", hp(nodeV4b, 8080), a, outsideV4) // hostIP "" = every node address
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 9090), a, outsideV4)
	// B: another container → node:hostPort.
	expect(t, b.NS, "tcp", hp(nodeV4, 8080), a, "")
	expect(t, b.NS, "tcp", hp(nodeV6, 8080), a, "")
	expect(t, b.NS, "udp", hp(nodeV4, 5353), a, "")
	// C: hairpin.
	expect(t, a.NS, "tcp", hp(nodeV4, 8080), a, "")
	expect(t, a.NS, "tcp", hp(nodeV6, 8080), a, "")
	expect(t, a.NS, "udp", hp(nodeV4, 5353), a, "")
	// D: a process on the node itself (this test runs in the node's netns).
	expect(t, nil, "tcp", hp(nodeV4, 8080), a, "")
	expect(t, nil, "tcp", hp(nodeV6, 8080), a, "")
	expect(t, nil, "udp", hp(nodeV4, 5353), a, "")
	// E: a hostIP-specific mapping is not translated on another node address.
	if got, err := framework.Dial(h.Outside.NS, "tcp", hp(nodeV4b, 9090)); err == nil {
		t.Errorf("row E: %s answered %q, want no translation", hp(nodeV4b, 9090), got)
	}
	// F: a mapped port on a non-node address is routed as normal.
	h.Outside.ServeTCP(t, 8080)
	expect(t, b.NS, "tcp", hp(outsideV4, 8080), h.Outside, bV4)
	// H: unmapped traffic is unaffected.
	expect(t, a.NS, "tcp", hp(bV4, 80), b, aV4)
	if err := b.Ping(aV4); err != nil {
		t.Errorf("row H: ping B -> A: %v", err)
	}
	if err := a.Ping(outsideV4); err != nil {
		t.Errorf("row H: ping A -> outside: %v", err)
	}

	// CHECK passes, then fails once a flow is deleted behind the plugin's back.
	if err := n.Check(a, "eth0", capA); err != nil {
		t.Fatalf("CHECK after ADD: %v", err)
	}
	cookie := flows.AttachmentCookie(a.ID, "eth0")
	if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "del-flows", h.OFTarget(), fmt.Sprintf("table=41,%s", cookie.Delete().String())); err != nil {
		t.Fatal(err)
	}
	if err := n.Check(a, "eth0", capA); err == nil || !strings.Contains(err.Error(), "differ") {
		t.Errorf("CHECK after a flow was deleted: got %v, want a difference", err)
	}

	// DEL without runtimeConfig removes every flow of the attachment.
	if err := n.Del(a, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if fl := h.FlowsOf(t, cookie); len(fl) != 0 {
		t.Errorf("after DEL: flows %v", fl)
	}
	if _, err := framework.Dial(h.Outside.NS, "tcp", hp(nodeV4, 8080)); err == nil {
		t.Errorf("after DEL: host port still answers")
	}
	if err := n.Del(a, "eth0", nil); err != nil {
		t.Errorf("second DEL: %v", err)
	}
	if out, _ := run("nft", "list", "map", "ip", "ovsflow_hostport", "hostports"); strings.Contains(out, aV4) {
		t.Errorf("after DEL: node-local nft elements left:\n%s", out)
	}
	if _, err := framework.Dial(nil, "tcp", hp(nodeV4, 8080)); err == nil {
		t.Errorf("after DEL: node-local host port still answers")
	}
}

// Row G of the host-port table (docs/design.md): a UDP mapping moved to a
// new container reaches it at once, even from the same client socket.
func TestPortmapStaleConntrack(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmct", nil)
	old, nw := framework.NewContainer(t), framework.NewContainer(t)
	capA := mappings(pm(5354, 53, "udp", ""))
	n.MustAdd(t, old, "eth0", capA)
	old.ServeUDP(t, 53)

	var conn *net.UDPConn
	err := h.Outside.NS.Do(func(ns.NetNS) error {
		var err error
		conn, err = net.DialUDP("udp", &net.UDPAddr{Port: 40000}, &net.UDPAddr{IP: net.ParseIP(nodeV4), Port: 5354})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ask := func() string {
		conn.SetDeadline(timeNow().Add(2e9))
		conn.Write([]byte("ping"))
		buf := make([]byte, 1500)
		k, _ := conn.Read(buf)
		return string(buf[:k])
	}
	if got := ask(); !strings.HasPrefix(got, "hello from "+old.ID) {
		t.Fatalf("before the move: got %q", got)
	}
	if err := n.Del(old, "eth0", nil); err != nil {
		t.Fatal(err)
	}
	n.MustAdd(t, nw, "eth0", capA)
	t.Cleanup(func() { n.Del(nw, "eth0", nil) })
	nw.ServeUDP(t, 53)
	if got := ask(); !strings.HasPrefix(got, "hello from "+nw.ID) {
		t.Errorf("after the move, same client socket: got %q, want an answer from the new container", got)
	}
}

// Conflicts, many mappings, masqAll, versions.
func TestPortmapConflict(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmcf", nil)
	a, b := framework.NewContainer(t), framework.NewContainer(t)
	n.MustAdd(t, a, "eth0", mappings(pm(8081, 80, "tcp", "")))
	t.Cleanup(func() { n.Del(a, "eth0", nil) })
	_, err := n.Add(b, "eth0", mappings(pm(8081, 80, "tcp", nodeV4)))
	if err == nil || !strings.Contains(err.Error(), a.ID) || cniCode(err) != types.ErrInvalidNetworkConfig {
		t.Errorf("conflicting ADD: got %v, want code 7 naming %s", err, a.ID)
	}
	if fl := h.FlowsOf(t, flows.AttachmentCookie(b.ID, "eth0")); len(fl) != 0 {
		t.Errorf("conflicting ADD installed flows: %v", fl)
	}
	if err := n.Del(b, "eth0", nil); err != nil {
		t.Errorf("DEL after the failed ADD: %v", err)
	}
	// A retried ADD of the same attachment replaces its own flows.
	a.ServeTCP(t, 80)
	n.MustAdd(t, a, "eth0", mappings(pm(8081, 80, "tcp", "")))
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8081), a, outsideV4)
	// DEL then ADD at once (podman's network reload): the same host veth name
	// comes back, and the mapping must work for the very next connection,
	// although the datapath cached megaflows while the port was unmapped.
	// (Repeated: without the revalidation wait, one reload in ten refused.)
	for i := 0; i < 5 && !t.Failed(); i++ {
		if err := n.Del(a, "eth0", nil); err != nil {
			t.Fatal(err)
		}
		n.MustAdd(t, a, "eth0", mappings(pm(8081, 80, "tcp", "")))
		if framework.Slowdown > 1 {
			// ovs-portmap waits for the datapath's flow cache for at most
			// 50 ms (pkg/hostport revalidationCap); on a machine many times
			// slower than hardware (software emulation) a revalidation round
			// can outlast that, and the first connection meet the megaflow
			// cached while the port was unmapped. There, and only there, it
			// is retried for the stretched cap, and said so.
			if _, err := framework.Dial(h.Outside.NS, "tcp", hp(nodeV4, 8081)); err != nil {
				t.Logf("reload %d: the first connection after ADD failed (%v); retrying for %v (Slowdown %d)",
					i, err, framework.Scaled(50*time.Millisecond), framework.Slowdown)
				framework.Until(50*time.Millisecond, func() bool { _, err := framework.Dial(h.Outside.NS, "tcp", hp(nodeV4, 8081)); return err == nil })
			}
		}
		expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8081), a, outsideV4)
	}
	// A different protocol on the same port is no conflict.
	n.MustAdd(t, b, "eth0", mappings(pm(8081, 80, "udp", "")))
	t.Cleanup(func() { n.Del(b, "eth0", nil) })
}

func TestPortmapManyMappings(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.1.0", "pmmany", map[string]any{"masqAll": true})
	c := framework.NewContainer(t)
	var ms []map[string]any
	for i := 0; i < 20; i++ {
		ms = append(ms, pm(10000+i, 80, "tcp", ""))
	}
	n.MustAdd(t, c, "eth0", mappings(ms...))
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	c.ServeTCP(t, 80)
	for i := 0; i < 20; i++ {
		// masqAll: the container sees a node address, not the client's.
		got, err := framework.Dial(h.Outside.NS, "tcp", hp(nodeV4, 10000+i))
		if err != nil || !strings.HasPrefix(got, "hello from "+c.ID) || strings.Contains(got, outsideV4) {
			t.Errorf("masqAll tcp %s: got %q, %v; want an answer that does not show the client's address", hp(nodeV4, 10000+i), got, err)
		}
	}
	if got, err := framework.Dial(h.Outside.NS, "tcp", hp(nodeV6, 10019)); err != nil || strings.Contains(got, outsideV6) {
		t.Errorf("masqAll tcp6: got %q, %v", got, err)
	}
	if err := n.Check(c, "eth0", mappings(ms...)); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := n.Cfg.GCNetworkList(context.Background(), n.List, &libcni.GCArgs{}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if fl := h.FlowsOf(t, flows.AttachmentCookie(c.ID, "eth0")); len(fl) != 0 {
		t.Errorf("GC with no valid attachment left flows: %v", fl)
	}
}

func TestPortmapParallel(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmpar", nil)
	N := framework.Load(30, 6) // fewer on a slow machine
	cs := make([]*framework.Container, N)
	for i := range cs {
		cs[i] = framework.NewContainer(t)
	}
	caps := func(i int) map[string]any {
		return mappings(pm(20000+2*i, 80, "tcp", ""), pm(20001+2*i, 81, "udp", ""))
	}
	for i, err := range parallel(N, func(i int) error { _, err := n.Add(cs[i], "eth0", caps(i)); return err }) {
		if err != nil {
			t.Errorf("ADD %d: %v", i, err)
		}
	}
	for i, c := range cs {
		c.ServeTCP(t, 80)
		c.ServeUDP(t, 81)
		expect(t, h.Outside.NS, "tcp", hp(nodeV4, 20000+2*i), c, outsideV4)
		expect(t, h.Outside.NS, "udp", hp(nodeV6, 20001+2*i), c, outsideV6)
	}
	for i, err := range parallel(N, func(i int) error { return n.Del(cs[i], "eth0", nil) }) {
		if err != nil {
			t.Errorf("DEL %d: %v", i, err)
		}
	}
	out, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows", h.OFTarget(),
		fmt.Sprintf("cookie=0x%016x/0x%016x", uint64(flows.CookieSuite|flows.Cookie(flows.CookieKindAttachment)<<flows.CookieKindShift), uint64(flows.SuiteMask|0xff<<flows.CookieKindShift)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "cookie=") {
		t.Errorf("attachment flows left after parallel DELs:\n%s", out)
	}
	if veths := framework.OurVeths(t); len(veths) != 0 {
		t.Errorf("veths left: %v", veths)
	}
}

func TestPortmapVersions(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	for i, v := range []string{"0.4.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			n := h.PortmapList(t, v, "pmv", nil)
			c := framework.NewContainer(t)
			caps := mappings(map[string]any{"HostPort": 8090 + i, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""})
			n.MustAdd(t, c, "eth0", caps)
			c.ServeTCP(t, 80)
			expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8090+i), c, outsideV4)
			if err := n.Check(c, "eth0", caps); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if err := n.Del(c, "eth0", nil); err != nil {
				t.Errorf("DEL: %v", err)
			}
			if fl := h.FlowsOf(t, flows.AttachmentCookie(c.ID, "eth0")); len(fl) != 0 {
				t.Errorf("after DEL: %v", fl)
			}
		})
	}
}

// An ovs-vswitchd started with a --pidfile and --unixctl of its own: no pid
// file names its control socket, so ADD without "vswitchdControl" fails with
// code 7 naming the key (and leaves no flow), and with the key it sets the
// zone limits through that socket and the host port answers.
func TestPortmapVswitchdControl(t *testing.T) {
	requireSandbox(t)
	rundir := filepath.Dir(strings.TrimPrefix(ovsdbAddr, "unix:"))
	ctl := filepath.Join(rundir, "elsewhere", "vswitchd.ctl")
	pidFile := filepath.Join(rundir, "elsewhere", "vswitchd.pid")
	if err := os.MkdirAll(filepath.Dir(ctl), 0o755); err != nil {
		t.Fatal(err)
	}
	restartVswitchd(t, nil, "--pidfile="+pidFile, "--unixctl="+ctl)
	t.Cleanup(func() { restartVswitchdFrom(t, pidFile) })

	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmctl", nil)
	a := framework.NewContainer(t)
	caps := mappings(pm(8070, 80, "udp", ""))
	_, err := n.Add(a, "eth0", caps)
	if err == nil || cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), `"vswitchdControl"`) {
		t.Fatalf("ADD without vswitchdControl: got %v (code %d), want code 7 naming \"vswitchdControl\"", err, cniCode(err))
	}
	if fl := h.FlowsOf(t, flows.AttachmentCookie(a.ID, "eth0")); len(fl) != 0 {
		t.Errorf("failed ADD left flows: %v", fl)
	}
	n.Del(a, "eth0", nil)

	n = h.PortmapList(t, "1.0.0", "pmctl", map[string]any{"vswitchdControl": ctl, "conntrackLimit": 4321})
	n.MustAdd(t, a, "eth0", caps)
	t.Cleanup(func() { n.Del(a, "eth0", nil) })
	a.ServeUDP(t, 80)
	expect(t, h.Outside.NS, "udp", hp(nodeV4, 8070), a, outsideV4)
	out, err := run("ovs-appctl", "-t", ctl, "dpctl/ct-get-limits", "zone=64000")
	if err != nil || !strings.Contains(out, "zone=64000,limit=4321,") {
		t.Errorf("zone limits through %s: got %q, %v; want zone 64000 limited to 4321", ctl, out, err)
	}
}

// DEL flushes the attachment's conntrack entries, TCP ones included: from
// outside (DNAT zone), from another container (container zone) and hairpin
// (SNAT zone). Before DEL they are there, so the check after it can fail.
func TestPortmapDelFlushesConntrack(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmdelct", nil)
	a, b := framework.NewContainer(t), framework.NewContainer(t)
	ra := n.MustAdd(t, a, "eth0", mappings(pm(8085, 80, "tcp", ""), pm(5385, 53, "udp", "")))
	n.MustAdd(t, b, "eth0", nil)
	t.Cleanup(func() { n.Del(a, "eth0", nil); n.Del(b, "eth0", nil) })
	a.ServeTCP(t, 80)
	a.ServeUDP(t, 53)
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8085), a, outsideV4)
	expect(t, h.Outside.NS, "tcp", hp(nodeV6, 8085), a, outsideV6)
	expect(t, b.NS, "tcp", hp(nodeV4, 8085), a, "")
	expect(t, a.NS, "tcp", hp(nodeV4, 8085), a, "")
	expect(t, h.Outside.NS, "udp", hp(nodeV4, 5385), a, outsideV4)
	aV4, aV6 := framework.AddrOf(t, ra, false), framework.AddrOf(t, ra, true)
	// The attachment's connections: its address and one of its ports, as
	// the original direction's destination port (host port, or container
	// port after DNAT). Another test's attachment may have had the same
	// address, and its entries live on for their timeout.
	ownPort := func(l string) bool {
		for _, p := range []string{"8085", "5385", "80", "53"} {
			if strings.Contains(l, "dport="+p+")") {
				return true
			}
		}
		return false
	}
	entries := func() []string {
		var out []string
		for _, l := range strings.Split(appctl(t, "dpctl/dump-conntrack"), "\n") {
			if (strings.Contains(l, "="+aV4+",") || strings.Contains(l, "="+aV6+",")) && ownPort(l) &&
				(strings.Contains(l, "zone=64000") || strings.Contains(l, "zone=64001") || strings.Contains(l, "zone=64002")) {
				out = append(out, l)
			}
		}
		return out
	}
	before := entries()
	for _, want := range []string{"tcp,orig=(src=" + outsideV4, "tcp,orig=(src=" + outsideV6, "zone=64001", "zone=64002"} {
		if !slicesContainSubstring(before, want) {
			t.Errorf("before DEL: no entry %q of the attachment among\n%s", want, strings.Join(before, "\n"))
		}
	}
	if err := n.Del(a, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if left := entries(); len(left) != 0 {
		t.Errorf("after DEL: conntrack entries of the attachment left:\n%s", strings.Join(left, "\n"))
	}
}

func slicesContainSubstring(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}
