package link

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Announce sends, from link name in the current netns, what the kernel
// sends when a link with arp_notify and ndisc_notify comes up: a
// gratuitous ARP request for each IPv4 address and an unsolicited
// neighbour advertisement (override flag, target link-layer option) for
// each IPv6 one. For a link that came up before its frames could reach
// anyone. It sends them itself rather than have the kernel repeat them (by
// setting the MAC to itself), because that is a link change, and
// ovs-vswitchd reconfigures its bridges on every link change it hears of.
func Announce(name string, mac net.HardwareAddr, addrs []netip.Addr) error {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return fmt.Errorf("looking up %q: %w", name, err)
	}
	for _, a := range addrs {
		if a.Is4() {
			err = gratuitousARP(ifi.Index, mac, a)
		} else {
			err = unsolicitedNA(ifi.Index, mac, a)
		}
		if err != nil {
			return fmt.Errorf("announcing %s on %q: %w", a, name, err)
		}
	}
	return nil
}

func gratuitousARP(ifindex int, mac net.HardwareAddr, ip netip.Addr) error {
	spa := ip.As4()
	// Request, sender = target = the address (RFC 5227 section 3).
	pkt := []byte{0, 1, 8, 0, 6, 4, 0, 1}
	pkt = append(pkt, mac...)
	pkt = append(pkt, spa[:]...)
	pkt = append(pkt, 0, 0, 0, 0, 0, 0)
	pkt = append(pkt, spa[:]...)
	return sendLink(ifindex, unix.ETH_P_ARP, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, pkt)
}

func unsolicitedNA(ifindex int, mac net.HardwareAddr, ip netip.Addr) error {
	// From the address itself to all nodes, hop limit 255 (RFC 4861
	// section 7.2.6); sent on the link, so no route is needed yet.
	src, dst := ip.As16(), [16]byte{0xff, 0x02, 15: 1}
	icmp := []byte{136, 0, 0, 0, 0x20, 0, 0, 0} // type, code, checksum, flags: override
	icmp = append(icmp, src[:]...)
	icmp = append(icmp, 2, 1) // option: target link-layer address, 8 bytes
	icmp = append(icmp, mac...)
	sum := uint32(len(icmp)) + unix.IPPROTO_ICMPV6
	for _, b := range [][]byte{src[:], dst[:], icmp} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(icmp[2:], ^uint16(sum))
	pkt := []byte{0x60, 0, 0, 0, byte(len(icmp) >> 8), byte(len(icmp)), unix.IPPROTO_ICMPV6, 255}
	pkt = append(append(append(pkt, src[:]...), dst[:]...), icmp...)
	return sendLink(ifindex, unix.ETH_P_IPV6, [6]byte{0x33, 0x33, 0, 0, 0, 1}, pkt)
}

// sendLink sends one frame's payload of ethertype proto to dst on the link.
func sendLink(ifindex int, proto uint16, dst [6]byte, payload []byte) error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifindex, Halen: 6}
	copy(to.Addr[:], dst[:])
	return unix.Sendto(fd, payload, 0, to)
}

func htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}
