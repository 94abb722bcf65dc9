package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// serveUDPEcho answers every datagram with one of the same size, starting
// with "echo from <id>", so that both directions can exceed the MTU.
func serveUDPEcho(c *framework.Container, t *testing.T, port int) {
	t.Helper()
	c.ServeUDPWith(t, port, func(k int, _ net.Addr) []byte {
		out := bytes.Repeat([]byte{'r'}, k)
		copy(out, "echo from "+c.ID)
		return out
	})
}

// laterFragmentsHaveCTPorts reports whether the datapath shows what follows
// the first fragment of a datagram, after ct(), with the ports of the
// datagram's original tuple (ct_tp_dst): the kernel datapath recirculates
// the reassembled datagram, the userspace one its fragments, with ct_tp_*
// on later ones from OVS 3.1.7, 3.2.5, 3.3.4, 3.4.2 and 3.5.0 on. It sends
// one 3000-byte datagram from outside to port, which must not be a host
// port, on node (its fragments go through PriorityFragment's ct), and
// counts what a flow of its own matching ct_tp_dst=port sees besides first
// fragments; its flows go on as PriorityFragmentMiss does, so that the
// reassembly completes.
func laterFragmentsHaveCTPorts(t *testing.T, h *framework.OVSHost, node string, port int) bool {
	t.Helper()
	eth := "ip"
	if strings.Contains(node, ":") {
		eth = "ipv6"
	}
	probe := fmt.Sprintf("table=40,ct_state=+trk+new,%s,ct_nw_proto=17,ct_tp_dst=%d", eth, port)
	firsts, rest := "priority=252,"+probe+",nw_frag=first", "priority=251,"+probe
	for _, f := range []string{firsts, rest} {
		if out, err := run("ovs-ofctl", "-O", "OpenFlow14", "add-flow", h.OFTarget(), f+",actions=ct(zone=64000,table=44)"); err != nil {
			t.Fatalf("probe flow: %v: %s", err, out)
		}
		defer run("ovs-ofctl", "-O", "OpenFlow14", "--strict", "del-flows", h.OFTarget(), f)
	}
	err := h.Outside.NS.Do(func(ns.NetNS) error {
		conn, err := net.Dial("udp", hp(node, port))
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Write(bytes.Repeat([]byte{'p'}, 3000))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	packets := func(prio string) int {
		out, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", h.OFTarget(), "table=40")
		if err != nil {
			t.Fatalf("dump-flows: %v", err)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, prio) {
				n, _ := strconv.Atoi(field(l, "n_packets="))
				return n
			}
		}
		t.Fatalf("the probe flow is gone: %s", out)
		return 0
	}
	// The datagram has gone through once either probe flow counts it (a
	// datapath that reassembles before the pipeline shows no first
	// fragment); the later fragments' count may follow a revalidator round.
	framework.Until(5*time.Second, func() bool { return packets("priority=252,") > 0 || packets("priority=251,") > 0 })
	return framework.Until(time.Second, func() bool { return packets("priority=251,") > 0 })
}

// Datagrams above the MTU (1500 on every link here) through a UDP host
// port, both ways, IPv4 and IPv6. A new connection whose first datagram is
// fragmented (3000 bytes, nothing before it) reaches the container, and
// its reply, fragmented by the container, leaves with the node's address
// (the client's connected socket takes nothing else); then a 1000-byte
// and a 3000-byte datagram on the connection. Without the fragment flows
// the node itself gets the request's fragments and answers port
// unreachable. A process of the node's listening on the host port gets
// none of them, whatever the datapath; on a userspace datapath that shows
// a later fragment without its datagram's ports (laterFragmentsHaveCTPorts;
// OVS 3.1.0 here), the first fragmented datagram is lost, and only what
// follows it is required to pass; the userspace reassembler keeps nothing
// of it (dpctl/ipf-get-status).
func TestPortmapUDPFragments(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmfrag", nil)
	a := framework.NewContainer(t)
	n.MustAdd(t, a, "eth0", mappings(pm(5390, 53, "udp", "")))
	t.Cleanup(func() { n.Del(a, "eth0", nil) })
	serveUDPEcho(a, t, 53)
	// The node's own socket on the host port: nothing of the host port's
	// traffic may reach it.
	local, err := net.ListenPacket("udp", ":5390")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	var stolen atomic.Int64
	go func() {
		buf := make([]byte, 65536)
		for {
			k, from, err := local.ReadFrom(buf)
			if err != nil {
				return
			}
			stolen.Add(1)
			t.Logf("the node's socket on the host port got %d bytes from %s", k, from)
		}
	}()
	for _, node := range []string{nodeV4, nodeV6} {
		first := laterFragmentsHaveCTPorts(t, h, node, 5391)
		if !first {
			t.Logf("%s: this datapath shows later fragments without ct_tp_dst: the first fragmented datagram is not required to pass", node)
		}
		err := h.Outside.NS.Do(func(ns.NetNS) error {
			conn, err := net.Dial("udp", hp(node, 5390))
			if err != nil {
				return err
			}
			defer conn.Close()
			for i, size := range []int{3000, 1000, 3000} {
				wait := 3 * time.Second
				if i == 0 && !first {
					wait = time.Second
				}
				conn.SetDeadline(time.Now().Add(wait))
				if _, err := conn.Write(bytes.Repeat([]byte{'q'}, size)); err != nil {
					return err
				}
				buf := make([]byte, 65536)
				k, err := conn.Read(buf)
				got := buf[:k]
				ok := err == nil && k == size && bytes.HasPrefix(got, []byte("echo from "+a.ID))
				switch {
				case !ok && (i > 0 || first):
					t.Errorf("udp %s, datagram %d of %d bytes: got %d bytes %.30q, %v; want %d from %s", hp(node, 5390), i, size, k, got, err, size, a.ID)
				case !ok:
					t.Logf("udp %s, the first datagram (%d bytes, fragmented): lost (%v)", hp(node, 5390), size, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// A negative check: the node's socket stays empty for 200 ms after the
	// last echo came back.
	framework.Consistently(t, 200*time.Millisecond, "the node's own socket on the host port", func() error {
		if k := stolen.Load(); k > 0 {
			return fmt.Errorf("got %d datagrams, want none", k)
		}
		return nil
	})
	if framework.Userspace() {
		// Nothing is left waiting in the reassembler for fragments that
		// went elsewhere.
		st := appctl(t, "dpctl/ipf-get-status")
		if held := strings.TrimSpace(field(strings.ReplaceAll(st, "num frag: ", "numfrag="), "numfrag=")); held != "0" {
			t.Errorf("the userspace reassembler holds %s fragments after the datagrams:\n%s", held, st)
		}
	}
}

// tcpSegment is a TCP segment (no options) with a valid checksum over
// pseudo, the pseudo header without the length.
func tcpSegment(pseudo func(length int) []byte, sport, dport uint16, seq uint32, flags byte, data []byte) []byte {
	h := binary.BigEndian.AppendUint16(nil, sport)
	h = binary.BigEndian.AppendUint16(h, dport)
	h = binary.BigEndian.AppendUint32(h, seq)
	h = append(h, 0, 0, 0, 0, 5<<4, flags, 0xff, 0xff, 0, 0, 0, 0)
	seg := append(h, data...)
	binary.BigEndian.PutUint16(seg[16:], checksum(pseudo(len(seg)), seg))
	return seg
}

// nodeTCPSegments is how many TCP segments the node's stack (the suite's
// own netns) has received (InSegs of /proc/net/snmp, both families).
// Reassemblies are not counted there: with conntrack loaded (the node-local
// host port table), nf_defrag reassembles IPv6 without Ip6ReasmOKs.
func nodeTCPSegments(t *testing.T) int {
	t.Helper()
	snmp, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	return tcpInSegs(string(snmp))
}

// containerTCPSegments counts the TCP segments container c's stack
// received (both families): a fragmented segment counts once reassembled,
// however the kernel reassembled it (the IPv6 defragmentation of a netns
// with conntrack counts no ReasmOKs).
func containerTCPSegments(t *testing.T, c *framework.Container) int {
	t.Helper()
	return tcpInSegs(sh(c, t, "cat", "/proc/net/snmp"))
}

// tcpInSegs reads Tcp InSegs from the text of /proc/net/snmp.
func tcpInSegs(snmp string) int {
	var hdr []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if hdr == nil {
			hdr = f
			continue
		}
		for i, k := range hdr {
			if k == "InSegs" && i < len(f) {
				n, _ := strconv.Atoi(f[i])
				return n
			}
		}
	}
	return -1 // not there: every count differs from what a test wants
}

// TCP segments in IP fragments through a TCP host port: DNATed to the
// container like any fragment (on a datapath that shows later fragments
// with their datagram's ports; elsewhere lost), never delivered to the node
// untranslated. From outside, a SYN with 2000 bytes of data in fragments of
// 1400, IPv4 and IPv6, to the host port: the node's kernel reassembles none
// of them into a segment for its TCP (its InSegs), and the container's TCP
// gets each where the datapath allows. Control: the same fragments
// to a port of the node that is not a host port reach the node's TCP.
// Before the fragment flows covered TCP, the host port's did too (the
// node's own socket on the port answered the SYN).
func TestPortmapTCPFragments(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmtcpfrag", nil)
	a := framework.NewContainer(t)
	n.MustAdd(t, a, "eth0", mappings(pm(8390, 80, "tcp", "")))
	t.Cleanup(func() { n.Del(a, "eth0", nil) })
	a.ServeTCP(t, 80)
	local, err := net.Listen("tcp", ":8390")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	br, err := netlink.LinkByName(h.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	nodeMAC := br.Attrs().HardwareAddr
	var outMAC net.HardwareAddr
	if err := h.Outside.NS.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err == nil {
			outMAC = l.Attrs().HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := sender(t, h.Outside.NS, "eth0")
	data := bytes.Repeat([]byte{'s'}, 2000)
	send := func(v6 bool, dport uint16, id uint16) {
		t.Helper()
		if !v6 {
			src, dst := netip.MustParseAddr(outsideV4), netip.MustParseAddr(nodeV4)
			pseudo := func(k int) []byte {
				return append(append(src.AsSlice(), dst.AsSlice()...), 0, 6, byte(k>>8), byte(k))
			}
			for _, f := range frag4(ipv4Packet(src, dst, 6, tcpSegment(pseudo, 40000+id, dport, 1, 0x02, data)), 1400, id) {
				mustSend(t, s, ethFrame(nodeMAC, outMAC, etherIPv4, f))
			}
			return
		}
		src, dst := netip.MustParseAddr(outsideV6), netip.MustParseAddr(nodeV6)
		pseudo := func(k int) []byte { return pseudo6(src, dst, 6, k) }
		for _, f := range frag6(ipv6Packet(src, dst, 6, 64, tcpSegment(pseudo, 40000+id, dport, 1, 0x02, data)), 1400, uint32(id)) {
			mustSend(t, s, ethFrame(nodeMAC, outMAC, etherIPv6, f))
		}
	}
	for _, v6 := range []bool{false, true} {
		node := nodeV4
		if v6 {
			node = nodeV6
		}
		first := laterFragmentsHaveCTPorts(t, h, node, 5391)
		segs := nodeTCPSegments(t)
		c0 := containerTCPSegments(t, a)
		send(v6, 8390, 0x2301)
		if first {
			framework.Until(2*time.Second, func() bool { return containerTCPSegments(t, a)-c0 >= 1 })
		}
		// A negative check: the node's TCP gets nothing for 300 ms.
		framework.Consistently(t, 300*time.Millisecond, node+": the node's TCP", func() error {
			if got := nodeTCPSegments(t) - segs; got != 0 {
				return fmt.Errorf("got %d segments after a fragmented one to host port 8390, want none", got)
			}
			return nil
		})
		c1 := containerTCPSegments(t, a)
		// The SYN, then the outside's reset of the container's SYN-ACK
		// (the raw sender's netns has no such connection) may follow.
		if got := c1 - c0; first && got < 1 {
			t.Errorf("%s: the container's TCP got %d segments after a fragmented one to host port 8390, want the SYN", node, got)
		} else if !first {
			t.Logf("%s: this datapath shows later fragments without ct_tp_dst: the container's TCP got %d (not required)", node, got)
		}
		// Control: a port of the node's that is not a host port (it
		// answers with a reset, which the raw sender ignores).
		segs = nodeTCPSegments(t)
		send(v6, 8391, 0x2302)
		framework.Until(2*time.Second, func() bool { return nodeTCPSegments(t)-segs >= 1 })
		if got := nodeTCPSegments(t) - segs; got != 1 {
			t.Errorf("control: %s: the node's TCP got %d segments after a fragmented one to its port 8391, want 1", node, got)
		}
	}
}
