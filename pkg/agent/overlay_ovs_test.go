package agent

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/internal/ovstest"
	"github.com/ovsflow/ovs-cni/pkg/overlay"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
	"github.com/ovsflow/ovs-cni/test/framework"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ovstest.Stop()
	os.Exit(code)
}

// TestSyncOverlay: the agent's pass from the Node objects, on a node whose
// InternalIP is on a bridge of a private Open vSwitch. A Node on another
// subnet: its range goes through the tunnel (port, route, MTU), and the
// pass after writes the conflist with the tunnel's MTU; the Node deleted:
// the tunnel and the route go, and the conflist's MTU with them.
func TestSyncOverlay(t *testing.T) {
	sb := ovstest.Require(t, "ovsflow-agent", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl")
	vsctl := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ovs-vsctl", append([]string{"--db=" + sb.DB, "--timeout=10"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ovs-vsctl %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	const br = "agtbr"
	vsctl("add-br", br, "--", "set", "bridge", br, "datapath_type=netdev")
	t.Cleanup(func() { exec.Command("ovs-vsctl", "--db="+sb.DB, "--if-exists", "del-br", br).Run() })

	// The rest runs in the sandbox's netns, where the bridge interface is.
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	there, err := netns.GetFromName(sb.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	if err := netns.Set(there); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Set(orig); there.Close(); orig.Close(); runtime.UnlockOSThread() })
	var l netlink.Link
	if !framework.Until(10*time.Second, func() bool { l, err = netlink.LinkByName(br); return err == nil }) {
		t.Fatalf("no interface %s: %v", br, err)
	}
	ad, _ := netlink.ParseAddr("192.0.2.2/24")
	ad.Flags = 0x80 // IFA_F_NODAD
	if err := netlink.AddrAdd(l, ad); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}

	// The underlay: node b behind a router of the bridge's subnet, whose
	// neighbour the kernel knows.
	routerMAC, _ := net.ParseMAC("02:00:00:00:fe:01")
	if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.ParseIP("192.0.2.254"), HardwareAddr: routerMAC}); err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.IP{203, 0, 113, 0}, Mask: net.CIDRMask(24, 32)},
		Gw: net.ParseIP("192.0.2.254")}); err != nil {
		t.Fatal(err)
	}

	a, store, _, log := testAgent(t, goodTemplate)
	a.cfg.OVSDB = endpoint.MustParse(sb.DB)
	store.Add(kubeNode("a", 0, []string{"198.18.1.0/24"}, "192.0.2.2"))
	store.Add(kubeNode("b", 1, []string{"198.18.2.0/24"}, "203.0.113.2"))
	conflist := filepath.Join(a.cfg.CNIConfDir, filepath.Base(a.cfg.ConfTemplate))
	tunnels := func() string {
		return vsctl("--bare", "--columns=name", "find", "Interface", "external_ids:"+ovsdb.KeyOwner+"="+ovsdb.OwnerAgentValue)
	}

	a.syncOnce(false)
	if got, want := ours(t), []string{"198.18.2.0/24 via " + overlay.NextHop4.String() + " mtu 1450"}; !slices.Equal(got, want) {
		t.Errorf("routes: got %q, want %q", got, want)
	}
	if got := tunnels(); got != overlay.PortName {
		t.Errorf("tunnel ports: got %q, want %s", got, overlay.PortName)
	}
	if got := vsctl("get", "Interface", overlay.PortName, "type"); got != "geneve" {
		t.Errorf("tunnel type %q, want geneve", got)
	}
	// The userspace datapath's tunnels find the router in their own
	// neighbour cache before any packet needs it.
	sock, err := unixctl.Find(a.cfg.OVSDB, "")
	if err != nil {
		t.Fatal(err)
	}
	if cached, err := unixctl.TunnelNeighbours(t.Context(), sock); err != nil || !cached[netip.MustParseAddr("192.0.2.254")] {
		t.Errorf("the tunnels' neighbour cache %v (%v): want the router 192.0.2.254; agent log:\n%s", cached, err, log)
	}
	select {
	case <-a.kick:
	default:
		t.Error("no pass asked for after the MTU changed")
	}
	a.syncOnce(false)
	if b, err := os.ReadFile(conflist); err != nil || !strings.Contains(string(b), `"mtu": 1450`) {
		t.Errorf("conflist after the tunnel: %v\n%s\nwant mtu 1450", err, b)
	}

	// The bridge gets an uplink (1500) and a pod's port of ours at the
	// tunnel's MTU; Open vSwitch gives the bridge interface the smallest
	// port's MTU: the tunnel's MTU still follows the uplink's, pass after
	// pass.
	for _, v := range []struct {
		name string
		mtu  int
		ids  []string
	}{{"upl0", 1500, nil}, {"pod0", 1450, []string{"--", "set", "Port", "pod0", "external_ids:" + ovsdb.KeyOwner + "=" + ovsdb.OwnerValue}}} {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = v.name, v.mtu
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: v.name + "p"}); err != nil {
			t.Fatal(err)
		}
		vsctl(append([]string{"add-port", br, v.name}, v.ids...)...)
	}
	if err := netlink.LinkSetMTU(l, 1450); err != nil {
		t.Fatal(err)
	}
	if !framework.Until(10*time.Second, func() bool { return vsctl("get", "Interface", "upl0", "mtu") == "1500" }) {
		t.Fatalf("uplink upl0's MTU in OVSDB: %s", vsctl("get", "Interface", "upl0", "mtu"))
	}
	for range 2 {
		a.syncOnce(false)
	}
	if got, want := ours(t), []string{"198.18.2.0/24 via " + overlay.NextHop4.String() + " mtu 1450"}; !slices.Equal(got, want) {
		t.Errorf("routes with the bridge interface at 1450: got %q, want %q", got, want)
	}
	if b, err := os.ReadFile(conflist); err != nil || !strings.Contains(string(b), `"mtu": 1450`) {
		t.Errorf("conflist with the bridge interface at 1450: %v\n%s\nwant mtu 1450 (the uplink's less the tunnel's)", err, b)
	}

	store.Delete(kubeNode("b", 1, nil))
	a.syncOnce(false)
	if got := ours(t); len(got) != 0 {
		t.Errorf("routes after node b went: %q", got)
	}
	if got := tunnels(); got != "" {
		t.Errorf("tunnel ports after node b went: %q", got)
	}
	a.syncOnce(false)
	if b, err := os.ReadFile(conflist); err != nil || strings.Contains(string(b), `"mtu"`) {
		t.Errorf("conflist without a tunnel: %v\n%s\nwant no mtu", err, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, a.cfg.OVSDB)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if ts, err := cli.Tunnels(ctx); err != nil || len(ts) != 0 {
		t.Errorf("Tunnels after node b went: %v, %v", ts, err)
	}
}
