package link

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestAnnounce sends the announcements from a container end and reads them
// on the host end: one gratuitous ARP request and one unsolicited NA with
// the override flag and the MAC as target link-layer option.
func TestAnnounce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root (scratch network namespaces)")
	}
	host, cont := newNS(t), newNS(t)
	mac, _ := net.ParseMAC("02:00:5e:10:00:09")
	v4, v6 := netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::9")
	var fd int
	err := host.Do(func(ns.NetNS) error {
		if _, err := CreateVeth(VethSpec{HostName: "ovfann0", ContName: "eth0", ContNSFd: int(cont.Fd()), ContMAC: mac}); err != nil {
			return err
		}
		ifi, err := net.InterfaceByName("ovfann0")
		if err != nil {
			return err
		}
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	err = cont.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		_ = SetSysctl("net/ipv6/conf/eth0/accept_dad", "0")
		for _, a := range []string{"192.0.2.9/24", "2001:db8::9/64"} {
			addr, _ := netlink.ParseAddr(a)
			if err := netlink.AddrAdd(l, addr); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond) // the kernel's own announcements on link up go first
		return Announce("eth0", mac, []netip.Addr{v4, v6})
	})
	if err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	a4, a6 := v4.As4(), v6.As16()
	wantARP := append(append(append(append([]byte{0, 1, 8, 0, 6, 4, 0, 1}, mac...), a4[:]...), 0, 0, 0, 0, 0, 0), a4[:]...)
	wantNA := append(append(append([]byte{0x20, 0, 0, 0}, a6[:]...), 2, 1), mac...)
	var sawARP, sawNA bool
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !(sawARP && sawNA); {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil || n < 14 || !bytes.Equal(buf[6:12], mac) {
			continue
		}
		f := buf[:n]
		switch {
		case f[12] == 0x08 && f[13] == 0x06 && bytes.Equal(f[14:min(n, 42)], wantARP):
			sawARP = true
		case f[12] == 0x86 && f[13] == 0xdd && n >= 54+len(wantNA)+4 && f[20] == 58 && f[21] == 255 &&
			f[54] == 136 && bytes.Equal(f[58:58+len(wantNA)], wantNA):
			sawNA = true
			if !icmp6ChecksumOK(f[14:]) {
				t.Errorf("unsolicited NA: bad ICMPv6 checksum")
			}
		}
	}
	if !sawARP || !sawNA {
		t.Errorf("got gratuitous ARP %v, unsolicited NA %v; want both", sawARP, sawNA)
	}
}

// icmp6ChecksumOK checks the ICMPv6 checksum of an IPv6 packet (RFC 4443
// section 2.3): the sum over the pseudo-header and the message is 0xffff.
func icmp6ChecksumOK(ip6 []byte) bool {
	plen := int(ip6[4])<<8 | int(ip6[5])
	msg := ip6[40 : 40+plen]
	sum := uint32(plen) + 58
	for _, b := range [][]byte{ip6[8:24], ip6[24:40], msg} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}
