package link

import (
	"net"
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
)

func TestHostVethName(t *testing.T) {
	a, b := HostVethName("c1", "eth0"), HostVethName("c1", "eth1")
	if a == b || len(a) != 15 || a != HostVethName("c1", "eth0") {
		t.Errorf("HostVethName: %q and %q; want distinct, stable, 15 characters", a, b)
	}
}

// newNS is a scratch netns, removed at the end of the test.
func newNS(t *testing.T) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	})
	return n
}

// TestCreateVeth creates a pair between two scratch netns ("host" and
// "container") and checks both ends are as CreateVeth promises; Delete then
// removes both, and deleting again is not an error.
func TestCreateVeth(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root (scratch network namespaces)")
	}
	host, cont := newNS(t), newNS(t)
	const hostName = "ovftest0"
	mac, _ := net.ParseMAC("02:00:5e:10:00:01")
	err := host.Do(func(ns.NetNS) error {
		if _, err := CreateVeth(VethSpec{HostName: hostName, ContName: "eth0", ContNSFd: int(cont.Fd()),
			MTU: 1400, ContMAC: mac, Alias: Alias("net", "c1", "eth0")}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(hostName) // as the kernel has it now
		if err != nil {
			return err
		}
		a := l.Attrs()
		if a.Flags&net.FlagUp == 0 || a.Alias != "ovsflow:net:c1/eth0" || a.MTU != 1400 {
			t.Errorf("host end: up %v, alias %q, mtu %d; want up, the alias, 1400",
				a.Flags&net.FlagUp != 0, a.Alias, a.MTU)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = cont.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err == nil && (l.Attrs().MTU != 1400 || l.Attrs().HardwareAddr.String() != mac.String()) {
			t.Errorf("container end: mtu %d, mac %s; want 1400, %s", l.Attrs().MTU, l.Attrs().HardwareAddr, mac)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = host.Do(func(ns.NetNS) error {
		if err := Delete(hostName); err != nil {
			return err
		}
		if Exists(hostName) {
			t.Errorf("%s still exists after Delete", hostName)
		}
		return Delete(hostName)
	})
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	err = cont.Do(func(ns.NetNS) error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Errorf("the container end outlived its peer")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
