package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/netlinksafe"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// VsctlAt runs ovs-vsctl against the OVSDB endpoint db and returns its trimmed output.
func VsctlAt(t testing.TB, db string, args ...string) string {
	t.Helper()
	out, err := Run("ovs-vsctl", append([]string{"--db=" + db, "--timeout=10"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// Vsctl runs ovs-vsctl against the sandbox's OVSDB (Env.OVSDB).
func Vsctl(t testing.TB, args ...string) string { t.Helper(); return VsctlAt(t, Env.OVSDB, args...) }

// OFTarget is a bridge's OpenFlow management socket next to the OVSDB socket ovsdb.
func OFTarget(ovsdb, bridge string) string {
	return "unix:" + filepath.Join(filepath.Dir(strings.TrimPrefix(ovsdb, "unix:")), bridge+".mgmt")
}

// NewBridge creates a bridge named prefix<N> on Datapath for one test, proves
// a kernel datapath bridge is on the kernel's datapath, and removes it afterwards.
func NewBridge(t testing.TB, prefix string) string {
	t.Helper()
	br := Uniq(prefix)
	Vsctl(t, "add-br", br, "--", "set", "bridge", br, "datapath_type="+Datapath)
	t.Cleanup(func() { DelBridge(br) })
	if !Userspace() {
		// Its internal port is a port of a datapath of the openvswitch module.
		if out, err := Run("ovs-dpctl", "show"); err != nil || !strings.Contains(out, ": "+br+" (internal)") {
			t.Fatalf("bridge %s is not on the kernel datapath: %v\n%s", br, err, out)
		}
	}
	return br
}

// PrepareBridge leaves bridge as deploy/node-prep.sh leaves a node's:
// fail_mode=secure, tagged as the suite's, with the suite's base flows
// (ovs-portmap reconcile).
func PrepareBridge(t testing.TB, bridge string) {
	t.Helper()
	Vsctl(t, "set", "bridge", bridge, "fail_mode=secure", "external_ids:"+ovsdb.KeyOwner+"="+ovsdb.OwnerValue)
	if out, err := Run(filepath.Join(Env.BinDir, "ovs-portmap"), "reconcile", "-ovsdb", Env.OVSDB); err != nil {
		t.Fatalf("reconcile (the base flows): %v: %s", err, out)
	}
}

// FreezeVswitchd stops the sandbox's ovs-vswitchd with SIGSTOP, as a node
// too busy to run it: its sockets still take connections, and nothing is
// answered (OpenFlow, its control socket, the configurations OVSDB asks it
// to apply) until thaw (SIGCONT), which is also a cleanup of t and harmless
// twice. It returns once the process is stopped.
func FreezeVswitchd(t testing.TB) (thaw func()) {
	t.Helper()
	pidFile := filepath.Join(filepath.Dir(strings.TrimPrefix(Env.OVSDB, "unix:")), "ovs-vswitchd.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", pidFile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping ovs-vswitchd %d: %v", pid, err)
	}
	var once sync.Once
	thaw = func() { once.Do(func() { syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(thaw)
	stopped := func() bool {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// The state follows the command's closing parenthesis.
		i := strings.LastIndexByte(string(st), ')')
		return err == nil && i >= 0 && strings.HasPrefix(string(st[i+1:]), " T")
	}
	if !Until(5*time.Second, stopped) {
		thaw()
		t.Fatalf("ovs-vswitchd %d not stopped %v after SIGSTOP", pid, Scaled(5*time.Second))
	}
	return thaw
}

// DelBridge removes a bridge of the sandbox, and its netdev tap.
func DelBridge(br string) {
	Run("ovs-vsctl", "--db="+Env.OVSDB, "--if-exists", "del-br", br)
	if Userspace() {
		// The netdev datapath's kernel tap can outlive the bridge; a kernel
		// datapath's internal port goes with it.
		Run("ip", "link", "del", br)
	}
}

// OVSHost is the node of docs/design.md on one bridge: WireOVSHost's
// addresses and uplink, with Outside the netns beyond the uplink.
type OVSHost struct {
	Bridge  string
	Outside *Container
}

// NewOVSHost builds an OVSHost on a new bridge; a failed test logs its interfaces and flows.
func NewOVSHost(t testing.TB) *OVSHost {
	t.Helper()
	h := &OVSHost{Bridge: NewBridge(t, "ovsbr"), Outside: NewContainer(t)}
	t.Cleanup(func() { LogOnFailure(t, h.Bridge) })
	WireOVSHost(t, h.Bridge, h.Outside.Name, "upl")
	return h
}

// LogOnFailure writes the sandbox's interfaces and the bridge's flows to a
// file when t failed, and logs its name in one line: a failure's own
// messages stay the last lines of the test's output, where a CI log that
// keeps only its tail shows them.
func LogOnFailure(t testing.TB, bridge string) {
	if !t.Failed() {
		return
	}
	ports, _ := Run("ovs-vsctl", "--db="+Env.OVSDB, "--columns=name,ofport,external_ids", "list", "Interface")
	fl, _ := Run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", OFTarget(Env.OVSDB, bridge))
	f, err := os.CreateTemp("", "ovsflow-"+strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())+"-*.txt")
	if err == nil {
		_, err = fmt.Fprintf(f, "interfaces:\n%s\nflows on %s:\n%s", ports, bridge, fl)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Logf("interfaces:\n%s\nflows on %s:\n%s", ports, bridge, fl)
		return
	}
	t.Logf("the sandbox's interfaces and %s's flows at the failure: %s", bridge, f.Name())
}

// OFTarget is the host bridge's OpenFlow management socket.
func (h *OVSHost) OFTarget() string { return OFTarget(Env.OVSDB, h.Bridge) }

// FlowsOf dumps the host bridge's flows with cookie c.
func (h *OVSHost) FlowsOf(t testing.TB, c flows.Cookie) []string {
	t.Helper()
	return FlowsOf(t, h.OFTarget(), c)
}

// FlowsOf dumps the flows with cookie c at the OpenFlow target of.
func FlowsOf(t testing.TB, of string, c flows.Cookie) []string {
	t.Helper()
	return FlowsMatching(t, of, c.Delete().String())
}

// FlowsMatching dumps the flows at the OpenFlow target of that match spec
// (ovs-ofctl's flow syntax, a cookie/mask for one).
func FlowsMatching(t testing.TB, of, spec string) []string {
	t.Helper()
	out, err := Run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows", of, spec)
	if err != nil {
		t.Fatal(err)
	}
	var fl []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "cookie=") {
			fl = append(fl, strings.TrimSpace(l))
		}
	}
	return fl
}

// DumpAll returns all the host bridge's flows, for a failure message.
func (h *OVSHost) DumpAll() string {
	out, _ := Run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", h.OFTarget())
	return out
}

// PortsOf lists the names of the ports whose external_ids hold key=value.
func PortsOf(t testing.TB, key, value string) []string {
	t.Helper()
	out := Vsctl(t, "--no-headings", "-f", "csv", "--columns=name", "find", "Port", "external_ids:"+key+"="+value)
	if out == "" {
		return nil
	}
	return strings.Fields(out)
}

// OurPorts lists the ports (name and external_ids) tagged with the plugins' owner key, on any bridge.
func OurPorts(t testing.TB) []string {
	t.Helper()
	out := Vsctl(t, "--no-headings", "-f", "csv", "--columns=name,external_ids", "find", "Port", "external_ids:ovsflow.io/owner=ovsflow-cni")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// OurVeths lists the node's veths named like ovs-bridge names them.
func OurVeths(t testing.TB) []string {
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
