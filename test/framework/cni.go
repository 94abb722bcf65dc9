package framework

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// CNI runs a conflist's plugins as binaries through libcni, as a runtime
// does, with a private cache directory.
type CNI struct {
	Cfg  *libcni.CNIConfig
	List *libcni.NetworkConfigList
	Exec invoke.Exec // nil: libcni's own
	dirs []string
}

// NewCNI finds the plugins in dirs (a test's fake plugins), then Env.BinDir,
// and executes them with x (nil: libcni's own exec).
func NewCNI(t testing.TB, conflist map[string]any, x invoke.Exec, dirs ...string) *CNI {
	t.Helper()
	b, err := json.Marshal(conflist)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatalf("conflist: %v\n%s", err, b)
	}
	dirs = append(dirs, Env.BinDir)
	return &CNI{Cfg: libcni.NewCNIConfigWithCacheDir(dirs, t.TempDir(), x), List: list, Exec: x, dirs: dirs}
}

// HookExec runs the plugins as libcni's own exec does (killed with SIGKILL
// when the runtime's context ends), calling Before, if set, with each
// plugin's name and command before it starts: a fault at a point of a
// chain.
type HookExec struct {
	Before func(plugin, command string)
}

var hookExec = &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}

// ExecPlugin implements invoke.Exec.
func (x *HookExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	if x.Before != nil {
		command := ""
		for _, e := range env {
			if v, ok := strings.CutPrefix(e, "CNI_COMMAND="); ok {
				command = v
			}
		}
		x.Before(filepath.Base(path), command)
	}
	return hookExec.ExecPlugin(ctx, path, stdin, env)
}

// FindInPath implements invoke.Exec.
func (x *HookExec) FindInPath(plugin string, paths []string) (string, error) {
	return hookExec.FindInPath(plugin, paths)
}

// Decode implements invoke.Exec.
func (x *HookExec) Decode(b []byte) (version.PluginInfo, error) { return hookExec.Decode(b) }

// Add runs ADD for the container's ifname.
func (n *CNI) Add(c *Container, ifname string, capArgs map[string]any) (*current.Result, error) {
	return n.AddContext(context.Background(), c, ifname, capArgs)
}

// AddContext runs ADD with ctx.
func (n *CNI) AddContext(ctx context.Context, c *Container, ifname string, capArgs map[string]any) (*current.Result, error) {
	r, err := n.Cfg.AddNetworkList(ctx, n.List, c.RT(ifname, capArgs))
	if err != nil {
		return nil, err
	}
	return current.NewResultFromResult(r)
}

// MustAdd runs ADD and fails the test on an error.
func (n *CNI) MustAdd(t testing.TB, c *Container, ifname string, capArgs map[string]any) *current.Result {
	t.Helper()
	r, err := n.Add(c, ifname, capArgs)
	if err != nil {
		t.Fatalf("ADD %s/%s: %v", c.ID, ifname, err)
	}
	return r
}

// Check runs CHECK for the container's ifname.
func (n *CNI) Check(c *Container, ifname string, capArgs map[string]any) error {
	return n.CheckContext(context.Background(), c, ifname, capArgs)
}

// CheckContext runs CHECK with ctx.
func (n *CNI) CheckContext(ctx context.Context, c *Container, ifname string, capArgs map[string]any) error {
	return n.Cfg.CheckNetworkList(ctx, n.List, c.RT(ifname, capArgs))
}

// Del runs DEL for the container's ifname.
func (n *CNI) Del(c *Container, ifname string, capArgs map[string]any) error {
	return n.DelContext(context.Background(), c, ifname, capArgs)
}

// DelContext runs DEL with ctx.
func (n *CNI) DelContext(ctx context.Context, c *Container, ifname string, capArgs map[string]any) error {
	return n.Cfg.DelNetworkList(ctx, n.List, c.RT(ifname, capArgs))
}

// GC runs GC as a runtime that lost its own cache would: libcni's
// GCNetworkList first DELs every cached attachment that is not valid, so a
// CNIConfig with an empty cache leaves the work to the plugins' GC.
func (n *CNI) GC(ctx context.Context, t testing.TB, valid []types.GCAttachment) error {
	cfg := libcni.NewCNIConfigWithCacheDir(n.dirs, t.TempDir(), n.Exec)
	return cfg.GCNetworkList(ctx, n.List, &libcni.GCArgs{ValidAttachments: valid})
}

// Status runs STATUS.
func (n *CNI) Status(ctx context.Context) error { return n.Cfg.GetStatusNetworkList(ctx, n.List) }

// CNICode is the CNI error code of err, or 0.
func CNICode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// AddrOf returns the first address of the given family in a result.
func AddrOf(t testing.TB, r *current.Result, v6 bool) string {
	t.Helper()
	for _, ip := range r.IPs {
		if (ip.Address.IP.To4() == nil) == v6 {
			return ip.Address.IP.String()
		}
	}
	t.Fatalf("result has no IPv6=%v address: %v", v6, r)
	return ""
}

// PortmapList is a conflist of ovs-bridge (gateway on the host's bridge) and
// ovs-portmap (with pmExtra), run by a new CNI.
func (h *OVSHost) PortmapList(t testing.TB, version, name string, pmExtra map[string]any) *CNI {
	t.Helper()
	return NewCNI(t, Conflist(version, name,
		BridgeConf(h.Bridge, Env.OVSDB, t.TempDir(), map[string]any{"isGateway": true}), PortmapConf(Env.OVSDB, pmExtra)), nil)
}

// BandwidthList is a conflist of ovs-bridge (gateway on the host's bridge)
// and ovs-bandwidth (with extra), run by a new CNI.
func (h *OVSHost) BandwidthList(t testing.TB, name string, extra map[string]any) *CNI {
	t.Helper()
	return NewCNI(t, Conflist("1.1.0", name,
		BridgeConf(h.Bridge, Env.OVSDB, t.TempDir(), map[string]any{"isGateway": true}), BandwidthConf(Env.OVSDB, extra)), nil)
}
