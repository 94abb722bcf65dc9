package framework

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// HP joins an address and a port.
func HP(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }

// Serve listens for TCP on port in netns on a wildcard address (it
// survives the interface being deleted and re-created), closed at the
// test's end, and calls handle for every connection in a goroutine of its
// own; handle closes the connection.
func Serve(t testing.TB, netns ns.NetNS, port int, handle func(net.Conn)) {
	t.Helper()
	var l net.Listener
	err := netns.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go handle(conn)
		}
	}()
}

// ServeTCP answers every TCP connection to port in netns with
// "hello from <id> to <client address>".
func ServeTCP(t testing.TB, netns ns.NetNS, id string, port int) {
	t.Helper()
	Serve(t, netns, port, func(conn net.Conn) {
		defer conn.Close()
		fmt.Fprintf(conn, "hello from %s to %s", id, conn.RemoteAddr())
	})
}

// ServeUDPWith listens for UDP on port in netns on a wildcard address,
// closed at the test's end, and answers every datagram of k bytes from addr
// with reply(k, addr).
func ServeUDPWith(t testing.TB, netns ns.NetNS, port int, reply func(k int, addr net.Addr) []byte) {
	t.Helper()
	var pc net.PacketConn
	err := netns.Do(func(ns.NetNS) error {
		var err error
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			k, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(reply(k, addr), addr)
		}
	}()
}

// DialDatagram sends, from inside netns n (nil: the node), one UDP
// datagram of size bytes to addr and returns the server's answer.
func DialDatagram(n ns.NetNS, addr string, size int) (string, error) {
	var out string
	do := func(ns.NetNS) error {
		conn, err := net.DialTimeout("udp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		out, err = exchange(conn, make([]byte, size))
		return err
	}
	if n == nil {
		return out, do(nil)
	}
	return out, n.Do(do)
}

// exchange writes one datagram on conn and reads one back.
func exchange(conn net.Conn, b []byte) (string, error) {
	if _, err := conn.Write(b); err != nil {
		return "", err
	}
	buf := make([]byte, 65536)
	k, err := conn.Read(buf)
	return string(buf[:k]), err
}

// Dial connects from inside netns n (nil: the node) over network ("tcp",
// "udp", either family), sends a datagram for UDP, and returns what the
// server said (for TCP, all it sent until it closed).
func Dial(n ns.NetNS, network, addr string) (string, error) {
	var out string
	do := func(ns.NetNS) error {
		conn, err := net.DialTimeout(network, addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		if network == "udp" || network == "udp4" || network == "udp6" {
			out, err = exchange(conn, []byte("ping"))
			return err
		}
		b, err := io.ReadAll(conn)
		out = string(b)
		return err
	}
	if n == nil {
		return out, do(nil)
	}
	return out, n.Do(do)
}
