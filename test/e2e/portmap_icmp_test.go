package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// serveBulk answers every TCP connection with size bytes, then closes it.
func (c *container) serveBulk(t *testing.T, port, size int) {
	t.Helper()
	var l net.Listener
	err := c.ns.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	payload := bytes.Repeat([]byte{'b'}, size)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				conn.SetDeadline(time.Now().Add(20 * time.Second))
				conn.Write(payload)
			}()
		}
	}()
}

// Path MTU discovery through a host port: the client sits behind a router
// (the outside netns) whose link to it has an MTU of 1280 on the router's
// side, so the client announces an MSS for 1500 and the container's
// full-sized segments (DF set, as Linux sends TCP) cannot pass: the router
// answers with ICMP fragmentation needed / packet too big to their source,
// the node's address. Translated to the container (+rel), they make it send
// smaller segments and the 200 KB transfer completes, IPv4 and IPv6;
// untranslated, the node drops them and the transfer stalls.
func TestPortmapPathMTU(t *testing.T) {
	requireSandbox(t)
	h := newOVSHost(t)
	n := h.portmapList(t, "1.0.0", "pmpmtu", nil)
	a := newContainer(t)
	n.mustAdd(t, a, "eth0", mappings(pm(8100, 80, "tcp", "")))
	t.Cleanup(func() { n.del(a, "eth0", nil) })
	const size = 200 << 10
	a.serveBulk(t, 80, size)

	client := newContainer(t)
	router := h.outside
	if _, err := run("ip", "-n", router.name, "link", "add", "cl0", "mtu", "1280", "type", "veth", "peer", "name", "eth0", "netns", client.name); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"ip", "addr", "add", "203.0.113.1/24", "dev", "cl0"},
		{"ip", "addr", "add", "2001:db8:203::1/64", "dev", "cl0", "nodad"},
		{"ip", "link", "set", "cl0", "up"},
		{"ethtool", "-K", "cl0", "tx", "off"},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"},
	} {
		if _, err := router.exec(args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "set", "eth0", "mtu", "1500", "up"},
		{"ip", "addr", "add", "203.0.113.2/24", "dev", "eth0"},
		{"ip", "addr", "add", "2001:db8:203::2/64", "dev", "eth0", "nodad"},
		{"ip", "route", "add", "default", "via", "203.0.113.1"},
		{"ip", "-6", "route", "add", "default", "via", "2001:db8:203::1"},
		{"ethtool", "-K", "eth0", "tx", "off"},
	} {
		if _, err := client.exec(args...); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{nodeV4, nodeV6} {
		var got int64
		err := client.ns.Do(func(ns.NetNS) error {
			conn, err := net.DialTimeout("tcp", hp(node, 8100), 3*time.Second)
			if err != nil {
				return err
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			got, err = io.Copy(io.Discard, conn)
			return err
		})
		if err != nil || got != size {
			t.Errorf("tcp %s through a 1280-byte link: got %d bytes, %v; want %d", hp(node, 8100), got, err, size)
		}
	}
}

// ICMP errors a container sends about a host-port connection go back
// translated: a UDP request to a host port whose container port has no
// listener is answered with port unreachable, which the client's connected
// socket takes only from the node's address and port (ECONNREFUSED);
// untranslated, it comes from the container's address and the client waits.
// The control: the listening port answers.
func TestPortmapICMPFromContainer(t *testing.T) {
	requireSandbox(t)
	h := newOVSHost(t)
	n := h.portmapList(t, "1.0.0", "pmicmp", nil)
	a := newContainer(t)
	n.mustAdd(t, a, "eth0", mappings(pm(5396, 53, "udp", ""), pm(5397, 54, "udp", "")))
	t.Cleanup(func() { n.del(a, "eth0", nil) })
	a.serveUDP(t, 53)
	for _, node := range []string{nodeV4, nodeV6} {
		expect(t, h.outside.ns, "udp", hp(node, 5396), a, "")
		_, err := dial(h.outside.ns, "udp", hp(node, 5397))
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("udp %s, no listener in the container: got %v, want connection refused", hp(node, 5397), err)
		}
	}
}
