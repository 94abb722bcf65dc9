package resilience

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// Shared with the other suites (test/internal/sandbox).
var (
	conflist = framework.Conflist
	pm       = framework.PM
	mappings = framework.Mappings
	hp       = framework.HP
	cniCode  = framework.CNICode
	parallel = framework.Parallel
)

// Small helpers like test/e2e's (test packages cannot import each other's
// _test files); the shared ones live in test/internal/framework.

var (
	uniq = framework.Uniq
	run  = framework.Run // executes a command and returns its combined output
)

func vsctlAt(t testing.TB, db string, args ...string) string {
	t.Helper()
	out, err := run("ovs-vsctl", append([]string{"--db=" + db, "--timeout=10"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func vsctl(t testing.TB, args ...string) string { t.Helper(); return vsctlAt(t, ovsdbAddr, args...) }

// newBridge creates a netdev bridge for one test and removes it afterwards.
func newBridge(t *testing.T) string {
	t.Helper()
	br := uniq("rsbr")
	vsctl(t, "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev")
	t.Cleanup(func() {
		run("ovs-vsctl", "--db="+ovsdbAddr, "--if-exists", "del-br", br)
		run("ip", "link", "del", br) // the netdev datapath's kernel tap
	})
	return br
}

type container struct {
	id   string
	ns   ns.NetNS
	name string // netns name under /run/netns
}

func newContainer(t *testing.T) *container {
	t.Helper()
	return newContainerID(t, uniq("ctr-"))
}

func newContainerID(t *testing.T, id string) *container {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	c := &container{id: id, ns: n, name: filepath.Base(n.Path())}
	t.Cleanup(func() {
		n.Close()
		_ = testutils.UnmountNS(n)
	})
	return c
}

func (c *container) exec(args ...string) (string, error) {
	return run("ip", append([]string{"netns", "exec", c.name}, args...)...)
}

// serveTCP listens inside the container on a wildcard address (it survives
// the interface being deleted and re-created) and answers every connection
// with "hello from <id>".
func (c *container) serveTCP(t *testing.T, port int) {
	t.Helper()
	framework.ServeTCP(t, c.ns, c.id, port)
}

// dial connects over TCP from inside netns n and returns what the server said.
func dial(n ns.NetNS, addr string) (string, error) {
	var out string
	err := n.Do(func(ns.NetNS) error {
		conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(3 * time.Second))
		b, err := io.ReadAll(conn)
		out = string(b)
		return err
	})
	return out, err
}

// The node of docs/design.md (framework.WireOVSHost).
const (
	nodeV4    = framework.NodeV4
	nodeV6    = framework.NodeV6
	outsideV4 = framework.OutsideV4
	outsideV6 = framework.OutsideV6
)

type ovsHost struct {
	bridge  string
	outside *container
}

func newOVSHost(t *testing.T) *ovsHost {
	t.Helper()
	br := newBridge(t)
	h := &ovsHost{bridge: br, outside: newContainer(t)}
	t.Cleanup(func() {
		if t.Failed() {
			ports, _ := run("ovs-vsctl", "--db="+ovsdbAddr, "--columns=name,ofport,external_ids", "list", "Interface")
			fl, _ := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", h.ofTarget())
			t.Logf("interfaces:\n%s\nflows on %s:\n%s", ports, br, fl)
		}
	})
	framework.WireOVSHost(t, br, h.outside.name, "rsupl")
	return h
}

func (h *ovsHost) ofTarget() string { return ofTargetOf(ovsdbAddr, h.bridge) }

// ofTargetOf is the bridge's OpenFlow management socket next to the OVSDB one.
func ofTargetOf(ovsdb, bridge string) string {
	return "unix:" + filepath.Join(filepath.Dir(strings.TrimPrefix(ovsdb, "unix:")), bridge+".mgmt")
}

// bridgeConf is an ovs-bridge plugin entry with host-local IPAM on the
// documentation ranges; extra keys override (nil deletes).
func bridgeConf(br, db, dataDir string, extra map[string]any) map[string]any {
	c := map[string]any{
		"type": "ovs-bridge", "bridge": br, "ovsdb": db,
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

func portmapConf(db string, extra map[string]any) map[string]any {
	c := map[string]any{"type": "ovs-portmap", "ovsdb": db, "capabilities": map[string]bool{"portMappings": true}}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// cni drives plugins through libcni, with an invoke.Exec of this suite.
type cni struct {
	cfg  *libcni.CNIConfig
	list *libcni.NetworkConfigList
	exec *pluginExec
}

func newCNI(t *testing.T, conflist map[string]any, x *pluginExec) *cni {
	t.Helper()
	b, err := json.Marshal(conflist)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatalf("conflist: %v\n%s", err, b)
	}
	if x == nil {
		x = &pluginExec{}
	}
	return &cni{cfg: libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), x), list: list, exec: x}
}

func rtOf(c *container, ifname string, capArgs map[string]any) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: c.id, NetNS: c.ns.Path(), IfName: ifname, CapabilityArgs: capArgs}
}

func (n *cni) add(ctx context.Context, c *container, capArgs map[string]any) (*current.Result, error) {
	r, err := n.cfg.AddNetworkList(ctx, n.list, rtOf(c, "eth0", capArgs))
	if err != nil {
		return nil, err
	}
	return current.NewResultFromResult(r)
}

func (n *cni) check(ctx context.Context, c *container, capArgs map[string]any) error {
	return n.cfg.CheckNetworkList(ctx, n.list, rtOf(c, "eth0", capArgs))
}

func (n *cni) del(ctx context.Context, c *container, capArgs map[string]any) error {
	return n.cfg.DelNetworkList(ctx, n.list, rtOf(c, "eth0", capArgs))
}

// gc runs GC as a runtime that lost its own cache would: libcni's
// GCNetworkList first DELs every cached attachment that is not valid, so a
// CNIConfig with an empty cache leaves the work to the plugins' GC.
func (n *cni) gc(ctx context.Context, t *testing.T, valid []types.GCAttachment) error {
	cfg := libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), n.exec)
	return cfg.GCNetworkList(ctx, n.list, &libcni.GCArgs{ValidAttachments: valid})
}

func (n *cni) status(ctx context.Context) error { return n.cfg.GetStatusNetworkList(ctx, n.list) }

// figure prints one line of figures for hack/resilience.sh.
func figure(t *testing.T, name string, kv ...any) {
	t.Helper()
	var b strings.Builder
	b.WriteString("FIGURE " + name)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
	}
	fmt.Fprintln(os.Stdout, b.String())
	t.Log(b.String())
}
