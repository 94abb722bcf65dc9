// Package link creates and removes the veth pairs that connect containers to
// the bridge. The container end is created directly inside the container's
// network namespace: creating a pair locally and then moving one end waits
// for a kernel RCU synchronisation, creating it in place does not
// (docs/performance.md, "Design costs").
package link

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// HostVethName is the deterministic host-side name for a container interface:
// the same container ID and ifname always give the same name (so a retried
// ADD and a DEL find it), and it fits IFNAMSIZ (15 characters).
func HostVethName(containerID, ifname string) string {
	sum := sha256.Sum256([]byte(containerID + "/" + ifname))
	return "ovf" + hex.EncodeToString(sum[:6]) // 3 + 12 = 15
}

// VethSpec describes a pair to create.
type VethSpec struct {
	HostName string
	ContName string
	ContNSFd int              // open fd of the container netns
	MTU      int              // 0: kernel default
	ContMAC  net.HardwareAddr // nil: kernel-chosen
	Alias    string           // IFLA_IFALIAS of the host end (see Alias)
	// HostDown leaves the host end down: the container end has no carrier,
	// so nothing the container sends reaches the bridge until SetUp.
	HostDown bool
	// Promisc creates the host end promiscuous, as the userspace and the
	// kernel datapath make a port anyway: set later, the change would cost
	// ovs-vswitchd one more reconfiguration of the bridge.
	Promisc bool
}

// Alias names the attachment on its host veth ("ovsflow:<network>:<container
// id>/<ifname>"), so that GC can find a veth whose port is already gone.
func Alias(network, containerID, ifname string) string {
	return AliasPrefix(network) + containerID + "/" + ifname
}

// AliasPrefix is the alias prefix of the host veths of a network.
func AliasPrefix(network string) string { return "ovsflow:" + network + ":" }

// DeleteOrphans deletes the links whose alias starts with prefix and that
// keep does not keep. keep is asked only after the links are listed.
func DeleteOrphans(prefix string, keep func(alias string) bool) error {
	links, err := netlinksafe.LinkList()
	if err != nil {
		return fmt.Errorf("listing links: %w", err)
	}
	for _, l := range links {
		a := l.Attrs()
		if strings.HasPrefix(a.Name, "ovf") && strings.HasPrefix(a.Alias, prefix) && !keep(a.Alias) {
			if err := Delete(a.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// CreateVeth creates the pair from the host netns with the container end placed
// directly in the container netns, and the host end in its final state: up
// (unless HostDown) and promiscuous (with Promisc) in the RTM_NEWLINK that
// creates it, its alias (which the kernel ignores on creation) right after.
// ovs-vswitchd reconfigures the whole bridge on every link change it hears
// of; changes that come together are folded into one.
func CreateVeth(s VethSpec) (netlink.Link, error) {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	if !s.HostDown {
		msg.Change |= unix.IFF_UP
		msg.Flags |= unix.IFF_UP
	}
	if s.Promisc {
		msg.Change |= unix.IFF_PROMISC
		msg.Flags |= unix.IFF_PROMISC
	}
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(s.HostName)))
	if s.MTU > 0 {
		req.AddData(nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(uint32(s.MTU))))
	}
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("veth"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	peer := data.AddRtAttr(nl.VETH_INFO_PEER, nil)
	nl.NewIfInfomsgChild(peer, unix.AF_UNSPEC)
	peer.AddRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(s.ContName))
	if s.MTU > 0 {
		peer.AddRtAttr(unix.IFLA_MTU, nl.Uint32Attr(uint32(s.MTU)))
	}
	if s.ContMAC != nil {
		peer.AddRtAttr(unix.IFLA_ADDRESS, []byte(s.ContMAC))
	}
	peer.AddRtAttr(unix.IFLA_NET_NS_FD, nl.Uint32Attr(uint32(s.ContNSFd)))
	req.AddData(info)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return nil, fmt.Errorf("creating veth %q/%q: %w", s.HostName, s.ContName, err)
	}
	host, err := netlink.LinkByName(s.HostName)
	if err != nil {
		_ = Delete(s.HostName)
		return nil, fmt.Errorf("looking up veth %q: %w", s.HostName, err)
	}
	if s.Alias != "" {
		if err := netlink.LinkSetAlias(host, s.Alias); err != nil {
			_ = Delete(s.HostName)
			return nil, fmt.Errorf("naming veth %q: %w", s.HostName, err)
		}
	}
	return host, nil
}

// RandomMAC returns a random unicast, locally administered MAC, as the
// kernel gives a veth end created without one.
func RandomMAC() (net.HardwareAddr, error) {
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return nil, fmt.Errorf("choosing a MAC: %w", err)
	}
	mac[0] = mac[0]&^0x01 | 0x02
	return mac, nil
}

// SetUp brings a link up.
func SetUp(l netlink.Link) error {
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("setting %q up: %w", l.Attrs().Name, err)
	}
	return nil
}

// Delete removes a link (and so its veth peer); a missing link is not an error.
func Delete(name string) error { return onLink(name, "deleting", netlink.LinkDel) }

// SetDown takes a link down; a missing link is not an error.
func SetDown(name string) error { return onLink(name, "setting down", netlink.LinkSetDown) }

// onLink does f to the link called name, when there is one: gone before
// or meanwhile (ENODEV: its peer's netns went away) is not an error.
func onLink(name, doing string, f func(netlink.Link) error) error {
	var nf netlink.LinkNotFoundError
	l, err := netlink.LinkByName(name)
	if err != nil {
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("looking up link %q: %w", name, err)
	}
	if err := f(l); err != nil {
		if errors.As(err, &nf) || errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
			return nil
		}
		return fmt.Errorf("%s link %q: %w", doing, name, err)
	}
	return nil
}

// LeftToNetns returns the host end of the veth whose container end is
// ifname in netns, when it is one of the suite's (named and aliased as
// CreateVeth makes them) and down, as a DEL that leaves it to the netns
// leaves it; "" otherwise.
func LeftToNetns(netns ns.NetNS, ifname string) (string, error) {
	var peer int
	err := netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		if _, ok := l.(*netlink.Veth); ok {
			peer = l.Attrs().ParentIndex
		}
		return nil
	})
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) || peer == 0 {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("looking up %q in netns %q: %w", ifname, netns.Path(), err)
	}
	l, err := netlink.LinkByIndex(peer)
	if err != nil {
		return "", nil // its peer is elsewhere
	}
	a := l.Attrs()
	if !strings.HasPrefix(a.Name, "ovf") || !strings.HasPrefix(a.Alias, "ovsflow:") || a.Flags&net.FlagUp != 0 {
		return "", nil
	}
	return a.Name, nil
}

// Exists reports whether a link called name exists in the current netns.
func Exists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

// SetSysctl writes an interface sysctl such as net/ipv6/conf/eth0/accept_dad,
// ignoring a missing file (IPv6 disabled).
func SetSysctl(key, value string) error {
	err := os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Sysctls is an interface's sysctls: keys of net/ipv4/conf/IFNAME and of
// net/ipv6/conf/IFNAME.
type Sysctls struct {
	IPv4, IPv6 map[string]string
}

// SetSysctls writes c for interface name in the current netns. Each family's
// directory is looked up once and its keys are opened relative to it: the
// lookup of an interface's directory under /proc/sys is most of a sysctl
// write's cost (docs/performance.md), and every container has an "eth0".
// A missing key or directory (IPv6 disabled) is skipped, as SetSysctl
// skips it.
func SetSysctls(name string, c Sysctls) error {
	for _, fam := range []struct {
		dir string
		kv  map[string]string
	}{{"/proc/sys/net/ipv4/conf/" + name, c.IPv4}, {"/proc/sys/net/ipv6/conf/" + name, c.IPv6}} {
		if len(fam.kv) == 0 {
			continue
		}
		if err := writeConf(fam.dir, fam.kv); err != nil {
			return fmt.Errorf("setting sysctls of %q: %w", name, err)
		}
	}
	return nil
}

func writeConf(dir string, kv map[string]string) error {
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	for k, v := range kv {
		fd, err := unix.Openat(dfd, k, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "open", Path: dir + "/" + k, Err: err}
		}
		_, err = unix.Write(fd, []byte(v))
		unix.Close(fd)
		if err != nil {
			return &os.PathError{Op: "write", Path: dir + "/" + k, Err: err}
		}
	}
	return nil
}

// Isolate keeps the node's IP stack off a host-side port: no ARP replies
// (arp_ignore=8), no IPv6. Needed for ports of a userspace-datapath bridge,
// whose frames the kernel also receives.
func Isolate(name string) error {
	return SetSysctls(name, Sysctls{IPv4: map[string]string{"arp_ignore": "8"}, IPv6: map[string]string{"disable_ipv6": "1"}})
}
