package framework

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ovsflow/ovs-cni/pkg/link"
)

// Container is a network namespace made by a test, playing a container.
type Container struct {
	ID   string
	NS   ns.NetNS
	Name string // netns name under /run/netns
}

// NewContainer makes a Container with a new ID, removed at the test's end.
func NewContainer(t testing.TB) *Container {
	t.Helper()
	return NewContainerID(t, Uniq("ctr-"))
}

// NewContainerID makes a Container with the given ID, removed at the test's end.
func NewContainerID(t testing.TB, id string) *Container {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Close()
		_ = testutils.UnmountNS(n)
	})
	return &Container{ID: id, NS: n, Name: filepath.Base(n.Path())}
}

// Exec runs a command inside the container and returns its combined output.
func (c *Container) Exec(args ...string) (string, error) {
	return Run("ip", append([]string{"netns", "exec", c.Name}, args...)...)
}

// Ping sends one echo request to ip (either family) and waits 2 s for the reply.
func (c *Container) Ping(ip string) error {
	cmd := "ping"
	if strings.Contains(ip, ":") {
		cmd = "ping6"
	}
	_, err := c.Exec(cmd, "-c", "1", "-W", "2", ip)
	return err
}

// ServeTCP answers every TCP connection to port with "hello from <id> to <client address>".
func (c *Container) ServeTCP(t testing.TB, port int) {
	t.Helper()
	ServeTCP(t, c.NS, c.ID, port)
}

// ServeUDP answers every UDP datagram to port with "hello from <id> to <client address>".
func (c *Container) ServeUDP(t testing.TB, port int) {
	t.Helper()
	c.ServeUDPWith(t, port, func(k int, addr net.Addr) []byte {
		return []byte(fmt.Sprintf("hello from %s to %s", c.ID, addr))
	})
}

// ServeUDPWith answers every datagram of k bytes from addr with reply(k, addr).
func (c *Container) ServeUDPWith(t testing.TB, port int, reply func(k int, addr net.Addr) []byte) {
	t.Helper()
	ServeUDPWith(t, c.NS, port, reply)
}

// RT is the libcni runtime config of the container's interface ifname.
func (c *Container) RT(ifname string, capArgs map[string]any) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: c.ID, NetNS: c.NS.Path(), IfName: ifname, CapabilityArgs: capArgs}
}

// HostVeth is the name ovs-bridge gives the node's end of the container's ifname.
func (c *Container) HostVeth(ifname string) string { return link.HostVethName(c.ID, ifname) }
