package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// gatewayV4 is the containers' gateway on the bridge's internal interface
// (bridgeConf): the address the node's own connections from 127.0.0.1 leave
// with, once masqueraded on their way out of that interface.
const gatewayV4 = "192.0.2.1"

// routeLocalnetOf reads route_localnet of interface name in this netns.
func routeLocalnetOf(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc/sys/net/ipv4/conf", name, "route_localnet"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// dialFrom is dial from the node with the local address bound to src, as
// `curl --interface src` does.
func dialFrom(src, network, addr string) (string, error) {
	d := net.Dialer{Timeout: 3 * time.Second}
	if network == "udp" {
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(src)}
	} else {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	conn, err := d.DialContext(context.Background(), network, addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	if network == "udp" {
		if _, err := conn.Write([]byte("ping")); err != nil {
			return "", err
		}
	}
	buf := make([]byte, 1500)
	n, err := conn.Read(buf)
	return string(buf[:n]), err
}

// Host ports on the node's loopback address: a mapping with hostIP
// 127.0.0.1, and one without a hostIP, answer the node's own processes at
// 127.0.0.1:hostPort, TCP and UDP, and the container sees the node's
// address on the bridge (the masquerade), or the address the client bound
// (Kubernetes' HostPort conformance test: curl --interface NODE-IP
// 127.0.0.1:PORT). Kubernetes' scenario: the same host port on 127.0.0.1
// and on the node's address, and on the node's address for another
// protocol, are three pods that do not conflict; the same one twice on
// 127.0.0.1 conflicts. ::1 is not served. After DEL nothing answers and the
// elements are gone.
func TestPortmapLocalhost(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmlo", nil)
	lo, node, nodeUDP, all := framework.NewContainer(t), framework.NewContainer(t), framework.NewContainer(t), framework.NewContainer(t)
	for _, c := range []struct {
		c    *framework.Container
		caps map[string]any
	}{
		{lo, mappings(pm(54323, 8080, "tcp", "127.0.0.1"), pm(54324, 53, "udp", "127.0.0.1"))},
		{node, mappings(pm(54323, 8080, "tcp", nodeV4))},
		{nodeUDP, mappings(pm(54323, 8080, "udp", nodeV4))},
		{all, mappings(pm(54325, 80, "tcp", ""), pm(54325, 53, "udp", ""))},
	} {
		n.MustAdd(t, c.c, "eth0", c.caps)
		t.Cleanup(func() { n.Del(c.c, "eth0", nil) })
	}
	lo.ServeTCP(t, 8080)
	lo.ServeUDP(t, 53)
	node.ServeTCP(t, 8080)
	nodeUDP.ServeUDP(t, 8080)
	all.ServeTCP(t, 80)
	all.ServeUDP(t, 53)

	if got := routeLocalnetOf(t, h.Bridge); got != "1" {
		t.Errorf("route_localnet of %s: got %s, want 1", h.Bridge, got)
	}
	if got := routeLocalnetOf(t, "all"); got != "0" {
		t.Errorf("route_localnet of all: got %s, want 0 (only the bridge interface's)", got)
	}
	// The node's own processes, at 127.0.0.1.
	expect(t, nil, "tcp", hp("127.0.0.1", 54323), lo, gatewayV4+":")
	expect(t, nil, "udp", hp("127.0.0.1", 54324), lo, gatewayV4+":")
	expect(t, nil, "tcp", hp("127.0.0.1", 54325), all, gatewayV4+":")
	expect(t, nil, "udp", hp("127.0.0.1", 54325), all, gatewayV4+":")
	// The conformance test's client: bound to the node's address.
	if got, err := dialFrom(nodeV4, "tcp", hp("127.0.0.1", 54323)); err != nil || !strings.HasPrefix(got, "hello from "+lo.ID+" to "+nodeV4+":") {
		t.Errorf("tcp 127.0.0.1:54323 from %s: got %q, %v; want an answer from %s that saw %s", nodeV4, got, err, lo.ID, nodeV4)
	}
	// The same host port on the node's address, TCP and UDP: the other two.
	expect(t, nil, "tcp", hp(nodeV4, 54323), node, "")
	expect(t, nil, "udp", hp(nodeV4, 54323), nodeUDP, "")
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 54323), node, outsideV4)
	expect(t, h.Outside.NS, "udp", hp(nodeV4, 54323), nodeUDP, outsideV4)
	// A mapping without a hostIP is on every node address as before.
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 54325), all, outsideV4)
	// ::1 is not served: IPv6 drops ::1 off lo, so no reply could come back.
	if got, err := framework.Dial(nil, "tcp", hp("::1", 54325)); err == nil {
		t.Errorf("tcp [::1]:54325: got %q, want no answer (::1 is not served)", got)
	}
	// 127.0.0.1:54323/tcp is held: a second holder is refused.
	other := framework.NewContainer(t)
	_, err := n.Add(other, "eth0", mappings(pm(54323, 8080, "tcp", "127.0.0.1")))
	t.Cleanup(func() { n.Del(other, "eth0", nil) })
	if err == nil || !strings.Contains(err.Error(), lo.ID) || cniCode(err) != types.ErrInvalidNetworkConfig {
		t.Errorf("a second 127.0.0.1:54323/tcp: got %v (code %d), want code 7 naming %s", err, cniCode(err), lo.ID)
	}
	expect(t, nil, "tcp", hp("127.0.0.1", 54323), lo, gatewayV4+":")

	// DEL: nothing answers at 127.0.0.1, and the elements are gone.
	for _, c := range []*framework.Container{lo, all} {
		if err := n.Del(c, "eth0", nil); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	for _, a := range []struct{ network, addr string }{
		{"tcp", hp("127.0.0.1", 54323)}, {"udp", hp("127.0.0.1", 54324)},
		{"tcp", hp("127.0.0.1", 54325)}, {"udp", hp("127.0.0.1", 54325)},
	} {
		if got, err := framework.Dial(nil, a.network, a.addr); err == nil {
			t.Errorf("after DEL: %s %s answered %q", a.network, a.addr, got)
		}
	}
	out, err := run("nft", "list", "map", "ip", "ovsflow_hostport", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"54323", "54324", "54325"} {
		if strings.Contains(out, port) {
			t.Errorf("after DEL: elements of port %s left:\n%s", port, out)
		}
	}
	expect(t, nil, "tcp", hp(nodeV4, 54323), node, "")
}

// udpCatcher listens for UDP on addr in netns n (nil: the node) and
// reports the payload of every datagram it receives.
func udpCatcher(t *testing.T, n ns.NetNS, addr string) <-chan string {
	t.Helper()
	var pc net.PacketConn
	listen := func(ns.NetNS) error {
		var err error
		pc, err = net.ListenPacket("udp4", addr)
		return err
	}
	var err error
	if n == nil {
		err = listen(nil)
	} else {
		err = n.Do(listen)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	got := make(chan string, 64)
	go func() {
		buf := make([]byte, 1500)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte("answer"), from)
			got <- string(buf[:k])
		}
	}()
	return got
}

// received waits for payload on got, up to d.
func received(got <-chan string, payload string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case p := <-got:
			if p == payload {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// CVE-2020-8558: with route_localnet on for the bridge's internal
// interface (loopback host ports need it), a packet to 127.0.0.0/8 from
// the wire is no longer martian there. A neighbour on the node's segment
// (the outside netns, through the uplink) and a container on the bridge
// send UDP, addressed to the node's MAC, to 127.0.0.1: at a service of the
// node's bound to 0.0.0.0 (so that it listens on 127.0.0.1 too) and at a
// loopback host port. Protected: neither the service nor the container
// receives them. Controls: the same frame to the node's address is
// received; and with the guard chain flushed by hand, the attack reaches
// the service, so the guard is what stops it (reconcile puts it back).
func TestAttackHostPortLoopback(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmloatk", nil)
	pub, peer := framework.NewContainer(t), framework.NewContainer(t)
	n.MustAdd(t, pub, "eth0", mappings(pm(54330, 53, "udp", "")))
	t.Cleanup(func() { n.Del(pub, "eth0", nil) })
	rp := n.MustAdd(t, peer, "eth0", nil)
	t.Cleanup(func() { n.Del(peer, "eth0", nil) })
	if got := routeLocalnetOf(t, h.Bridge); got != "1" {
		t.Fatalf("route_localnet of %s: got %s, want 1: the test proves nothing", h.Bridge, got)
	}
	service := udpCatcher(t, nil, ":54331")
	hostPort := udpCatcher(t, pub.NS, ":53")
	// The loopback host port answers the node itself.
	if got, err := framework.Dial(nil, "udp", hp("127.0.0.1", 54330)); err != nil || got != "answer" {
		t.Fatalf("udp 127.0.0.1:54330 from the node: got %q, %v; want the container's answer", got, err)
	}
	ifi, err := net.InterfaceByName(h.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	nodeMAC := ifi.HardwareAddr
	macOf := func(n ns.NetNS) net.HardwareAddr {
		var mac net.HardwareAddr
		if err := n.Do(func(ns.NetNS) error {
			i, err := net.InterfaceByName("eth0")
			if err == nil {
				mac = i.HardwareAddr
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return mac
	}
	loopback, node := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr(nodeV4)
	senders := []struct {
		name string
		n    ns.NetNS
		src  netip.Addr
	}{
		{"neighbour", h.Outside.NS, netip.MustParseAddr(outsideV4)},
		{"container", peer.NS, netip.MustParseAddr(framework.AddrOf(t, rp, false))},
	}
	seq := 0
	send := func(t *testing.T, from ns.NetNS, src, dst netip.Addr, dport uint16) string {
		t.Helper()
		seq++
		payload := fmt.Sprintf("attack-%d", seq)
		s := sender(t, from, "eth0")
		mustSend(t, s, ethFrame(nodeMAC, macOf(from), etherIPv4, udp4(src, dst, uint16(41000+seq), dport, []byte(payload))))
		return payload
	}
	// A datagram the guard lets through arrives within milliseconds; one
	// second bounds the wait for one that must not.
	const within = time.Second
	for _, s := range senders {
		t.Run(s.name, func(t *testing.T) {
			if p := send(t, s.n, s.src, node, 54331); !received(service, p, framework.Scaled(5*time.Second)) {
				t.Errorf("control: the node's service did not receive %s:54331 from %s", nodeV4, s.name)
			}
			if p := send(t, s.n, s.src, loopback, 54331); received(service, p, within) {
				t.Errorf("the node's service received a datagram to 127.0.0.1:54331 from %s", s.name)
			}
			if p := send(t, s.n, s.src, loopback, 54330); received(hostPort, p, within) {
				t.Errorf("the container received a datagram to the loopback host port 127.0.0.1:54330 from %s", s.name)
			}
		})
	}

	// Without the guard, the neighbour's attack reaches the service: the
	// guard is what stops it. Reconcile declares it again.
	if _, err := run("nft", "flush", "chain", "ip", "ovsflow_hostport", "localnet_in"); err != nil {
		t.Fatal(err)
	}
	if p := send(t, h.Outside.NS, senders[0].src, loopback, 54331); !received(service, p, framework.Scaled(5*time.Second)) {
		t.Errorf("without the guard: the node's service did not receive the neighbour's datagram to 127.0.0.1:54331; the attack is not real")
	}
	if out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr); err != nil {
		t.Fatalf("reconcile: %v: %s", err, out)
	}
	if p := send(t, h.Outside.NS, senders[0].src, loopback, 54331); received(service, p, within) {
		t.Errorf("after reconcile: the node's service received the neighbour's datagram to 127.0.0.1:54331")
	}
}
