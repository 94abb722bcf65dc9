package link

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/internal/nettest"
)

func TestHostVethName(t *testing.T) {
	a, b := HostVethName("c1", "eth0"), HostVethName("c1", "eth1")
	if a == b || len(a) != 15 || a != HostVethName("c1", "eth0") {
		t.Errorf("HostVethName: %q and %q; want distinct, stable, 15 characters", a, b)
	}
}

// TestCreateVeth creates a pair between two scratch netns ("host" and
// "container") and checks both ends are as CreateVeth promises; Delete then
// removes both, and deleting again is not an error.
func TestCreateVeth(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root (scratch network namespaces)")
	}
	host, cont := nettest.NewNS(t), nettest.NewNS(t)
	const hostName = "ovftest0"
	mac, _ := net.ParseMAC("02:00:5e:10:00:01")
	err := host.Do(func(ns.NetNS) error {
		if _, err := CreateVeth(VethSpec{HostName: hostName, ContName: "eth0", ContNSFd: int(cont.Fd()),
			MTU: 1400, ContMAC: mac, Alias: Alias("net", "c1", "eth0"), Promisc: true}); err != nil {
			return err
		}
		l, err := netlink.LinkByName(hostName) // as the kernel has it now
		if err != nil {
			return err
		}
		a := l.Attrs()
		if a.Flags&net.FlagUp == 0 || a.RawFlags&unix.IFF_PROMISC == 0 || a.Alias != "ovsflow:net:c1/eth0" || a.MTU != 1400 {
			t.Errorf("host end: up %v, promiscuous %v, alias %q, mtu %d; want up, promiscuous, the alias, 1400",
				a.Flags&net.FlagUp != 0, a.RawFlags&unix.IFF_PROMISC != 0, a.Alias, a.MTU)
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

// TestDeleteOrphansUnderLinkChurn lists links (GC) while another veth is
// created and deleted over and over in the same netns, as by concurrent ADDs
// and DELs. Plain netlink returns ErrDumpInterrupted for a link dump such a
// change interrupted; DeleteOrphans must neither fail nor delete a kept link.
func TestDeleteOrphansUnderLinkChurn(t *testing.T) {
	nettest.RequireRoot(t)
	host, cont := nettest.NewNS(t), nettest.NewNS(t)
	const prefix = "ovsflow:i14:"
	err := host.Do(func(ns.NetNS) error {
		for i := range 32 {
			name := fmt.Sprintf("ovfi14k%d", i)
			if _, err := CreateVeth(VethSpec{HostName: name, ContName: name + "c", ContNSFd: int(cont.Fd()),
				MTU: 1500, Alias: prefix + name}); err != nil {
				return err
			}
		}
		_, err := CreateVeth(VethSpec{HostName: "ovfi14orphan", ContName: "orphanc", ContNSFd: int(cont.Fd()),
			MTU: 1500, Alias: prefix + "gone/eth0"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	keep := map[string]bool{}
	for i := range 32 {
		keep[fmt.Sprintf("%sovfi14k%d", prefix, i)] = true
	}

	stop := nettest.Churn(t, host, "i14churn")
	calls, failed := 0, 0
	var first error
	err = host.Do(func(ns.NetNS) error {
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); calls++ {
			if err := DeleteOrphans(prefix, func(a string) bool { return keep[a] }); err != nil {
				failed++
				if first == nil {
					first = err
				}
			}
		}
		if Exists("ovfi14orphan") {
			t.Errorf("the orphan was not deleted")
		}
		for i := range 32 {
			if !Exists(fmt.Sprintf("ovfi14k%d", i)) {
				t.Errorf("kept link ovfi14k%d was deleted", i)
			}
		}
		return nil
	})
	churned := stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d DeleteOrphans calls while a veth was created and deleted %d times", calls, churned)
	if failed > 0 {
		t.Errorf("%d of %d DeleteOrphans calls failed; first: %v", failed, calls, first)
	}
}

func TestRandomMAC(t *testing.T) {
	seen := map[string]bool{}
	for range 64 {
		mac, err := RandomMAC()
		if err != nil {
			t.Fatal(err)
		}
		if len(mac) != 6 || mac[0]&0x01 != 0 || mac[0]&0x02 == 0 {
			t.Fatalf("got %s, want a unicast, locally administered MAC", mac)
		}
		seen[mac.String()] = true
	}
	if len(seen) < 60 {
		t.Errorf("got %d distinct MACs of 64", len(seen))
	}
}

// TestSetSysctls writes IPv4 and IPv6 sysctls of a veth in a scratch
// netns and reads them back; a key that does not exist is skipped.
func TestSetSysctls(t *testing.T) {
	nettest.RequireRoot(t)
	n := nettest.NewNS(t)
	err := n.Do(func(ns.NetNS) error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0p"}); err != nil {
			return err
		}
		if err := SetSysctls("eth0", Sysctls{IPv4: map[string]string{"arp_notify": "1", "arp_ignore": "8"},
			IPv6: map[string]string{"accept_dad": "0", "ndisc_notify": "1", "no_such_key": "1"}}); err != nil {
			return err
		}
		for key, want := range map[string]string{"ipv4/conf/eth0/arp_notify": "1", "ipv4/conf/eth0/arp_ignore": "8",
			"ipv6/conf/eth0/accept_dad": "0", "ipv6/conf/eth0/ndisc_notify": "1"} {
			got, err := os.ReadFile("/proc/sys/net/" + key)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(got)) != want {
				t.Errorf("%s: got %q, want %q", key, strings.TrimSpace(string(got)), want)
			}
		}
		if err := SetSysctls("nosuchlink", Sysctls{IPv4: map[string]string{"arp_notify": "1"}}); err != nil {
			t.Errorf("SetSysctls of a missing link: %v, want nil (skipped)", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSysctls writes the five sysctls ovs-bridge sets on a container's
// eth0, one path each (SetSysctl) and by directory (SetSysctls), in a netns
// beside others that each have an eth0 too, as on a node with containers.
func BenchmarkSysctls(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("SKIPPED: needs root (scratch network namespaces)")
	}
	conf := Sysctls{IPv4: map[string]string{"arp_notify": "1"},
		IPv6: map[string]string{"accept_dad": "0", "ndisc_notify": "1", "addr_gen_mode": "0", "accept_ra": "0"}}
	eth0 := func(n ns.NetNS) {
		if err := n.Do(func(ns.NetNS) error {
			return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0p"})
		}); err != nil {
			b.Fatal(err)
		}
	}
	for _, siblings := range []int{0, 200} {
		var all []ns.NetNS
		for i := 0; i <= siblings; i++ {
			n, err := testutils.NewNS()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				_ = n.Close()
				_ = testutils.UnmountNS(n)
			})
			all = append(all, n)
			eth0(n)
			// Each netns's eth0 directory is looked up once, as an ADD does.
			_ = n.Do(func(ns.NetNS) error { return SetSysctls("eth0", conf) })
		}
		n := all[0]
		b.Run(fmt.Sprintf("siblings=%d/SetSysctl", siblings), func(b *testing.B) {
			_ = n.Do(func(ns.NetNS) error {
				for b.Loop() {
					for fam, kv := range map[string]map[string]string{"ipv4": conf.IPv4, "ipv6": conf.IPv6} {
						for k, v := range kv {
							if err := SetSysctl("net/"+fam+"/conf/eth0/"+k, v); err != nil {
								b.Fatal(err)
							}
						}
					}
				}
				return nil
			})
		})
		b.Run(fmt.Sprintf("siblings=%d/SetSysctls", siblings), func(b *testing.B) {
			_ = n.Do(func(ns.NetNS) error {
				for b.Loop() {
					if err := SetSysctls("eth0", conf); err != nil {
						b.Fatal(err)
					}
				}
				return nil
			})
		})
	}
}
