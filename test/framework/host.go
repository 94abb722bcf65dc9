package framework

import (
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/link"
)

// The node of docs/design.md ("The node"), on documentation ranges.
const (
	NodeV4    = "198.51.100.1"
	NodeV4b   = "198.51.100.3" // a second node address
	NodeV6    = "2001:db8:100::1"
	OutsideV4 = "198.51.100.2"
	OutsideV6 = "2001:db8:100::2"
)

var seq atomic.Int64

// Uniq returns prefix followed by a number unique in this process.
func Uniq(prefix string) string { return fmt.Sprintf("%s%d", prefix, seq.Add(1)) }

// Run executes a command and returns its combined output.
func Run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// MustRun executes a command and returns its combined output; an error fails the test.
func MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := Run(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// WireOVSHost turns bridge into the node of docs/design.md: the node addresses on
// its internal interface, and an uplink port (a veth) whose other end is eth0
// of the netns outsideNS, with the outside addresses and routes to the
// container ranges through the node. The node routes. On the userspace
// datapath, the uplink is isolated and TX checksum offload is off, as
// ovs-bridge does for its veths (see there); the kernel datapath needs
// neither, and the suites prove it by leaving both alone.
func WireOVSHost(t testing.TB, bridge, outsideNS, uplinkPrefix string) {
	t.Helper()
	must := func(name string, args ...string) { t.Helper(); MustRun(t, name, args...) }
	must("ip", "addr", "add", NodeV4+"/24", "dev", bridge)
	must("ip", "addr", "add", NodeV4b+"/24", "dev", bridge)
	must("ip", "addr", "add", NodeV6+"/64", "dev", bridge, "nodad")
	must("ip", "link", "set", bridge, "up")
	upl := Uniq(uplinkPrefix)
	must("ip", "link", "add", upl, "type", "veth", "peer", "name", "eth0", "netns", outsideNS)
	t.Cleanup(func() { Run("ip", "link", "del", upl) })
	must("ip", "link", "set", upl, "up")
	if Userspace() {
		// The userspace datapath reads the uplink through a packet socket: the
		// node's IP stack sees its frames too and would answer ARP on it. A
		// kernel datapath port's frames go to the datapath only.
		if err := link.Isolate(upl); err != nil {
			t.Fatal(err)
		}
	}
	must("ovs-vsctl", "--db="+Env.OVSDB, "--timeout=10", "add-port", bridge, upl)
	in := func(args ...string) { t.Helper(); must("ip", append([]string{"netns", "exec", outsideNS}, args...)...) }
	in("ip", "addr", "add", OutsideV4+"/24", "dev", "eth0")
	in("ip", "addr", "add", OutsideV6+"/64", "dev", "eth0", "nodad")
	in("ip", "link", "set", "eth0", "up")
	in("ip", "link", "set", "lo", "up")
	if Userspace() {
		// Userspace conntrack drops frames whose checksum the sender's
		// offload left to be filled in; the kernel datapath keeps the
		// packet's checksum state, and the receiver's stack completes it.
		in("ethtool", "-K", "eth0", "tx", "off")
	}
	in("ip", "route", "add", "192.0.2.0/24", "via", NodeV4)
	in("ip", "route", "add", "2001:db8:c::/64", "via", NodeV6)
	must("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	if Userspace() {
		// The node's own replies leave through the bridge's tap (see above).
		must("ethtool", "-K", bridge, "tx", "off")
	}
}
