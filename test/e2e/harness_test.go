package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// Shared with the other suites (test/internal/sandbox).
var (
	conflist    = framework.Conflist
	pm          = framework.PM
	mappings    = framework.Mappings
	hp          = framework.HP
	cniCode     = framework.CNICode
	parallel    = framework.Parallel
	allocations = framework.Allocations
)

var (
	uniq = framework.Uniq
	run  = framework.Run // executes a command and returns its combined output
)

func vsctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run("ovs-vsctl", append([]string{"--db=" + ovsdbAddr, "--timeout=10"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// portsOf lists the names of the ports whose external_ids hold key=value.
func portsOf(t *testing.T, key, value string) []string {
	t.Helper()
	out := vsctl(t, "--no-headings", "-f", "csv", "--columns=name", "find", "Port", "external_ids:"+key+"="+value)
	if out == "" {
		return nil
	}
	return strings.Fields(out)
}

// newBridge creates a bridge on the suite's datapath (framework.Datapath) for
// one test and removes it afterwards.
func newBridge(t *testing.T) string {
	t.Helper()
	br := uniq("e2ebr")
	vsctl(t, "add-br", br, "--", "set", "bridge", br, "datapath_type="+datapath)
	t.Cleanup(func() { delBridge(br) })
	if !framework.Userspace() {
		// Proof that the bridge is on the kernel's datapath: its internal
		// port is a port of a datapath of the openvswitch module.
		if out, err := run("ovs-dpctl", "show"); err != nil || !strings.Contains(out, ": "+br+" (internal)") {
			t.Fatalf("bridge %s is not on the kernel datapath: %v\n%s", br, err, out)
		}
	}
	return br
}

func delBridge(br string) {
	run("ovs-vsctl", "--db="+ovsdbAddr, "--if-exists", "del-br", br)
	if framework.Userspace() {
		// The netdev datapath's kernel tap can outlive the bridge; a kernel
		// datapath's internal port goes with it.
		run("ip", "link", "del", br)
	}
}

type container struct {
	id   string
	ns   ns.NetNS
	name string // netns name under /run/netns
}

func newContainer(t *testing.T) *container {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	c := &container{id: uniq("ctr-"), ns: n, name: filepath.Base(n.Path())}
	t.Cleanup(func() {
		n.Close()
		_ = testutils.UnmountNS(n)
	})
	return c
}

func (c *container) exec(args ...string) (string, error) {
	return run("ip", append([]string{"netns", "exec", c.name}, args...)...)
}

func (c *container) ping(ip string) error {
	cmd := "ping"
	if strings.Contains(ip, ":") {
		cmd = "ping6"
	}
	_, err := c.exec(cmd, "-c", "1", "-W", "2", ip)
	return err
}

// serveTCP listens inside the container and answers every connection with
// "hello from <id>" followed by the client address it saw.
func (c *container) serveTCP(t *testing.T, port int) {
	t.Helper()
	framework.ServeTCP(t, c.ns, c.id, port)
}

// serveUDP answers every datagram the same way.
func (c *container) serveUDP(t *testing.T, port int) {
	t.Helper()
	c.serveUDPWith(t, port, func(k int, addr net.Addr) []byte {
		return []byte(fmt.Sprintf("hello from %s to %s", c.id, addr))
	})
}

// serveUDPWith answers every datagram of k bytes from addr with reply(k, addr).
func (c *container) serveUDPWith(t *testing.T, port int, reply func(k int, addr net.Addr) []byte) {
	t.Helper()
	var pc net.PacketConn
	err := c.ns.Do(func(ns.NetNS) error {
		var err error
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			k, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(reply(k, addr), addr)
		}
	}()
}

// dial connects from inside netns n (nil: the node) and returns what the server said.
func dial(n ns.NetNS, network, addr string) (string, error) {
	var out string
	do := func(ns.NetNS) error {
		conn, err := net.DialTimeout(network, addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		if network == "udp" || network == "udp6" {
			if _, err := conn.Write([]byte("ping")); err != nil {
				return err
			}
			buf := make([]byte, 1500)
			n, err := conn.Read(buf)
			out = string(buf[:n])
			return err
		}
		b, err := io.ReadAll(conn)
		out = string(b)
		return err
	}
	if n == nil {
		return out, do(nil)
	}
	return out, n.Do(do)
}

// cni drives plugins through libcni with a private cache directory.
type cni struct {
	cfg  *libcni.CNIConfig
	list *libcni.NetworkConfigList
}

// newCNI finds the plugins in the suite's binDir, after any of dirs (a
// test's fake plugins).
func newCNI(t *testing.T, conflist map[string]any, dirs ...string) *cni {
	t.Helper()
	b, err := json.Marshal(conflist)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatalf("conflist: %v\n%s", err, b)
	}
	return &cni{cfg: libcni.NewCNIConfigWithCacheDir(append(dirs, binDir), t.TempDir(), nil), list: list}
}

func (c *container) rt(ifname string, capArgs map[string]any) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: c.id, NetNS: c.ns.Path(), IfName: ifname, CapabilityArgs: capArgs}
}

func (n *cni) add(c *container, ifname string, capArgs map[string]any) (*current.Result, error) {
	r, err := n.cfg.AddNetworkList(context.Background(), n.list, c.rt(ifname, capArgs))
	if err != nil {
		return nil, err
	}
	return current.NewResultFromResult(r)
}

func (n *cni) mustAdd(t *testing.T, c *container, ifname string, capArgs map[string]any) *current.Result {
	t.Helper()
	r, err := n.add(c, ifname, capArgs)
	if err != nil {
		t.Fatalf("ADD %s/%s: %v", c.id, ifname, err)
	}
	return r
}

func (n *cni) del(c *container, ifname string, capArgs map[string]any) error {
	return n.cfg.DelNetworkList(context.Background(), n.list, c.rt(ifname, capArgs))
}

func (n *cni) check(c *container, ifname string, capArgs map[string]any) error {
	return n.cfg.CheckNetworkList(context.Background(), n.list, c.rt(ifname, capArgs))
}

// bridgeConf is an ovs-bridge plugin entry with host-local IPAM on the
// documentation ranges; extra keys override.
func bridgeConf(br, dataDir string, extra map[string]any) map[string]any {
	c := map[string]any{
		"type": "ovs-bridge", "bridge": br, "ovsdb": ovsdbAddr,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": dataDir,
			"ranges": []any{
				[]any{map[string]any{"subnet": "192.0.2.0/24", "gateway": "192.0.2.1"}},
				[]any{map[string]any{"subnet": "2001:db8:c::/64", "gateway": "2001:db8:c::1"}},
			},
			"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
		},
	}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

// addrOf returns the first address of the given family in a result.
func addrOf(t *testing.T, r *current.Result, v6 bool) string {
	t.Helper()
	for _, ip := range r.IPs {
		if (ip.Address.IP.To4() == nil) == v6 {
			return ip.Address.IP.String()
		}
	}
	t.Fatalf("result has no IPv6=%v address: %v", v6, r)
	return ""
}

// ourVeths lists host veths named like the plugin names them.
func ourVeths(t *testing.T) []string {
	t.Helper()
	links, err := netlinksafe.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "ovf") {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

func hostVeth(c *container, ifname string) string { return link.HostVethName(c.id, ifname) }

var timeNow = time.Now
