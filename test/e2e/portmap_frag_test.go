package e2e

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// serveUDPEcho answers every datagram with one of the same size, starting
// with "echo from <id>", so that both directions can exceed the MTU.
func (c *container) serveUDPEcho(t *testing.T, port int) {
	t.Helper()
	c.serveUDPWith(t, port, func(k int, _ net.Addr) []byte {
		out := bytes.Repeat([]byte{'r'}, k)
		copy(out, "echo from "+c.id)
		return out
	})
}

// Datagrams above the MTU (1500 on every link here) through a UDP host
// port, both ways, IPv4 and IPv6: after a first datagram of 1000 bytes (the
// control, which creates the connection), a 3000-byte request from outside
// reaches the container in fragments, and its 3000-byte reply, fragmented
// by the container, leaves with the node's address (the client's connected
// socket takes nothing else). Without the fragment flows the node itself
// gets the request's fragments and answers port unreachable.
func TestPortmapUDPFragments(t *testing.T) {
	requireSandbox(t)
	h := newOVSHost(t)
	n := h.portmapList(t, "1.0.0", "pmfrag", nil)
	a := newContainer(t)
	n.mustAdd(t, a, "eth0", mappings(pm(5390, 53, "udp", "")))
	t.Cleanup(func() { n.del(a, "eth0", nil) })
	a.serveUDPEcho(t, 53)
	for _, node := range []string{nodeV4, nodeV6} {
		err := h.outside.ns.Do(func(ns.NetNS) error {
			conn, err := net.Dial("udp", hp(node, 5390))
			if err != nil {
				return err
			}
			defer conn.Close()
			for _, size := range []int{1000, 3000, 3000} {
				conn.SetDeadline(time.Now().Add(3 * time.Second))
				if _, err := conn.Write(bytes.Repeat([]byte{'q'}, size)); err != nil {
					return err
				}
				buf := make([]byte, 65536)
				k, err := conn.Read(buf)
				if got := buf[:k]; err != nil || k != size || !bytes.HasPrefix(got, []byte("echo from "+a.id)) {
					t.Errorf("udp %s, %d bytes: got %d bytes %.30q, %v; want %d from %s", hp(node, 5390), size, k, got, err, size, a.id)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
