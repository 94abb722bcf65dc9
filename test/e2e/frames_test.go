package e2e

// Hand-written frame encoders and a raw-socket sender and sniffer for the
// attack tests (attack_test.go): an attacker with CAP_NET_RAW writes whole
// Ethernet frames on its interface, and the victims count what reaches them.
// Written out rather than taken from gopacket: the few headers needed fit in
// one file, the tests need nothing beyond golang.org/x/sys, and a malformed
// frame (a second VLAN tag, a forged option) is as easy to write as a good one.

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// EtherTypes and protocol numbers used below.
const (
	etherIPv4  = 0x0800
	etherARP   = 0x0806
	etherVLAN  = 0x8100
	etherIPv6  = 0x86dd
	protoUDP   = 17
	protoICMP  = 1
	protoICMP6 = 58
)

// ICMPv6 types.
const (
	icmp6EchoRequest = 128
	icmp6EchoReply   = 129
	icmp6RS          = 133
	icmp6RA          = 134
	icmp6NS          = 135
	icmp6NA          = 136
	icmp6Redirect    = 137
)

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// multicastMAC is the Ethernet address of an IPv6 multicast group (33:33 + low 32 bits).
func multicastMAC(group netip.Addr) net.HardwareAddr {
	b := group.As16()
	return net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

// solicitedNode is ff02::1:ffXX:XXXX of a.
func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0xff, 0x02, 10: 0, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

// eui64LinkLocal is fe80::/64 with the modified EUI-64 interface identifier of mac.
func eui64LinkLocal(mac net.HardwareAddr) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfe, 0x80, 8: mac[0] ^ 2, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]})
}

// ethFrame builds an Ethernet frame; each vid adds an 802.1Q tag, outermost first.
func ethFrame(dst, src net.HardwareAddr, etherType uint16, payload []byte, vids ...uint16) []byte {
	b := append([]byte{}, dst...)
	b = append(b, src...)
	for _, v := range vids {
		b = binary.BigEndian.AppendUint16(b, etherVLAN)
		b = binary.BigEndian.AppendUint16(b, v&0xfff)
	}
	b = binary.BigEndian.AppendUint16(b, etherType)
	b = append(b, payload...)
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

// arpPacket is an Ethernet/IPv4 ARP body (op 1 request, 2 reply).
func arpPacket(op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	b := []byte{0, 1, 8, 0, 6, 4}
	b = binary.BigEndian.AppendUint16(b, op)
	b = append(b, sha...)
	b = append(b, spa.AsSlice()...)
	b = append(b, tha...)
	return append(b, tpa.AsSlice()...)
}

func checksum(parts ...[]byte) uint16 {
	var sum uint32
	for _, p := range parts {
		for i := 0; i+1 < len(p); i += 2 {
			sum += uint32(p[i])<<8 | uint32(p[i+1])
		}
		if len(p)%2 == 1 {
			sum += uint32(p[len(p)-1]) << 8
		}
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// ipv4Packet wraps payload in an IPv4 header with a valid checksum.
func ipv4Packet(src, dst netip.Addr, proto uint8, payload []byte) []byte {
	h := make([]byte, 20)
	h[0], h[8], h[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	copy(h[12:], src.AsSlice())
	copy(h[16:], dst.AsSlice())
	binary.BigEndian.PutUint16(h[10:], checksum(h))
	return append(h, payload...)
}

// udp4 is a UDP datagram in IPv4 with a valid checksum.
func udp4(src, dst netip.Addr, sport, dport uint16, data []byte) []byte {
	u := udpHeader(sport, dport, data)
	pseudo := append(append(src.AsSlice(), dst.AsSlice()...), 0, protoUDP, byte(len(u)>>8), byte(len(u)))
	c := checksum(pseudo, u)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], c)
	return ipv4Packet(src, dst, protoUDP, u)
}

func udpHeader(sport, dport uint16, data []byte) []byte {
	u := binary.BigEndian.AppendUint16(nil, sport)
	u = binary.BigEndian.AppendUint16(u, dport)
	u = binary.BigEndian.AppendUint16(u, uint16(8+len(data)))
	u = append(u, 0, 0)
	return append(u, data...)
}

// icmp4Echo is an ICMP echo request in IPv4.
func icmp4Echo(src, dst netip.Addr, id, seq uint16) []byte {
	m := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq), 'i', '1', '2', 't'}
	binary.BigEndian.PutUint16(m[2:], checksum(m))
	return ipv4Packet(src, dst, protoICMP, m)
}

// icmp4Redirect is an ICMP redirect (host) in IPv4 telling dst to reach
// target through gw, quoting the header of a datagram dst sent.
func icmp4Redirect(src, dst, gw, target netip.Addr) []byte {
	m := append([]byte{5, 1, 0, 0}, gw.AsSlice()...)
	m = append(m, ipv4Packet(dst, target, protoUDP, make([]byte, 8))...)
	binary.BigEndian.PutUint16(m[2:], checksum(m))
	return ipv4Packet(src, dst, protoICMP, m)
}

// ipv6Packet wraps payload in an IPv6 header.
func ipv6Packet(src, dst netip.Addr, next, hopLimit uint8, payload []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6], h[7] = next, hopLimit
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, payload...)
}

func pseudo6(src, dst netip.Addr, next uint8, length int) []byte {
	s, d := src.As16(), dst.As16()
	p := append(s[:], d[:]...)
	return append(p, byte(length>>24), byte(length>>16), byte(length>>8), byte(length), 0, 0, 0, next)
}

// icmp6Packet is an ICMPv6 message (type, code, body after the checksum) in
// IPv6 with hop limit 255, as neighbour discovery requires.
func icmp6Packet(src, dst netip.Addr, typ, code uint8, body []byte) []byte {
	m := append([]byte{typ, code, 0, 0}, body...)
	binary.BigEndian.PutUint16(m[2:], checksum(pseudo6(src, dst, protoICMP6, len(m)), m))
	return ipv6Packet(src, dst, protoICMP6, 255, m)
}

// udp6 is a UDP datagram in IPv6 with a valid checksum.
func udp6(src, dst netip.Addr, sport, dport uint16, data []byte) []byte {
	u := udpHeader(sport, dport, data)
	c := checksum(pseudo6(src, dst, protoUDP, len(u)), u)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], c)
	return ipv6Packet(src, dst, protoUDP, 64, u)
}

// ndOptLL is a source (1) or target (2) link-layer address option.
func ndOptLL(typ uint8, mac net.HardwareAddr) []byte {
	return append([]byte{typ, 1}, mac...)
}

// raBody is a router advertisement: cur hop limit, router lifetime, a
// source link-layer option and an autonomous on-link prefix /64.
func raBody(hopLimit uint8, lifetime uint16, mac net.HardwareAddr, prefix netip.Addr) []byte {
	b := []byte{hopLimit, 0}
	b = binary.BigEndian.AppendUint16(b, lifetime)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0) // reachable, retrans timers
	b = append(b, ndOptLL(1, mac)...)
	p := prefix.As16()
	b = append(b, 3, 4, 64, 0xc0) // prefix information, /64, on-link + autonomous
	b = binary.BigEndian.AppendUint32(b, 3600)
	b = binary.BigEndian.AppendUint32(b, 1800)
	b = append(b, 0, 0, 0, 0)
	return append(b, p[:]...)
}

// naBody is a neighbour advertisement (router 0, solicited 0, override 1)
// for target with a target link-layer option.
func naBody(target netip.Addr, tll net.HardwareAddr) []byte {
	t := target.As16()
	b := append([]byte{0x20, 0, 0, 0}, t[:]...)
	return append(b, ndOptLL(2, tll)...)
}

// nsBody is a neighbour solicitation for target with a source link-layer
// option (none when sll is nil, as in duplicate address detection).
func nsBody(target netip.Addr, sll net.HardwareAddr) []byte {
	t := target.As16()
	b := append([]byte{0, 0, 0, 0}, t[:]...)
	if sll == nil {
		return b
	}
	return append(b, ndOptLL(1, sll)...)
}

// redirectBody tells the receiver to reach dst through target.
func redirectBody(target, dst netip.Addr, mac net.HardwareAddr) []byte {
	t, d := target.As16(), dst.As16()
	b := append([]byte{0, 0, 0, 0}, t[:]...)
	b = append(b, d[:]...)
	return append(b, ndOptLL(2, mac)...)
}

// echo6Body is an ICMPv6 echo request body.
func echo6Body(id, seq uint16) []byte {
	return []byte{byte(id >> 8), byte(id), byte(seq >> 8), byte(seq), 'i', '1', '2', 't'}
}

// dhcp4 is a BOOTP message with DHCP message type msgType (1 DISCOVER, 2
// OFFER, 5 ACK); a server message offers yiaddr with router and DNS = server.
func dhcp4(msgType uint8, xid uint32, chaddr net.HardwareAddr, yiaddr, server netip.Addr) []byte {
	b := make([]byte, 240)
	b[0], b[1], b[2] = 1, 1, 6
	if msgType != 1 && msgType != 3 {
		b[0] = 2
	}
	binary.BigEndian.PutUint32(b[4:], xid)
	binary.BigEndian.PutUint16(b[10:], 0x8000) // broadcast
	if yiaddr.IsValid() {
		copy(b[16:], yiaddr.AsSlice())
	}
	copy(b[28:], chaddr)
	copy(b[236:], []byte{99, 130, 83, 99})
	b = append(b, 53, 1, msgType)
	if b[0] == 2 {
		s := server.AsSlice()
		b = append(b, 54, 4)
		b = append(b, s...)
		b = append(b, 1, 4, 255, 255, 255, 0, 3, 4)
		b = append(b, s...)
		b = append(b, 6, 4)
		b = append(b, s...)
		b = append(b, 51, 4, 0, 0, 0x0e, 0x10)
	}
	return append(b, 255)
}

// dhcp6 is a DHCPv6 message (2 ADVERTISE, 7 REPLY, 13 RELAY-REPL) with a
// server identifier.
func dhcp6(msgType uint8, xid uint32, duidMAC net.HardwareAddr) []byte {
	b := []byte{msgType, byte(xid >> 16), byte(xid >> 8), byte(xid)}
	b = append(b, 0, 2, 0, 10, 0, 3, 0, 1) // server id: DUID-LL
	return append(b, duidMAC...)
}

// A parsed frame: enough to count what an attack delivered.
type frame struct {
	dst, src   net.HardwareAddr
	vlans      []uint16
	etherType  uint16
	payload    []byte // after the Ethernet header and tags
	outgoing   bool
	capturedAt time.Time
}

func parseFrame(b []byte) (frame, bool) {
	if len(b) < 14 {
		return frame{}, false
	}
	f := frame{dst: net.HardwareAddr(b[0:6]), src: net.HardwareAddr(b[6:12])}
	off := 12
	for {
		if len(b) < off+2 {
			return frame{}, false
		}
		et := binary.BigEndian.Uint16(b[off:])
		if (et == etherVLAN || et == 0x88a8) && len(b) >= off+4 {
			f.vlans = append(f.vlans, binary.BigEndian.Uint16(b[off+2:])&0xfff)
			off += 4
			continue
		}
		f.etherType, f.payload = et, b[off+2:]
		return f, true
	}
}

// arp returns op, sender MAC and IP, target IP of an ARP frame.
func (f frame) arp() (op uint16, sha net.HardwareAddr, spa, tpa netip.Addr, ok bool) {
	p := f.payload
	if f.etherType != etherARP || len(p) < 28 {
		return
	}
	spa, _ = netip.AddrFromSlice(p[14:18])
	tpa, _ = netip.AddrFromSlice(p[24:28])
	return binary.BigEndian.Uint16(p[6:]), net.HardwareAddr(p[8:14]), spa, tpa, true
}

// ip returns the addresses, protocol and upper-layer payload of an IPv4 or
// IPv6 frame (IPv6: the first header only, no extension headers).
func (f frame) ip() (src, dst netip.Addr, proto uint8, l4 []byte, ok bool) {
	p := f.payload
	switch {
	case f.etherType == etherIPv4 && len(p) >= 20:
		ihl := int(p[0]&0xf) * 4
		if len(p) < ihl {
			return
		}
		src, _ = netip.AddrFromSlice(p[12:16])
		dst, _ = netip.AddrFromSlice(p[16:20])
		return src, dst, p[9], p[ihl:], true
	case f.etherType == etherIPv6 && len(p) >= 40:
		src = netip.AddrFrom16([16]byte(p[8:24]))
		dst = netip.AddrFrom16([16]byte(p[24:40]))
		return src, dst, p[6], p[40:], true
	}
	return
}

// icmp6 returns the type of an ICMPv6 frame and its body after the checksum.
func (f frame) icmp6() (typ uint8, body []byte, ok bool) {
	_, _, proto, l4, ok := f.ip()
	if !ok || f.etherType != etherIPv6 || proto != protoICMP6 || len(l4) < 4 {
		return 0, nil, false
	}
	return l4[0], l4[4:], true
}

// udp returns the ports and data of a UDP frame.
func (f frame) udp() (sport, dport uint16, data []byte, ok bool) {
	_, _, proto, l4, ok := f.ip()
	if !ok || proto != protoUDP || len(l4) < 8 {
		return 0, 0, nil, false
	}
	return binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:]), l4[8:], true
}

func (f frame) String() string {
	s := fmt.Sprintf("%s > %s vlans %v type %#04x", f.src, f.dst, f.vlans, f.etherType)
	if src, dst, proto, _, ok := f.ip(); ok {
		s += fmt.Sprintf(" %s > %s proto %d", src, dst, proto)
	}
	if op, sha, spa, tpa, ok := f.arp(); ok {
		s += fmt.Sprintf(" arp op %d %s/%s > %s", op, sha, spa, tpa)
	}
	return s
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// rawSocket is an AF_PACKET socket bound to one interface of one netns.
type rawSocket struct {
	fd      int
	ifindex int
	name    string
}

// openRaw opens a packet socket on ifname in netns n (nil: the node's).
// proto 0 only sends; ETH_P_ALL also receives.
func openRaw(n ns.NetNS, ifname string, proto uint16) (*rawSocket, error) {
	var s *rawSocket
	open := func(ns.NetNS) error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return fmt.Errorf("interface %q: %w", ifname, err)
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(proto)))
		if err != nil {
			return fmt.Errorf("packet socket on %q: %w", ifname, err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("binding packet socket to %q: %w", ifname, err)
		}
		s = &rawSocket{fd: fd, ifindex: ifi.Index, name: ifname}
		return nil
	}
	if n == nil {
		return s, open(nil)
	}
	return s, n.Do(open)
}

func (s *rawSocket) send(b []byte) error {
	var dst [8]byte
	copy(dst[:], b[:6])
	if err := unix.Sendto(s.fd, b, 0, &unix.SockaddrLinklayer{Ifindex: s.ifindex, Halen: 6, Addr: dst}); err != nil {
		return fmt.Errorf("sending on %q: %w", s.name, err)
	}
	return nil
}

func (s *rawSocket) close() { unix.Close(s.fd) }

// sender opens a sending socket for an attacker or dies.
func sender(t *testing.T, n ns.NetNS, ifname string) *rawSocket {
	t.Helper()
	s, err := openRaw(n, ifname, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return s
}

// mustSend sends each frame.
func mustSend(t *testing.T, s *rawSocket, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		if err := s.send(f); err != nil {
			t.Fatal(err)
		}
	}
}

// sniffer keeps every frame an interface received (not the ones it sent).
type sniffer struct {
	sock   *rawSocket
	where  string
	mu     sync.Mutex
	frames []frame
	done   chan struct{}
}

// maxSniffed bounds what a sniffer keeps.
const maxSniffed = 50000

// sniff starts a sniffer on ifname in netns n (nil: the node's); it stops
// at the end of the test.
func sniff(t *testing.T, n ns.NetNS, ifname, where string) *sniffer {
	t.Helper()
	sock, err := openRaw(n, ifname, unix.ETH_P_ALL)
	if err != nil {
		t.Fatal(err)
	}
	s := &sniffer{sock: sock, where: where, done: make(chan struct{})}
	// A short receive timeout lets the reader notice the end of the test.
	unix.SetsockoptTimeval(sock.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000})
	stop := make(chan struct{})
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		for {
			select {
			case <-stop:
				return
			default:
			}
			k, from, err := unix.Recvfrom(sock.fd, buf, 0)
			if err != nil {
				continue
			}
			ll, _ := from.(*unix.SockaddrLinklayer)
			if ll != nil && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			f, ok := parseFrame(append([]byte{}, buf[:k]...))
			if !ok {
				continue
			}
			f.capturedAt = time.Now()
			s.mu.Lock()
			if len(s.frames) < maxSniffed {
				s.frames = append(s.frames, f)
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-s.done
		sock.close()
	})
	return s
}

// count returns how many received frames match.
func (s *sniffer) count(match func(frame) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.frames {
		if match(f) {
			n++
		}
	}
	return n
}

// first returns up to k matching frames, for messages.
func (s *sniffer) first(k int, match func(frame) bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, f := range s.frames {
		if len(out) < k && match(f) {
			out = append(out, f.String())
		}
	}
	return out
}

// waitFor polls until some frame matches or the timeout passes.
func (s *sniffer) waitFor(timeout time.Duration, match func(frame) bool) bool {
	return framework.Until(timeout, func() bool { return s.count(match) > 0 })
}

// fromMAC matches frames with source MAC mac.
func fromMAC(mac net.HardwareAddr) func(frame) bool {
	return func(f frame) bool { return f.src.String() == mac.String() }
}
