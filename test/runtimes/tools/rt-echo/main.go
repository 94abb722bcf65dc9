// Command rt-echo is the application of the runtime suites' containers: it
// answers every TCP connection and every UDP datagram on the given ports with
// one line, "hello from TAG to PEER", so that a test sees both which
// container answered and which client address that container saw.
//
//	rt-echo -tcp 80 -udp 53 -tag web
//
// It stops on SIGTERM or SIGINT (it runs as PID 1).
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	tcp := flag.String("tcp", "", "comma-separated TCP ports")
	udp := flag.String("udp", "", "comma-separated UDP ports")
	tag := flag.String("tag", os.Getenv("RT_TAG"), "name in the answer (default $RT_TAG, else the hostname)")
	flag.Parse()
	if *tag == "" {
		*tag, _ = os.Hostname()
	}
	for _, p := range fields(*tcp) {
		l, err := net.Listen("tcp", ":"+p)
		if err != nil {
			log.Fatal(err)
		}
		go serveTCP(l, *tag)
	}
	for _, p := range fields(*udp) {
		pc, err := net.ListenPacket("udp", ":"+p)
		if err != nil {
			log.Fatal(err)
		}
		go serveUDP(pc, *tag)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}

func fields(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

func serveTCP(l net.Listener, tag string) {
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go answer(c.(*net.TCPConn), tag)
	}
}

// answer writes the line, then half-closes and reads what the client sent
// until it closes too. Closing with unread data would answer the client's
// data with a reset, and a reset makes the client's kernel discard the line
// before the client reads it ("echo | nc" then prints nothing).
func answer(c *net.TCPConn, tag string) {
	defer c.Close()
	fmt.Fprintf(c, "hello from %s to %s\n", tag, c.RemoteAddr())
	c.CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.Copy(io.Discard, c)
}

func serveUDP(pc net.PacketConn, tag string) {
	buf := make([]byte, 1500)
	for {
		_, addr, err := pc.ReadFrom(buf)
		if err != nil {
			log.Fatal(err)
		}
		pc.WriteTo([]byte(fmt.Sprintf("hello from %s to %s\n", tag, addr)), addr)
	}
}
