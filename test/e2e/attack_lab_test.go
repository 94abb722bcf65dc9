package e2e

// The lab of the attack tests (attack_*_test.go): the node of docs/design.md
// (newOVSHost: node addresses on the bridge interface, an uplink to an
// "outside" netns) with networks of ovs-bridge (and ovs-portmap) on it, each
// with host-local IPAM in a range of its own of one dual-stack subnet, so that
// protected and unprotected networks can share the bridge and the subnet.
//
// Every attack runs twice, in a lab of its own: against a protected
// attachment, where it must be blocked, and against a control that is not
// protected, where it must succeed; so each test shows that the victim is
// susceptible and that the protection is what stops it.

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

type lab struct {
	*framework.OVSHost
	t     *testing.T
	dir   string // host-local's data
	slots int
	np    *normalPath
}

func newLab(t *testing.T) *lab {
	t.Helper()
	requireSandbox(t)
	return &lab{OVSHost: framework.NewOVSHost(t), t: t, dir: t.TempDir()}
}

// bridgeEntry is an ovs-bridge entry on the lab's bridge with its gateway on
// the bridge interface and dual-stack host-local IPAM in a range of its own
// (192.0.2.0/24 and 2001:db8:c::/64, gateways .1 and ::1); extra keys
// override, a nil value removes the key ("ipam": nil: L2 only).
func (l *lab) bridgeEntry(extra map[string]any) map[string]any {
	s := l.slots
	l.slots++
	if s > 10 {
		l.t.Fatalf("lab: more than 11 networks")
	}
	lo := 10 + 20*s
	c := map[string]any{
		"type": "ovs-bridge", "bridge": l.Bridge, "ovsdb": ovsdbAddr, "isGateway": true,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": l.dir,
			"ranges": []any{
				[]any{map[string]any{"subnet": "192.0.2.0/24", "gateway": "192.0.2.1",
					"rangeStart": fmt.Sprintf("192.0.2.%d", lo), "rangeEnd": fmt.Sprintf("192.0.2.%d", lo+19)}},
				[]any{map[string]any{"subnet": "2001:db8:c::/64", "gateway": "2001:db8:c::1",
					"rangeStart": fmt.Sprintf("2001:db8:c::%d:10", s+1), "rangeEnd": fmt.Sprintf("2001:db8:c::%d:ff", s+1)}},
			},
			"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
		},
	}
	return framework.Override(c, extra)
}

// network is a conflist of one ovs-bridge entry (bridgeEntry(extra)) and,
// when pmExtra is not nil, an ovs-portmap entry with those keys.
func (l *lab) network(name string, extra, pmExtra map[string]any) *framework.CNI {
	plugins := []map[string]any{l.bridgeEntry(extra)}
	if pmExtra != nil {
		p := map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"portMappings": true}}
		for k, v := range pmExtra {
			p[k] = v
		}
		plugins = append(plugins, p)
	}
	return framework.NewCNI(l.t, conflist("1.1.0", name, plugins...), nil)
}

// member is a container attached to a lab network by ADD.
type member struct {
	*framework.Container
	role   string // in messages
	n      *framework.CNI
	r      *current.Result
	mac    net.HardwareAddr
	v4, v6 netip.Addr // invalid when IPAM gave none
	ll     netip.Addr // its link-local, as its kernel has it
}

// join adds a new container to network n and removes it at the end of the
// test; on failure it logs the flows of the attachment and its port.
func (l *lab) join(n *framework.CNI, role string, capArgs map[string]any) *member {
	l.t.Helper()
	c := framework.NewContainer(l.t)
	m := &member{Container: c, role: role, n: n}
	m.r = n.MustAdd(l.t, c, "eth0", capArgs)
	l.t.Cleanup(func() { n.Del(c, "eth0", nil) })
	if strings.HasPrefix(role, "attacker") {
		l.watch(c, role)
	}
	m.fill(l.t)
	return m
}

// watch logs, when the test failed, the flows of an attachment and its port.
func (l *lab) watch(c *framework.Container, role string) {
	t := l.t
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		cookie := flows.AttachmentCookie(c.ID, "eth0")
		fl, _ := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", l.OFTarget(), cookie.AttachmentDelete().String())
		port, _ := run("ovs-vsctl", "--db="+ovsdbAddr, "--if-exists", "--columns=name,tag,trunks,vlan_mode,external_ids", "list", "Port", c.HostVeth("eth0"))
		t.Logf("%s (%s): flows of %s:\n%s\nport:\n%s", role, c.ID, cookie.AttachmentDelete().String(), fl, port)
	})
}

func (m *member) fill(t *testing.T) {
	t.Helper()
	var err error
	if m.mac, err = net.ParseMAC(m.r.Interfaces[1].Mac); err != nil {
		t.Fatalf("%s: MAC %q: %v", m.role, m.r.Interfaces[1].Mac, err)
	}
	for _, ipc := range m.r.IPs {
		a, _ := netip.AddrFromSlice(ipc.Address.IP)
		if a = a.Unmap(); a.Is4() {
			m.v4 = a
		} else {
			m.v6 = a
		}
	}
	m.ll = linkLocal(t, m.NS, "eth0", m.role)
}

// linkLocal waits for the (non-tentative) link-local address of ifname in
// netns n (nil: the node's).
func linkLocal(t *testing.T, n ns.NetNS, ifname, who string) netip.Addr {
	t.Helper()
	var got netip.Addr
	look := func(ns.NetNS) error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		addrs, err := netlinksafe.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() && a.Flags&0x40 == 0 { // IFA_F_TENTATIVE
				got, _ = netip.AddrFromSlice(a.IP)
			}
		}
		return nil
	}
	if !framework.Until(3*time.Second, func() bool {
		var err error
		if n == nil {
			err = look(nil)
		} else {
			err = n.Do(look)
		}
		if err != nil {
			t.Fatalf("%s: link-local of %s: %v", who, ifname, err)
		}
		return got.IsValid()
	}) {
		t.Fatalf("%s: %s has no link-local address after %v", who, ifname, framework.Scaled(3*time.Second))
	}
	return got
}

// sh runs a command in the container and returns its output, or fails.
func sh(c *framework.Container, t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// node facts: the bridge interface's MAC and link-local.
func (l *lab) bridgeMAC(t *testing.T) net.HardwareAddr {
	t.Helper()
	ifi, err := net.InterfaceByName(l.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	return ifi.HardwareAddr
}

func (l *lab) outsideMAC(t *testing.T) net.HardwareAddr {
	t.Helper()
	var mac net.HardwareAddr
	if err := l.Outside.NS.Do(func(ns.NetNS) error {
		ifi, err := net.InterfaceByName("eth0")
		if err == nil {
			mac = ifi.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

// uplink is the name of the bridge's uplink port (sandbox.WireOVSHost).
func (l *lab) uplink(t *testing.T) string {
	t.Helper()
	for _, p := range strings.Fields(framework.Vsctl(t, "list-ports", l.Bridge)) {
		if strings.HasPrefix(p, "upl") {
			return p
		}
	}
	t.Fatalf("no uplink port on %s", l.Bridge)
	return ""
}

// neighMAC is the link-layer address of ip's neighbour entry on dev in
// container c (nil: the node), "" when there is none.
func neighMAC(t *testing.T, c *framework.Container, dev string, ip netip.Addr) string {
	t.Helper()
	args := []string{"neigh", "show", ip.String(), "dev", dev}
	var out string
	var err error
	if c == nil {
		out, err = run("ip", args...)
	} else {
		out, err = c.Exec(append([]string{"ip"}, args...)...)
	}
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "lladdr" {
			return f[i+1]
		}
	}
	return ""
}

// normalPath is two containers of a network with host ports: the traffic
// every attack test must leave working.
type normalPath struct {
	p1, p2 *member
}

const normalHostPort = 8099

// normal checks the normal path on the lab: dual-stack pings between two
// containers, a host port from the outside (IPv4 and IPv6) and hairpin.
func (l *lab) normal(t *testing.T) {
	t.Helper()
	if l.np == nil {
		n := l.network("normal-path", nil, map[string]any{})
		np := &normalPath{}
		np.p1 = l.join(n, "normal-path p1", mappings(pm(normalHostPort, 80, "tcp", "")))
		np.p2 = l.join(n, "normal-path p2", nil)
		np.p1.ServeTCP(t, 80)
		l.np = np
	}
	np := l.np
	for _, ip := range []netip.Addr{np.p1.v4, np.p1.v6} {
		// Two echo requests: one lost on a loaded machine is no failure.
		if _, err := np.p2.Exec("ping", "-c", "2", "-i", "0.2", "-W", "2", ip.String()); err != nil {
			t.Errorf("normal path: ping p2 -> p1 %s: %v", ip, err)
		}
	}
	expect(t, l.Outside.NS, "tcp", hp(nodeV4, normalHostPort), np.p1.Container, outsideV4)
	expect(t, l.Outside.NS, "tcp", hp(nodeV6, normalHostPort), np.p1.Container, outsideV6)
	expect(t, np.p1.NS, "tcp", hp(nodeV4, normalHostPort), np.p1.Container, "")
}

// pingLL pings a link-local address from c (to create a neighbour entry).
func pingLL(c *framework.Container, t *testing.T, ll netip.Addr) {
	t.Helper()
	if _, err := c.Exec("ping", "-6", "-c", "1", "-W", "2", ll.String()+"%eth0"); err != nil {
		t.Fatalf("ping %s%%eth0: %v", ll, err)
	}
}

// sysctl reads a sysctl in container c.
func sysctl(c *framework.Container, t *testing.T, key string) string {
	t.Helper()
	return strings.TrimSpace(sh(c, t, "sysctl", "-n", key))
}
