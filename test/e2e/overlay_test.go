package e2e

// The overlay (pkg/overlay) between two nodes on different subnets: each
// node is an Open vSwitch of its own in a network namespace of its own
// (framework.NewSandbox: ovsdb-server and ovs-vswitchd with a private run
// directory, a bridge on the suite's datapath), its InternalIP on its
// bridge's interface as in docs/design.md ("The node"), its uplink a port of
// the bridge; a third namespace routes between the two subnets. Each node
// has a pod (ovs-bridge, executed by libcni inside the node's namespace, as
// the node's runtime would), and the overlay is programmed by
// overlay.Sync, the agent's route pass, run in the node's namespace with
// podroutes.Plan's routes, as the agent runs it from the Node objects.
//
//	pod a 198.18.1.x --- node a brov 192.0.2.2/24 ===upl=== router 192.0.2.1 | 203.0.113.1 ===upl=== brov 203.0.113.2/24 node b --- pod b 198.18.2.x
//	  2001:db8:1::x            2001:db8:a::2/64             2001:db8:a::1 | 2001:db8:b::1             2001:db8:b::2/64            2001:db8:2::x
//	                     (pods' gateways 198.18.1.1, 2001:db8:1::1)                        (pods' gateways 198.18.2.1, 2001:db8:2::1)
//
// The tunnel runs over the nodes' IPv4 InternalIPs (one tunnel family per
// node) and carries both families of pods.

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/metrics"
	"github.com/ovsflow/ovs-cni/pkg/overlay"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
	"github.com/ovsflow/ovs-cni/pkg/reconcile"
	"github.com/ovsflow/ovs-cni/test/framework"
)

const ovBridge = "brov"

// overlayNode is one node of the lab.
type overlayNode struct {
	*framework.Sandbox
	name           string
	addr, addr6    netip.Prefix // its InternalIPs, on ovBridge
	router, route6 netip.Addr   // its default gateways
	pods, pods6    netip.Prefix // its pod ranges
	ep             endpoint.Endpoint
	cni            *framework.CNI
}

// newOverlayNode starts node name: its sandbox, bridge, uplink to router
// (whose end there gets routerAddr and routerAddr6), its InternalIPs addr
// and addr6 and its pods' network on pods and pods6.
func newOverlayNode(t *testing.T, router *framework.Container, name, addr, routerAddr, pods, addr6, routerAddr6, pods6 string) *overlayNode {
	t.Helper()
	n := &overlayNode{Sandbox: framework.NewSandbox(t, "ovsflow-ov"), name: name,
		addr: netip.MustParsePrefix(addr), router: netip.MustParseAddr(routerAddr), pods: netip.MustParsePrefix(pods),
		addr6: netip.MustParsePrefix(addr6), route6: netip.MustParseAddr(routerAddr6), pods6: netip.MustParsePrefix(pods6)}
	var err error
	if n.ep, err = endpoint.Parse(n.OVSDB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.logOnFailure(t) })
	// As deploy/node-prep.sh leaves a node's bridge: fail_mode=secure,
	// tagged as the suite's, with the suite's base flows (NORMAL, and the
	// drop of the node's own ICMPv6 redirects, which would send a pod
	// straight to the overlay's virtual MAC).
	n.Vsctl(t, "add-br", ovBridge, "--", "set", "bridge", ovBridge, "datapath_type="+framework.Datapath, "fail_mode=secure",
		"external_ids:"+ovsdb.KeyOwner+"="+ovsdb.OwnerValue)
	n.must(t, filepath.Join(framework.Env.BinDir, "ovs-portmap"), "reconcile", "-ovsdb", n.OVSDB)
	t.Logf("node %s: bridge %s, datapath_type %s", name, ovBridge, strings.TrimSpace(n.Vsctl(t, "get", "bridge", ovBridge, "datapath_type")))
	rif := "r" + name
	framework.MustRun(t, "ip", "-n", n.Name, "link", "add", "upl", "type", "veth", "peer", "name", rif, "netns", router.Name)
	n.must(t, "ip", "link", "set", "upl", "up")
	// The userspace datapath reads the uplink through a packet socket:
	// the node's stack must not answer on it (link.Isolate).
	n.must(t, "sysctl", "-qw", "net.ipv4.conf.upl.arp_ignore=8", "net.ipv6.conf.upl.disable_ipv6=1")
	n.Vsctl(t, "add-port", ovBridge, "upl")
	n.address(t)
	n.must(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	for _, args := range [][]string{
		{"ip", "addr", "add", routerAddr + "/24", "dev", rif},
		{"ip", "addr", "add", routerAddr6 + "/64", "dev", rif, "nodad"},
		{"ip", "link", "set", rif, "up"},
		// Userspace conntrack and the node's stack, behind a packet
		// socket, want complete checksums.
		{"ethtool", "-K", rif, "tx", "off"},
	} {
		if out, err := router.Exec(args...); err != nil {
			t.Fatalf("router: %v: %s", err, out)
		}
	}
	n.cni = framework.NewCNI(t, framework.Conflist("1.0.0", "overlay-"+name, map[string]any{
		"type": "ovs-bridge", "bridge": ovBridge, "ovsdb": n.OVSDB, "isGateway": true,
		"ipam": map[string]any{"type": "host-local", "dataDir": t.TempDir(),
			"ranges": []any{
				[]any{map[string]any{"subnet": pods, "gateway": n.pods.Addr().Next().String()}},
				[]any{map[string]any{"subnet": pods6, "gateway": n.pods6.Addr().Next().String()}},
			},
			"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}}},
	}), framework.NetNSExec{Name: n.Name})
	return n
}

// address puts the node's InternalIP on its bridge interface, with its
// default route (again after ovs-vswitchd re-created the interface).
func (n *overlayNode) address(t *testing.T) {
	t.Helper()
	n.must(t, "ip", "addr", "replace", n.addr.String(), "dev", ovBridge)
	n.must(t, "ip", "addr", "replace", n.addr6.String(), "dev", ovBridge, "nodad")
	n.must(t, "ip", "link", "set", ovBridge, "up")
	n.must(t, "ip", "route", "replace", "default", "via", n.router.String())
	n.must(t, "ip", "-6", "route", "replace", "default", "via", n.route6.String())
	n.must(t, "ethtool", "-K", ovBridge, "tx", "off")
}

func (n *overlayNode) must(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := n.Run(name, args...)
	if err != nil {
		t.Fatalf("node %s: %v", n.name, err)
	}
	return out
}

func (n *overlayNode) of() string { return framework.OFTarget(n.OVSDB, ovBridge) }

func (n *overlayNode) logOnFailure(t *testing.T) {
	if !t.Failed() {
		return
	}
	fl, _ := framework.Run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", n.of())
	ports, _ := framework.Run("ovs-vsctl", "--db="+n.OVSDB, "--columns=name,type,ofport,options,error,external_ids", "list", "Interface")
	routes, _ := n.Run("ip", "route")
	routes6, _ := n.Run("ip", "-6", "route")
	routes += routes6
	neigh, _ := n.Run("ip", "neigh")
	t.Logf("node %s:\nflows:\n%s\ninterfaces:\n%s\nroutes:\n%s\nneighbours:\n%s", n.name, fl, ports, routes, neigh)
}

// peer is the node as the other nodes' agents see its Node.
func (n *overlayNode) peer() podroutes.Peer {
	return podroutes.Peer{Name: n.name, PodCIDRs: []netip.Prefix{n.pods, n.pods6}, Addrs: []netip.Addr{n.addr.Addr(), n.addr6.Addr()}}
}

// sync is the agent's route pass on node n with mode, to the Nodes peers:
// podroutes.Plan, then overlay.Sync with the routes' sync, in the node's
// namespace.
func (n *overlayNode) sync(t *testing.T, mode overlay.Mode, peers ...*overlayNode) overlay.Result {
	t.Helper()
	return n.syncOver(t, overlay.Config{Mode: mode}, peers...)
}

// syncOver is sync with c's underlay.
func (n *overlayNode) syncOver(t *testing.T, c overlay.Config, peers ...*overlayNode) overlay.Result {
	t.Helper()
	var res overlay.Result
	err := n.NS.Do(func(ns.NetNS) error {
		me := n.peer()
		var ps []podroutes.Peer
		for _, p := range peers {
			ps = append(ps, p.peer())
		}
		local, err := podroutes.Local()
		if err != nil {
			return err
		}
		routes, skipped := podroutes.Plan(me, local, ps)
		if len(skipped) > 0 {
			return fmt.Errorf("not routed: %v", skipped)
		}
		links := map[bool]int{}
		for _, a := range []netip.Addr{n.addr.Addr(), n.addr6.Addr()} {
			if links[a.Is4()], err = podroutes.LinkOf(a); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), framework.Scaled(30*time.Second))
		defer cancel()
		cli, err := ovsdb.Dial(ctx, n.ep)
		if err != nil {
			return err
		}
		defer cli.Close()
		tb := podroutes.Table{Protocol: podroutes.DefaultProtocol}
		res, err = overlay.Sync(ctx, cli, n.ep, c, me, routes, ps, func(rs []podroutes.Route) error {
			_, err := tb.Sync(rs, links)
			return err
		})
		return err
	})
	if err != nil {
		t.Fatalf("node %s: route pass (%s over %s): %v", n.name, c.Mode, c.Underlay, err)
	}
	return res
}

// overlayPod is a pod of a node.
type overlayPod struct {
	*framework.Container
	v4, v6 netip.Addr
}

func (n *overlayNode) pod(t *testing.T) *overlayPod {
	t.Helper()
	c := framework.NewContainer(t)
	r := n.cni.MustAdd(t, c, "eth0", nil)
	t.Cleanup(func() { n.cni.Del(c, "eth0", nil) })
	return &overlayPod{Container: c, v4: netip.MustParseAddr(framework.AddrOf(t, r, false)), v6: netip.MustParseAddr(framework.AddrOf(t, r, true))}
}

// dropped is the packet count of the overlay's drop flow of table.
func (n *overlayNode) dropped(t *testing.T, table uint8) int {
	t.Helper()
	out, err := framework.Run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", n.of(),
		fmt.Sprintf("cookie=%s/-1,table=%d", flows.OverlayCookie(), table))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, fmt.Sprintf("priority=%d,", flows.PriorityOverlayDrop)) && !strings.Contains(l, fmt.Sprintf("priority=%d ", flows.PriorityOverlayDrop)) {
			continue
		}
		if m := regexp.MustCompile(`n_packets=(\d+)`).FindStringSubmatch(l); m != nil {
			k, _ := strconv.Atoi(m[1])
			return k
		}
	}
	t.Fatalf("node %s: no drop flow in table %d:\n%s", n.name, table, out)
	return 0
}

// answers dials from pod from to pod to's TCP and UDP port 80, over IPv4
// (v6: IPv6), and checks that to answered and saw from's own address.
func answers(from, to *overlayPod, v6 bool) error {
	src, dst := from.v4, to.v4
	if v6 {
		src, dst = from.v6, to.v6
	}
	for _, network := range []string{"tcp", "udp"} {
		got, err := framework.Dial(from.NS, network, hp(dst.String(), 80))
		if err != nil {
			return fmt.Errorf("%s %s -> %s: %w", network, src, dst, err)
		}
		if want := "hello from " + to.ID + " to " + hp(src.String(), 0); !strings.HasPrefix(got, strings.TrimSuffix(want, "0")) {
			return fmt.Errorf("%s %s -> %s: got %q, want %q...", network, src, dst, got, want)
		}
	}
	return nil
}

// bothWays: pods a and b answer each other over IPv4 and IPv6.
func bothWays(pa, pb *overlayPod) error {
	for _, v6 := range []bool{false, true} {
		if err := answers(pa, pb, v6); err != nil {
			return err
		}
		if err := answers(pb, pa, v6); err != nil {
			return err
		}
	}
	return nil
}

// TestOverlayAcrossSubnets: pods of two nodes on different subnets reach
// each other, TCP and UDP both ways, IPv4 and IPv6, through the nodes'
// Geneve tunnel, and not by host-gw (the control); a Service of node a
// (its own DNAT) reaches a backend on node b; the tunnel drops and counts
// a Geneve packet from an address that is no node's, and takes the same
// packet from the peer's address (the packet is well formed); after an
// ovs-vswitchd restart reconcile rebuilds the overlay's flows from the
// tunnel port's record; VXLAN carries them as Geneve does; a peer gone
// takes the tunnel, its flows, routes and neighbours with it; hybrid with
// a peer on the node's own subnet is host-gw and nothing of the tunnel;
// ovsflow-agent uninstall removes the tunnel.
func TestOverlayAcrossSubnets(t *testing.T) {
	requireSandbox(t)
	router := framework.NewContainer(t)
	if out, err := router.Exec("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
		t.Fatalf("router: %v: %s", err, out)
	}
	a := newOverlayNode(t, router, "a", "192.0.2.2/24", "192.0.2.1", "198.18.1.0/24", "2001:db8:a::2/64", "2001:db8:a::1", "2001:db8:1::/64")
	b := newOverlayNode(t, router, "b", "203.0.113.2/24", "203.0.113.1", "198.18.2.0/24", "2001:db8:b::2/64", "2001:db8:b::1", "2001:db8:2::/64")
	pa, pb := a.pod(t), b.pod(t)
	for _, p := range []*overlayPod{pa, pb} {
		p.ServeTCP(t, 80)
		p.ServeUDP(t, 80)
	}
	// The nodes reach each other through the router.
	framework.Eventually(t, 20*time.Second, "node a pings node b", func() error {
		if _, err := a.Run("ping", "-c", "1", "-W", "1", b.addr.Addr().String()); err != nil {
			return err
		}
		_, err := a.Run("ping", "-6", "-c", "1", "-W", "1", b.addr6.Addr().String())
		return err
	})

	// Control: host-gw, which needs one L2 segment, does not carry them.
	for _, n := range []struct{ self, peer *overlayNode }{{a, b}, {b, a}} {
		if res := n.self.sync(t, overlay.None, n.peer); res.Active || len(res.Plan.Tunnel) != 0 {
			t.Fatalf("node %s, overlay none: tunnelled %v", n.self.name, res.Plan.Tunnel)
		}
	}
	if got := a.must(t, "ip", "route", "show", "proto", fmt.Sprint(podroutes.DefaultProtocol)); !strings.Contains(got, "198.18.2.0/24 via 203.0.113.2 dev "+ovBridge) {
		t.Fatalf("node a, host-gw: routes %q", got)
	}
	for _, v6 := range []bool{false, true} {
		if err := answers(pa, pb, v6); err == nil {
			t.Fatalf("control: host-gw carries pod a to pod b across the subnets (IPv6 %v): the test proves nothing", v6)
		}
	}

	// The overlay: hybrid (the agent's default) tunnels a peer of another subnet.
	for _, n := range []struct{ self, peer *overlayNode }{{a, b}, {b, a}} {
		res := n.self.sync(t, overlay.Hybrid, n.peer)
		if !res.Active || len(res.Plan.Tunnel) != 2 || len(res.Plan.HostGW) != 0 || res.MTU != 1450 {
			t.Fatalf("node %s, hybrid: active %v, tunnel %v, host-gw %v, conflist MTU %d; want both ranges tunnelled, MTU 1450",
				n.self.name, res.Active, res.Plan.Tunnel, res.Plan.HostGW, res.MTU)
		}
	}
	// The record: one tunnel port, over OVSDB, tagged as the agent's.
	if got := a.Vsctl(t, "--bare", "--columns=name", "find", "Interface", "external_ids:"+ovsdb.KeyOwner+"="+ovsdb.OwnerAgentValue,
		"external_ids:"+ovsdb.KeyBridge+"="+ovBridge); got != overlay.PortName {
		t.Errorf("node a: interfaces of the agent's on %s: got %q, want %s", ovBridge, got, overlay.PortName)
	}
	for col, want := range map[string]string{"type": "geneve", "options:remote_ip": "flow", "options:key": "flow", "options:local_ip": "192.0.2.2"} {
		if got := strings.Trim(a.Vsctl(t, "get", "Interface", overlay.PortName, col), `"`); got != want {
			t.Errorf("node a's tunnel interface: %s %q, want %q", col, got, want)
		}
	}
	if got := a.must(t, "ip", "route", "show", "proto", fmt.Sprint(podroutes.DefaultProtocol)); !strings.Contains(got, "198.18.2.0/24 via "+overlay.NextHop4.String()+" dev "+ovBridge) ||
		!strings.Contains(got, "mtu 1450") {
		t.Errorf("node a, overlay: routes %q", got)
	}
	if got := a.must(t, "ip", "-6", "route", "show", "proto", fmt.Sprint(podroutes.DefaultProtocol)); !strings.Contains(got, "2001:db8:2::/64 via "+overlay.NextHop6.String()+" dev "+ovBridge) {
		t.Errorf("node a, overlay: IPv6 routes %q", got)
	}
	for _, hop := range []netip.Addr{overlay.NextHop4, overlay.NextHop6} {
		if got := a.must(t, "ip", "neigh", "show", hop.String(), "dev", ovBridge); !strings.Contains(got, flows.OverlayMAC.String()) || !strings.Contains(got, "PERMANENT") {
			t.Errorf("node a: the next hop %s's neighbour %q", hop, got)
		}
	}
	// Two classifiers, a send flow and a host-port reply flow per tunnelled
	// range, a receive flow per known node and range of this node, two
	// drops.
	ourFlows := framework.FlowsOf(t, a.of(), flows.OverlayCookie())
	if len(ourFlows) != 10 {
		t.Errorf("node a: %d overlay flows, want 10:\n%s", len(ourFlows), strings.Join(ourFlows, "\n"))
	}
	framework.Eventually(t, 30*time.Second, "pods a and b answer each other through the tunnel, IPv4", func() error {
		if err := answers(pa, pb, false); err != nil {
			return err
		}
		return answers(pb, pa, false)
	})
	framework.Eventually(t, 30*time.Second, "pods a and b answer each other through the tunnel, IPv6", func() error {
		return bothWays(pa, pb)
	})
	if t.Failed() {
		return
	}

	// ovs-portmap trace follows pod a's packets into the tunnel and out.
	traceTunnel(t, a, b, pa)

	// A Service as kube-proxy makes one on node a (its nft DNAT), whose
	// backend is pod b on node b: the request and its reply go through
	// node a's stack both ways, which un-DNATs the reply, as on host-gw.
	svc := filepath.Join(t.TempDir(), "svc.nft")
	rules := fmt.Sprintf(`table ip ovsflow_overlay_svc {
	chain prerouting {
		type nat hook prerouting priority -100; policy accept;
		ip daddr 198.51.100.80 tcp dport 80 dnat to %s:80
		ip daddr 198.51.100.80 udp dport 80 dnat to %s:80
	}
}
`, pb.v4, pb.v4)
	if err := os.WriteFile(svc, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	a.must(t, "nft", "-f", svc)
	framework.Eventually(t, 30*time.Second, "pod a reaches the Service on node a whose backend is pod b", func() error {
		for _, network := range []string{"tcp", "udp"} {
			got, err := framework.Dial(pa.NS, network, hp("198.51.100.80", 80))
			if err != nil {
				return fmt.Errorf("%s: %w", network, err)
			}
			// No masquerade: the backend saw pod a.
			if want := "hello from " + pb.ID + " to " + pa.v4.String() + ":"; !strings.HasPrefix(got, want) {
				return fmt.Errorf("%s: got %q, want %q...", network, got, want)
			}
		}
		return nil
	})

	// A Geneve packet from the router with another address than node b's
	// as its outer source: node a drops it and counts it.
	var mu sync.Mutex
	var heard []string
	pa.ServeUDPWith(t, 9, func(k int, addr net.Addr) []byte {
		mu.Lock()
		heard = append(heard, addr.String())
		mu.Unlock()
		return nil
	})
	heardFrom := func(src string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range heard {
			if strings.HasPrefix(h, src+":") {
				return true
			}
		}
		return false
	}
	inner := netip.MustParseAddr("198.18.2.77")
	forged := netip.MustParseAddr("198.51.100.99")
	before := a.dropped(t, flows.TableOverlayReceive)
	framework.Eventually(t, 20*time.Second, "node a counts the Geneve packet from "+forged.String(), func() error {
		sendGeneve(t, router, forged, a.addr.Addr(), inner, pa.v4, 9, flows.OverlayVNI)
		if got := a.dropped(t, flows.TableOverlayReceive); got <= before {
			return fmt.Errorf("%s drops in table %d, as before", fmt.Sprint(got), flows.TableOverlayReceive)
		}
		return nil
	})
	if heardFrom(inner.String()) {
		t.Errorf("pod a got the Geneve packet from %s", forged)
	}
	// The node agent's metrics count it by reason.
	srv := httptest.NewServer(metrics.New(metrics.Config{OVSDB: a.ep, Fresh: time.Millisecond}).Handler())
	t.Cleanup(srv.Close)
	refused := map[string]string{"bridge": ovBridge, "reason": flows.ReasonOverlayRefused}
	if v, ok := value(scrape(t, srv.URL), metrics.NameOverlayDropped, refused); !ok || v < 1 {
		t.Errorf("%s %v: got %v, %v; want at least 1", metrics.NameOverlayDropped, refused, v, ok)
	}
	// A pass with nothing changed leaves the flows, and their counters.
	counted := a.dropped(t, flows.TableOverlayReceive)
	a.sync(t, overlay.Hybrid, b)
	if got := a.dropped(t, flows.TableOverlayReceive); got < counted {
		t.Errorf("a pass with nothing changed reset the drop counter from %d to %d", counted, got)
	}
	// From node b's address with another key: not the overlay's, dropped.
	keyed := netip.MustParseAddr("198.18.2.78")
	counted = a.dropped(t, flows.TableOverlayReceive)
	framework.Eventually(t, 20*time.Second, "node a counts the Geneve packet with key 0x77", func() error {
		sendGeneve(t, router, b.addr.Addr(), a.addr.Addr(), keyed, pa.v4, 9, 0x77)
		if got := a.dropped(t, flows.TableOverlayReceive); got <= counted {
			return fmt.Errorf("%d drops in table %d, as before", got, flows.TableOverlayReceive)
		}
		return nil
	})
	if heardFrom(keyed.String()) {
		t.Errorf("pod a got the Geneve packet with key 0x77")
	}
	// The same packet from node b's address is a known node's: it is well
	// formed, and what the tunnel takes.
	framework.Eventually(t, 20*time.Second, "pod a gets the Geneve packet from node b's address", func() error {
		sendGeneve(t, router, b.addr.Addr(), a.addr.Addr(), inner, pa.v4, 9, flows.OverlayVNI)
		if !heardFrom(inner.String()) {
			return fmt.Errorf("pod a heard only %v", heard)
		}
		return nil
	})

	// ovs-vswitchd restarts on node a: its flows go, and its bridge
	// interface comes back without the node's address, routes and
	// neighbours. Reconcile rebuilds the overlay's flows from the record;
	// the agent's next route pass (which follows every reconcile pass) the
	// routes and neighbours.
	a.Control(t, "stop-vswitchd")
	a.Control(t, "start-vswitchd")
	framework.Eventually(t, 30*time.Second, "node a's bridge interface is back", func() error {
		_, err := a.Run("ip", "link", "show", ovBridge)
		return err
	})
	a.address(t)
	framework.Eventually(t, 30*time.Second, "reconcile on node a", func() error {
		return a.NS.Do(func(ns.NetNS) error {
			ctx, cancel := context.WithTimeout(context.Background(), framework.Scaled(30*time.Second))
			defer cancel()
			_, err := reconcile.Once(ctx, a.ep, "")
			return err
		})
	})
	slices.Sort(ourFlows)
	if got := framework.FlowsOf(t, a.of(), flows.OverlayCookie()); !slices.Equal(slices.Sorted(slices.Values(got)), ourFlows) {
		t.Errorf("node a after an ovs-vswitchd restart and reconcile: overlay flows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(ourFlows, "\n"))
	}
	a.sync(t, overlay.Hybrid, b)
	framework.Eventually(t, 30*time.Second, "pods a and b answer each other after the restart", func() error {
		return bothWays(pa, pb)
	})

	// -overlay vxlan: the same port, its type changed in place.
	for _, n := range []struct{ self, peer *overlayNode }{{a, b}, {b, a}} {
		if res := n.self.sync(t, overlay.VXLAN, n.peer); !res.Active || len(res.Plan.Tunnel) != 2 {
			t.Fatalf("node %s, vxlan: active %v, tunnel %v", n.self.name, res.Active, res.Plan.Tunnel)
		}
		if got := n.self.Vsctl(t, "get", "Interface", overlay.PortName, "type"); got != "vxlan" {
			t.Errorf("node %s, vxlan: tunnel type %q", n.self.name, got)
		}
	}
	framework.Eventually(t, 30*time.Second, "pods a and b answer each other through VXLAN", func() error {
		return bothWays(pa, pb)
	})

	// -underlay ipv6: the same port from the nodes' IPv6 InternalIPs, its
	// local_ip changed in place; both families of pods over it, the pods'
	// MTU 70 bytes less than the uplink's.
	for _, n := range []struct{ self, peer *overlayNode }{{a, b}, {b, a}} {
		res := n.self.syncOver(t, overlay.Config{Mode: overlay.Geneve, Underlay: overlay.IPv6}, n.peer)
		if !res.Active || len(res.Plan.Tunnel) != 2 || res.MTU != 1430 || res.Facts.Local.Addr() != n.self.addr6.Addr() {
			t.Fatalf("node %s, geneve over IPv6: active %v, tunnel %v, MTU %d, from %s; want both ranges tunnelled from %s, MTU 1430",
				n.self.name, res.Active, res.Plan.Tunnel, res.MTU, res.Facts.Local, n.self.addr6.Addr())
		}
		for col, want := range map[string]string{"type": "geneve", "options:local_ip": n.self.addr6.Addr().String()} {
			if got := strings.Trim(n.self.Vsctl(t, "get", "Interface", overlay.PortName, col), `"`); got != want {
				t.Errorf("node %s, geneve over IPv6: tunnel %s %q, want %q", n.self.name, col, got, want)
			}
		}
	}
	if got := strings.Join(framework.FlowsOf(t, a.of(), flows.OverlayCookie()), "\n"); !strings.Contains(got, "tun_ipv6_src="+b.addr6.Addr().String()) ||
		!strings.Contains(got, "NXM_NX_TUN_IPV6_DST") {
		t.Errorf("node a, geneve over IPv6: overlay flows\n%s", got)
	}
	framework.Eventually(t, 30*time.Second, "pods a and b answer each other through Geneve over IPv6", func() error {
		return bothWays(pa, pb)
	})
	// ovs-portmap trace follows the pod's packet into the IPv6 tunnel.
	args := []string{"trace", "-ovsdb", a.OVSDB, "-container", pa.ID, "-q", "tunnel"}
	traced, err := framework.Run(filepath.Join(framework.Env.BinDir, "ovs-portmap"), args...)
	if want := fmt.Sprintf("tun_dst %s, tun_id %#x", b.addr6.Addr(), flows.OverlayVNI); err != nil || !strings.Contains(traced, want) {
		t.Errorf("ovs-portmap %s over IPv6: %v\ngot  %s\nwant ...%s...", strings.Join(args, " "), err, traced, want)
	}
	// Path MTU discovery through the tunnel, TCP: the pods' own MTU (the
	// lab's conflist gives none: 1500) is larger than the tunnel's 1430;
	// 2 MB sent with DF arrive whole once the node's "fragmentation
	// needed" / "packet too big" lowered the sender's path MTU.
	if got, err := pa.Exec("cat", "/sys/class/net/eth0/mtu"); err != nil || strings.TrimSpace(got) != "1500" {
		t.Fatalf("pod a's MTU %q (%v): want 1500, above the tunnel's 1430 (else path MTU discovery is not asked for)", got, err)
	}
	const bulk = 2_000_000
	for _, p := range []*overlayPod{pa, pb} {
		framework.Serve(t, p.NS, 81, func(c net.Conn) {
			defer c.Close()
			k, _ := io.Copy(io.Discard, c)
			fmt.Fprint(c, k)
		})
	}
	for _, p := range [][2]*overlayPod{{pa, pb}, {pb, pa}} {
		for _, dst := range []netip.Addr{p[1].v4, p[1].v6} {
			if got, err := sendBulk(p[0].NS, hp(dst.String(), 81), bulk); err != nil || got != fmt.Sprint(bulk) {
				t.Errorf("%d bytes over TCP to %s through Geneve over IPv6: the server counted %q, %v", bulk, dst, got, err)
			}
		}
	}
	// A pod whose own MTU is larger than the tunnel's learns the path's
	// from the node (fragmentation needed, packet too big: the first
	// datagram's answer is EMSGSIZE) and fragments the next to fit.
	for _, p := range [][2]*overlayPod{{pa, pb}, {pb, pa}} {
		for _, dst := range []netip.Addr{p[1].v4, p[1].v6} {
			framework.Eventually(t, 20*time.Second, fmt.Sprintf("a 4,000-byte datagram to %s through Geneve over IPv6 answered", dst), func() error {
				got, err := framework.DialDatagram(p[0].NS, hp(dst.String(), 80), 4000)
				if want := "hello from " + p[1].ID; err != nil || !strings.HasPrefix(got, want) {
					return fmt.Errorf("got %q, %v; want %q...", got, err, want)
				}
				return nil
			})
		}
	}

	// Node b's Node is deleted: node a's tunnel goes, and all of it.
	if res := a.sync(t, overlay.Hybrid); res.Active || !res.Withdrawn {
		t.Errorf("node a without peers: active %v, withdrawn %v; want the tunnel withdrawn", res.Active, res.Withdrawn)
	}
	if got := a.Vsctl(t, "--columns=name", "find", "Interface", "external_ids:"+ovsdb.KeyOwner+"="+ovsdb.OwnerAgentValue); got != "" {
		t.Errorf("node a without peers: tunnel interfaces %q", got)
	}
	if got := framework.FlowsOf(t, a.of(), flows.OverlayCookie()); len(got) != 0 {
		t.Errorf("node a without peers: overlay flows\n%s", strings.Join(got, "\n"))
	}
	if got := a.must(t, "ip", "route", "show", "proto", fmt.Sprint(podroutes.DefaultProtocol)); got != "" {
		t.Errorf("node a without peers: routes %q", got)
	}
	for _, hop := range []netip.Addr{overlay.NextHop4, overlay.NextHop6} {
		if got := a.must(t, "ip", "neigh", "show", hop.String()); got != "" {
			t.Errorf("node a without peers: neighbour %q", got)
		}
	}
	if got := a.must(t, "ip", "-6", "route", "show", "proto", fmt.Sprint(podroutes.DefaultProtocol)); got != "" {
		t.Errorf("node a without peers: IPv6 routes %q", got)
	}

	// Hybrid with every Node on this node's subnet (a Node c beside node
	// a) is host-gw, as without the overlay: no tunnel, no flow, no MTU.
	c := &overlayNode{name: "c", addr: netip.MustParsePrefix("192.0.2.3/24"), addr6: netip.MustParsePrefix("2001:db8:a::3/64"),
		pods: netip.MustParsePrefix("198.18.3.0/24"), pods6: netip.MustParsePrefix("2001:db8:3::/64")}
	if res := a.sync(t, overlay.Hybrid, c); res.Active || len(res.Plan.Tunnel) != 0 || res.MTU != 0 || res.Withdrawn {
		t.Errorf("node a, hybrid, node c on its subnet: active %v, tunnel %v, MTU %d, withdrawn %v; want host-gw only", res.Active, res.Plan.Tunnel, res.MTU, res.Withdrawn)
	}
	if got := a.must(t, "ip", "route", "show", "proto", fmt.Sprint(podroutes.DefaultProtocol)); strings.TrimSpace(got) != "198.18.3.0/24 via 192.0.2.3 dev "+ovBridge+" onlink" {
		t.Errorf("node a, hybrid, node c on its subnet: routes %q, want host-gw's", got)
	}
	if got := a.Vsctl(t, "--bare", "--columns=name", "find", "Interface", "external_ids:"+ovsdb.KeyOwner+"="+ovsdb.OwnerAgentValue); got != "" {
		t.Errorf("node a, hybrid, node c on its subnet: tunnel interfaces %q", got)
	}

	// ovsflow-agent uninstall takes the tunnel with everything else of the
	// suite's: its port, flows, neighbours and the routes into it.
	if res := a.sync(t, overlay.Hybrid, b, c); !res.Active {
		t.Fatal("node a, hybrid, nodes b and c: no tunnel")
	}
	out, err := a.Run(filepath.Join(framework.Env.BinDir, "ovsflow-agent"), "uninstall", "-ovsdb", a.OVSDB, "-plugin-src", "",
		"-cni-bin-dir", t.TempDir(), "-cni-conf-dir", t.TempDir(), "-conf-template", "/nonexistent/10-ovsflow.conflist")
	t.Logf("uninstall said:\n%s", out)
	if err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	if !strings.Contains(out, "removed the overlay's tunnel port") {
		t.Errorf("uninstall did not say it removed the tunnel port")
	}
	if got := a.Vsctl(t, "--bare", "--columns=name", "find", "Interface", "external_ids:"+ovsdb.KeyOwner+"="+ovsdb.OwnerAgentValue); got != "" {
		t.Errorf("after uninstall: tunnel interfaces %q", got)
	}
	if got := framework.FlowsOf(t, a.of(), flows.OverlayCookie()); len(got) != 0 {
		t.Errorf("after uninstall: overlay flows\n%s", strings.Join(got, "\n"))
	}
	for _, fam := range []string{"-4", "-6"} {
		if got := a.must(t, "ip", fam, "route", "show", "proto", fmt.Sprint(podroutes.DefaultProtocol)); got != "" {
			t.Errorf("after uninstall: routes %q", got)
		}
	}
	for _, hop := range []netip.Addr{overlay.NextHop4, overlay.NextHop6} {
		if got := a.must(t, "ip", "neigh", "show", hop.String()); got != "" {
			t.Errorf("after uninstall: neighbour %q", got)
		}
	}
}

// sendBulk sends size bytes over TCP from netns n to addr, closes its
// side and returns what the server answered (its count).
func sendBulk(n ns.NetNS, addr string, size int) (string, error) {
	var out string
	err := n.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(framework.Scaled(60 * time.Second)))
		if _, err := io.Copy(c, io.LimitReader(zeros{}, int64(size))); err != nil {
			return err
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
		b, err := io.ReadAll(c)
		out = string(b)
		return err
	})
	return out, err
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// traceTunnel asks `ovs-portmap trace` the overlay's questions about pod
// pa of node a, whose tunnel goes to node b: the pod's packet to a pod of
// node b reaches the node (LOCAL), and the node's routed packet goes into
// the tunnel to node b's InternalIP with the overlay's VNI, over IPv4 and
// IPv6; an address that no peer's range holds is dropped in table 50; a
// packet from node b through the tunnel is the node's to route to the pod,
// and one from an address that is no node's is dropped in table 51.
func traceTunnel(t *testing.T, a, b *overlayNode, pa *overlayPod) {
	t.Helper()
	ofport := a.Vsctl(t, "get", "Interface", overlay.PortName, "ofport")
	tunnel := fmt.Sprintf("tunnel %s (port %s)", overlay.PortName, ofport)
	into := regexp.QuoteMeta(fmt.Sprintf("into %s, tun_dst %s, tun_id %#x (the overlay's send to a peer's node, table %d, priority %d)",
		tunnel, b.addr.Addr(), flows.OverlayVNI, flows.TableOverlaySend, flows.PriorityOverlayPeer))
	toNode := regexp.QuoteMeta("from the pod to the node: NORMAL: to the learned port LOCAL (") + `[^;]*\); `
	routed := func(dst string) string {
		return regexp.QuoteMeta("then the node routes it to " + dst + " via the overlay's next hop: ")
	}
	delivered := regexp.QuoteMeta(fmt.Sprintf("from %s through %s: to LOCAL, the node routes it to the pod (the overlay's delivery to the node from a known node, table %d, priority %d)",
		b.addr.Addr(), tunnel, flows.TableOverlayReceive, flows.PriorityOverlayPeer))
	for _, tc := range []struct {
		name string
		args []string
		want string // a regular expression of the whole line
	}{
		{"tunnel", []string{"-q", "tunnel"}, toNode + routed("198.18.2.1") + into},
		{"tunnel-ipv6", []string{"-q", "tunnel", "-6"}, toNode + routed("2001:db8:2::1") + into},
		{"tunnel-dst", []string{"-q", "tunnel", "-dst", "198.18.2.77"}, toNode + routed("198.18.2.77") + into},
		{"tunnel-no-peer", []string{"-q", "tunnel", "-dst", "198.51.100.5"}, toNode + routed("198.51.100.5") +
			regexp.QuoteMeta(fmt.Sprintf("dropped by the overlay's drop of what no tunnelled peer's range holds (table %d, priority %d)", flows.TableOverlaySend, flows.PriorityOverlayDrop))},
		{"fromtunnel", []string{"-q", "fromtunnel"}, delivered},
		{"fromtunnel-ipv6", []string{"-q", "fromtunnel", "-6"}, delivered},
		{"fromtunnel-forged", []string{"-q", "fromtunnel", "-tun-src", "198.51.100.99"}, regexp.QuoteMeta(fmt.Sprintf(
			"from 198.51.100.99 through %s: dropped by the overlay's drop of a tunnelled packet from an unknown node or not for this node's pods (table %d, priority %d)",
			tunnel, flows.TableOverlayReceive, flows.PriorityOverlayDrop))},
	} {
		t.Run("trace-"+tc.name, func(t *testing.T) {
			args := append([]string{"trace", "-ovsdb", a.OVSDB, "-container", pa.ID}, tc.args...)
			out, err := framework.Run(filepath.Join(framework.Env.BinDir, "ovs-portmap"), args...)
			got := strings.TrimSpace(out)
			t.Logf("ovs-portmap %s\n%s", strings.Join(args, " "), got)
			if err != nil || !regexp.MustCompile("^"+tc.want+"$").MatchString(got) {
				raw, _ := framework.Run(filepath.Join(framework.Env.BinDir, "ovs-portmap"), append(args, "-raw")...)
				t.Errorf("ovs-portmap %s: %v\ngot  %s\nwant %s\n%s", strings.Join(args, " "), err, got, tc.want, raw)
			}
		})
	}
}

// sendGeneve sends, from netns from, a Geneve packet from outerSrc to
// outerDst's port 6081 (a raw socket: any source), carrying a UDP datagram
// from innerSrc to innerDst:port.
func sendGeneve(t *testing.T, from *framework.Container, outerSrc, outerDst, innerSrc, innerDst netip.Addr, port uint16, vni uint32) {
	t.Helper()
	payload := []byte("geneve")
	udp := func(sport, dport uint16, body []byte) []byte {
		b := make([]byte, 8, 8+len(body))
		binary.BigEndian.PutUint16(b[0:], sport)
		binary.BigEndian.PutUint16(b[2:], dport)
		binary.BigEndian.PutUint16(b[4:], uint16(8+len(body)))
		return append(b, body...) // checksum 0: none (IPv4)
	}
	ipv4 := func(src, dst netip.Addr, body []byte) []byte {
		h := make([]byte, 20, 20+len(body))
		h[0], h[8], h[9] = 0x45, 64, syscall.IPPROTO_UDP
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(body)))
		s, d := src.As4(), dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(h[i:]))
		}
		for sum > 0xffff {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
		return append(h, body...)
	}
	frame := append([]byte{0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00}, ipv4(innerSrc, innerDst, udp(4000, port, payload))...)
	geneve := append([]byte{0, 0, 0x65, 0x58, byte(vni >> 16), byte(vni >> 8), byte(vni), 0}, frame...)
	pkt := ipv4(outerSrc, outerDst, udp(50000, 6081, geneve))
	err := from.NS.Do(func(ns.NetNS) error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		return syscall.Sendto(fd, pkt, 0, &syscall.SockaddrInet4{Addr: outerDst.As4()})
	})
	if err != nil {
		t.Fatalf("sending a Geneve packet from %s: %v", outerSrc, err)
	}
}
