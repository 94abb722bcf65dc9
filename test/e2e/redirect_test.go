package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// icmp6OutRedirects reads the node's count of ICMPv6 redirects sent
// (/proc/net/snmp6's Icmp6OutRedirects) in the netns of the calling
// thread: the test's, the node's.
func icmp6OutRedirects() (uint64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const file = "/proc/thread-self/net/snmp6"
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if fields := strings.Fields(s.Text()); len(fields) == 2 && fields[0] == "Icmp6OutRedirects" {
			return strconv.ParseUint(fields[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no Icmp6OutRedirects", file)
}

// redirects reads the ICMPv6 redirects (type 137) that reach a
// container's IP stack, from a raw socket of its netns.
type redirects struct{ conn net.PacketConn }

func listenRedirects(t *testing.T, c *framework.Container) *redirects {
	t.Helper()
	var r redirects
	err := c.NS.Do(func(ns.NetNS) (err error) {
		r.conn, err = net.ListenPacket("ip6:ipv6-icmp", "::")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.conn.Close() })
	return &r
}

// queued returns how many redirects the socket holds, without waiting
// (MSG_DONTWAIT: a read deadline already passed reads nothing at all).
func (r *redirects) queued() (int, error) {
	rc, err := r.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return 0, err
	}
	n, buf := 0, make([]byte, 2048)
	for {
		var k int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			k, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			return true
		}); err != nil {
			return n, err
		}
		switch {
		case errors.Is(rerr, unix.EAGAIN):
			return n, nil
		case rerr != nil:
			return n, rerr
		case k > 0 && buf[0] == 137:
			n++
		}
	}
}

// The node's own ICMPv6 redirects never reach a pod on a bridge
// node-prep.sh prepared. The bridge's interface is the pod's gateway and
// also holds the address of the uplink's link, so the node forwards a pod's
// packet for a host on that link back out of the bridge, and its kernel
// tells the pod to go direct (IPv6 has no sysctl to stop it; IPv4's is off
// on a prepared node). Taken, the redirect sends the pod's traffic past the
// node one way while the answers come through it, and the node's conntrack
// drops them (INVALID): Kubernetes' dual-stack Service test, a pod to
// another node's IPv6 NodePort, failed so. The base flows drop what LOCAL
// sends of it. The node's counter shows its kernel sent a redirect while
// the pod saw none; the control, the drop flow deleted, shows the pod
// receives the next one.
func TestNodeRedirectsDropped(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	framework.PrepareBridge(t, h.Bridge)
	// A range of this test's own: the kernel rate-limits redirects per
	// destination, which other tests' pods could have used up.
	const gw6 = "2001:db8:c7::1"
	n := framework.NewCNI(t, framework.Conflist("1.1.0", "noredirect",
		framework.BridgeConf(h.Bridge, ovsdbAddr, t.TempDir(), map[string]any{"isGateway": true,
			"ipam": map[string]any{"type": "host-local", "dataDir": t.TempDir(),
				"ranges": []any{[]any{map[string]any{"subnet": "2001:db8:c7::/64", "gateway": gw6}}},
				"routes": []any{map[string]any{"dst": "::/0"}}}})), nil)
	c := framework.NewContainer(t)
	n.MustAdd(t, c, "eth0", nil)
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	// The pod sends to an address of the uplink's link that no host holds:
	// the node forwards the datagram back out of the bridge (and redirects)
	// before it resolves the neighbour, and nothing answers, so the only
	// redirects are the pod's (an answer forwarded to the pod would make
	// the node redirect its sender too).
	const silent, drop = "2001:db8:100::77", "icmp6,in_port=LOCAL,icmp_type=137"
	if !slices.ContainsFunc(framework.FlowsMatching(t, h.OFTarget(), "table=0,"+drop), func(l string) bool { return strings.Contains(l, "priority=330") }) {
		t.Fatalf("no drop of the node's redirects among the base flows:\n%s", h.DumpAll())
	}
	got := listenRedirects(t, c)
	send := func() error {
		return c.NS.Do(func(ns.NetNS) error {
			conn, err := net.Dial("udp", hp(silent, 9))
			if err != nil {
				return err
			}
			defer conn.Close()
			_, err = conn.Write([]byte("redirect me"))
			return err
		})
	}
	sent := func() uint64 {
		n, err := icmp6OutRedirects()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Until the node's kernel has sent one; then a ping of the gateway,
	// whose answer leaves LOCAL for the pod after the redirect, by the
	// same way.
	before := sent()
	framework.Eventually(t, 20*time.Second, "the node sends a redirect (the test proves nothing without)", func() error {
		if err := send(); err != nil {
			return err
		}
		if now := sent(); now == before {
			return fmt.Errorf("the node's Icmp6OutRedirects still %d", now)
		}
		return nil
	})
	if err := c.Ping(gw6); err != nil {
		t.Fatal(err)
	}
	if k, err := got.queued(); err != nil || k != 0 {
		t.Errorf("the pod received %d redirect(s) from the node (%v), want none", k, err)
	}

	// Control: without the drop flow, the pod receives them.
	if out, err := run("ovs-ofctl", "-O", "OpenFlow14", "--strict", "del-flows", h.OFTarget(), "table=0,priority=330,"+drop); err != nil {
		t.Fatalf("del-flows: %v: %s", err, out)
	}
	framework.Eventually(t, 20*time.Second, "control: the pod receives the node's redirect once the drop flow is gone", func() error {
		if err := send(); err != nil {
			return err
		}
		if err := c.Ping(gw6); err != nil {
			return err
		}
		if k, err := got.queued(); err != nil || k == 0 {
			return fmt.Errorf("no redirect at the pod (%v); the node sent %d since the test began", err, sent()-before)
		}
		return nil
	})
}
