package link

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/ovsflow/ovs-cni/pkg/internal/nettest"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestAnnounce resolves the gateways from a container end and reads, on the
// host end, the ARP request from the container's MAC and IPv4 address and
// the neighbour solicitation with its MAC (the kernel sends it from the
// link-local address).
func TestAnnounce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root (scratch network namespaces)")
	}
	host, cont := nettest.NewNS(t), nettest.NewNS(t)
	mac, _ := net.ParseMAC("02:00:5e:10:00:09")
	v4 := netip.MustParseAddr("192.0.2.9")
	gw4, gw6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
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
		// Until the link is up for traffic (its carrier: both ends up):
		// before that the frames go nowhere.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if l, err = netlink.LinkByName("eth0"); err != nil {
				return err
			}
			if l.Attrs().RawFlags&unix.IFF_RUNNING != 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("eth0 has no carrier: %s", l.Attrs().OperState)
			}
		}
		skipped, err := Announce("eth0", []netip.Addr{gw4, gw6})
		if len(skipped) > 0 {
			t.Errorf("skipped %v", skipped)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	a4, g4, g6 := v4.As4(), gw4.As4(), gw6.As16()
	wantARP := append(append(append(append([]byte{0, 1, 8, 0, 6, 4, 0, 1}, mac...), a4[:]...), 0, 0, 0, 0, 0, 0), g4[:]...)
	// NS for the gateway, source link-layer option: the container's MAC.
	wantNS := append(append(append([]byte{0, 0, 0, 0}, g6[:]...), 1, 1), mac...)
	var sawARP, sawNS bool
	buf := make([]byte, 2048)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) && !(sawARP && sawNS); {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil || n < 14 || !bytes.Equal(buf[6:12], mac) {
			continue
		}
		f := buf[:n]
		switch {
		case f[12] == 0x08 && f[13] == 0x06 && bytes.Equal(f[14:min(n, 42)], wantARP):
			sawARP = true
		case f[12] == 0x86 && f[13] == 0xdd && n >= 58+len(wantNS) && f[20] == 58 &&
			f[54] == 135 && bytes.Equal(f[58:58+len(wantNS)], wantNS):
			sawNS = true
		}
	}
	if !sawARP || !sawNS {
		t.Errorf("got the ARP request %v, the neighbour solicitation %v; want both", sawARP, sawNS)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
