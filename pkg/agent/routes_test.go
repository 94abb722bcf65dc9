package agent

import (
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ovsflow/ovs-cni/pkg/podroutes"
)

// inNetns runs the rest of the test in a new network namespace on a locked
// thread, with link up0 holding the node addresses addrs.
func inNetns(t *testing.T, addrs ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("*** not root: the agent's route sync NOT tested ***")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Set(orig); ns.Close(); orig.Close(); runtime.UnlockOSThread() })
	la := netlink.NewLinkAttrs()
	la.Name = "up0"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "up1"}); err != nil {
		t.Fatal(err)
	}
	l, _ := netlink.LinkByName("up0")
	netlink.LinkSetUp(l)
	if p, err := netlink.LinkByName("up1"); err == nil {
		netlink.LinkSetUp(p)
	}
	for _, a := range addrs {
		ad, _ := netlink.ParseAddr(a)
		ad.Flags = 0x80 // IFA_F_NODAD
		if err := netlink.AddrAdd(l, ad); err != nil {
			t.Fatal(err)
		}
	}
}

func kubeNode(name string, created int, cidrs []string, ips ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		CreationTimestamp: metav1.NewTime(time.Date(2024, 1, 1, 0, created, 0, 0, time.UTC))},
		Spec: corev1.NodeSpec{PodCIDRs: cidrs}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return n
}

type routeEvents struct {
	mu        sync.Mutex
	routed    int
	notRouted map[string]int
}

func (e *routeEvents) ReconcileDone(time.Duration, error) {}
func (e *routeEvents) VswitchdRestart()                   {}
func (e *routeEvents) OrphanDeleted(error)                {}
func (e *routeEvents) OrphanPluginFailed(string)          {}
func (e *routeEvents) VswitchdUpcalls(error)              {}
func (e *routeEvents) RoutesPlanned(routed int, notRouted map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.routed, e.notRouted = routed, notRouted
}

// testAgent is an agent for node "a" whose Node list is store, its plugins
// from an empty directory (none can be copied), its template tmpl.
func testAgent(t *testing.T, tmpl string) (*Agent, cache.Indexer, *routeEvents, *strings.Builder) {
	t.Helper()
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	dir := t.TempDir()
	tp := filepath.Join(dir, "10-x.conflist")
	if err := os.WriteFile(tp, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	ev := &routeEvents{}
	log := &strings.Builder{}
	cfg := Config{NodeName: "a", PluginSrc: filepath.Join(dir, "image"), CNIBinDir: filepath.Join(dir, "bin"),
		Plugins: []string{"ovs-bridge"}, ConfTemplate: tp, CNIConfDir: filepath.Join(dir, "net.d"),
		Routes: true, Events: ev, Log: log}
	cfg.Defaults()
	a := &Agent{cfg: cfg, st: newStatus(), nodes: listersv1.NewNodeLister(store), kick: make(chan struct{}, 1),
		lastLog: map[string]string{}}
	return a, store, ev, log
}

const goodTemplate = `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"ovs-bridge","ipam":{"type":"host-local","routes":[{"dst":"0.0.0.0/0"}]}}]}`

func ours(t *testing.T) []string {
	t.Helper()
	have, err := podroutes.Table{Protocol: podroutes.DefaultProtocol}.List()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range have {
		out = append(out, h.Route.String())
	}
	slices.Sort(out)
	return out
}

// TestSyncRoutesWithoutPlugins: the plugins cannot be copied (a directory
// without them), and the routes to the other nodes still follow the Nodes;
// /readyz names the plugins.
func TestSyncRoutesWithoutPlugins(t *testing.T) {
	inNetns(t, "203.0.113.1/24")
	a, store, _, _ := testAgent(t, goodTemplate)
	store.Add(kubeNode("a", 0, []string{"198.51.100.0/26"}, "203.0.113.1"))
	store.Add(kubeNode("b", 1, []string{"192.0.2.0/26"}, "203.0.113.2"))
	a.syncOnce(true)
	if got, want := ours(t), []string{"192.0.2.0/26 via 203.0.113.2"}; !slices.Equal(got, want) {
		t.Errorf("routes with the plugins missing: got %q, want %q", got, want)
	}
	store.Add(kubeNode("c", 2, []string{"192.0.2.64/26"}, "203.0.113.3"))
	store.Delete(kubeNode("b", 1, nil))
	a.syncOnce(false)
	if got, want := ours(t), []string{"192.0.2.64/26 via 203.0.113.3"}; !slices.Equal(got, want) {
		t.Errorf("routes after a Node came and one went, plugins missing: got %q, want %q", got, want)
	}
	a.st.mu.Lock()
	plugins, routes := a.st.plugins, a.st.routes
	a.st.mu.Unlock()
	if !strings.Contains(plugins, "plugin ovs-bridge") || routes != "" {
		t.Errorf("status: plugins %q, routes %q; want the plugins' error, routes ok", plugins, routes)
	}
}

// TestSyncRoutesWithoutSelf: this node's Node gone, or without an
// InternalIP yet: the routes stay as they were and /readyz says why.
func TestSyncRoutesWithoutSelf(t *testing.T) {
	inNetns(t, "203.0.113.1/24")
	a, store, _, _ := testAgent(t, goodTemplate)
	a.cfg.PluginSrc = ""
	store.Add(kubeNode("a", 0, []string{"198.51.100.0/26"}, "203.0.113.1"))
	store.Add(kubeNode("b", 1, []string{"192.0.2.0/26"}, "203.0.113.2"))
	a.syncOnce(true)
	want := []string{"192.0.2.0/26 via 203.0.113.2"}
	if got := ours(t); !slices.Equal(got, want) {
		t.Fatalf("routes: got %q, want %q", got, want)
	}
	for _, tc := range []struct {
		name   string
		change func()
		why    string
	}{
		{"no InternalIP yet", func() { store.Update(kubeNode("a", 0, []string{"198.51.100.0/26"})) }, "node a has no InternalIP (yet)"},
		{"no Node", func() { store.Delete(kubeNode("a", 0, nil)) }, `no Node "a"`},
	} {
		tc.change()
		a.syncOnce(false)
		if got := ours(t); !slices.Equal(got, want) {
			t.Errorf("%s: routes %q, want %q kept", tc.name, got, want)
		}
		a.st.mu.Lock()
		routes := a.st.routes
		a.st.mu.Unlock()
		if !strings.Contains(routes, tc.why) {
			t.Errorf("%s: routes status %q, want it to say %q", tc.name, routes, tc.why)
		}
	}
	store.Add(kubeNode("a", 0, []string{"198.51.100.0/26"}, "203.0.113.1"))
	store.Delete(kubeNode("b", 1, nil))
	a.syncOnce(false)
	if got := ours(t); len(got) != 0 {
		t.Errorf("with this node's facts back and b gone: routes %q, want none", got)
	}
}

// TestSyncRoutesClaims: Node objects that claim a peer's range (newer),
// a range inside the node subnet, a /32 of the API server, a range that
// holds another node's address: none of theirs is installed, no real
// peer's route is lost, and the metrics count them.
func TestSyncRoutesClaims(t *testing.T) {
	inNetns(t, "203.0.113.1/24", "2001:db8:f::1/64")
	a, store, ev, log := testAgent(t, goodTemplate)
	a.cfg.PluginSrc = ""
	a.apiServer = []netip.Prefix{netip.MustParsePrefix("198.18.0.1/32")}
	store.Add(kubeNode("a", 0, []string{"198.51.100.0/26", "2001:db8:1::/64"}, "203.0.113.1", "2001:db8:f::1"))
	store.Add(kubeNode("b", 1, []string{"192.0.2.0/26", "2001:db8:2::/64"}, "203.0.113.2", "2001:db8:f::2"))
	store.Add(kubeNode("c", 2, []string{"192.0.2.64/26"}, "203.0.113.3"))
	store.Add(kubeNode("x-overlap", 3, []string{"192.0.2.0/27", "2001:db8:2::/48"}, "203.0.113.66", "2001:db8:f::66"))
	store.Add(kubeNode("x-subnet", 0, []string{"203.0.113.128/25"}, "203.0.113.67"))
	store.Add(kubeNode("x-apiserver", 0, []string{"198.18.0.1/32"}, "203.0.113.68"))
	store.Add(kubeNode("x-nodeaddr", 0, []string{"203.0.113.3/32"}, "203.0.113.69"))
	a.syncOnce(true)
	want := []string{"192.0.2.0/26 via 203.0.113.2", "192.0.2.64/26 via 203.0.113.3", "2001:db8:2::/64 via 2001:db8:f::2"}
	if got := ours(t); !slices.Equal(got, want) {
		t.Errorf("routes: got %q, want %q", got, want)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if ev.routed != 3 || ev.notRouted[podroutes.SkipConflict] != 2 || ev.notRouted[podroutes.SkipLocal] != 3 {
		t.Errorf("events: routed %d, not routed %v; want 3, 2 conflicts, 3 local", ev.routed, ev.notRouted)
	}
	for _, s := range []string{"node x-overlap: 192.0.2.0/27: overlaps 192.0.2.0/26 of node b, an older Node",
		"node x-subnet: 203.0.113.128/25: overlaps 203.0.113.0/24, a network of this node",
		"node x-apiserver: 198.18.0.1/32: overlaps 198.18.0.1/32, a network of this node"} {
		if !strings.Contains(log.String(), s) {
			t.Errorf("the log does not say %q:\n%s", s, log)
		}
	}
}

// TestSyncConflistBadRoutes: a template whose routes entry is not an
// object: the agent says so, names the field, and goes on (its routes too).
func TestSyncConflistBadRoutes(t *testing.T) {
	inNetns(t, "203.0.113.1/24")
	a, store, _, log := testAgent(t, `{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"ovs-bridge","ipam":{"type":"host-local","routes":["0.0.0.0/0"]}}]}`)
	a.cfg.PluginSrc = ""
	store.Add(kubeNode("a", 0, []string{"198.51.100.0/26"}, "203.0.113.1"))
	store.Add(kubeNode("b", 1, []string{"192.0.2.0/26"}, "203.0.113.2"))
	a.syncOnce(true)
	a.st.mu.Lock()
	conf := a.st.conflist
	a.st.mu.Unlock()
	const why = `plugins[0].ipam.routes[0]: "0.0.0.0/0" is not an object`
	if !strings.Contains(conf, why) || !strings.Contains(log.String(), why) {
		t.Errorf("conflist status %q, log %q; want both to say %q", conf, log, why)
	}
	if got, want := ours(t), []string{"192.0.2.0/26 via 203.0.113.2"}; !slices.Equal(got, want) {
		t.Errorf("routes: got %q, want %q", got, want)
	}
}

// TestHostOnlyRoutes: the agent of a host that is not a Node routes every
// Node's pod ranges from the addresses of its default routes' link, but a
// Node that claims this host's address as its own; it writes no conflist,
// /readyz reads its routes only, and Uninstall without OVS removes them.
func TestHostOnlyRoutes(t *testing.T) {
	inNetns(t, "203.0.113.100/24", "2001:db8:f::100/64")
	up0, err := netlink.LinkByName("up0")
	if err != nil {
		t.Fatal(err)
	}
	for _, gw := range []string{"203.0.113.254", "2001:db8:f::fe"} {
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up0.Attrs().Index, Gw: netip.MustParseAddr(gw).AsSlice()}); err != nil {
			t.Fatalf("default route via %s: %v", gw, err)
		}
	}
	a, store, _, _ := testAgent(t, goodTemplate)
	a.cfg.HostOnly, a.cfg.NodeName = true, ""
	store.Add(kubeNode("a", 0, []string{"198.51.100.0/26", "2001:db8:1::/64"}, "203.0.113.1", "2001:db8:f::1"))
	store.Add(kubeNode("b", 1, []string{"192.0.2.0/26", "2001:db8:2::/64"}, "203.0.113.2", "2001:db8:f::2"))
	store.Add(kubeNode("x-host", 2, []string{"192.0.2.128/26"}, "203.0.113.100"))
	a.syncOnce(true)
	want := []string{"192.0.2.0/26 via 203.0.113.2", "198.51.100.0/26 via 203.0.113.1",
		"2001:db8:1::/64 via 2001:db8:f::1", "2001:db8:2::/64 via 2001:db8:f::2"}
	if got := ours(t); !slices.Equal(got, want) {
		t.Errorf("routes: got %q, want %q", got, want)
	}
	if _, err := os.Stat(a.cfg.CNIConfDir); !os.IsNotExist(err) {
		t.Errorf("CNI conf dir %s: %v, want none written", a.cfg.CNIConfDir, err)
	}
	checks := a.readiness(t.Context())
	if len(checks) != 1 || checks[0] != (check{name: "routes"}) {
		t.Errorf("readiness: got %v, want the routes only, ok", checks)
	}

	store.Delete(kubeNode("a", 0, nil))
	a.syncOnce(false)
	if got, want := ours(t), []string{want[0], want[3]}; !slices.Equal(got, want) {
		t.Errorf("routes after Node a went: got %q, want %q", got, want)
	}

	cfg := Config{HostOnly: true, Routes: true, Log: &strings.Builder{}}
	if err := Uninstall(t.Context(), cfg); err != nil {
		t.Errorf("uninstall without OVS: %v", err)
	}
	if got := ours(t); len(got) != 0 {
		t.Errorf("routes after uninstall: got %q, want none", got)
	}
}

// TestHostOnlyRoutesTwoNetworks: a host on two of the Nodes' networks (a
// control-plane host on each subnet) routes each Node's pod ranges on the
// link of the network that holds the Node's address.
func TestHostOnlyRoutesTwoNetworks(t *testing.T) {
	inNetns(t, "203.0.113.100/24")
	up0, err := netlink.LinkByName("up0")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: up0.Attrs().Index, Gw: netip.MustParseAddr("203.0.113.254").AsSlice()}); err != nil {
		t.Fatal(err)
	}
	la := netlink.NewLinkAttrs()
	la.Name = "net2"
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "net2p"}); err != nil {
		t.Fatal(err)
	}
	net2, _ := netlink.LinkByName("net2")
	netlink.LinkSetUp(net2)
	if p, err := netlink.LinkByName("net2p"); err == nil {
		netlink.LinkSetUp(p)
	}
	ad, _ := netlink.ParseAddr("198.18.0.100/24")
	if err := netlink.AddrAdd(net2, ad); err != nil {
		t.Fatal(err)
	}
	a, store, _, _ := testAgent(t, goodTemplate)
	a.cfg.HostOnly, a.cfg.NodeName = true, ""
	store.Add(kubeNode("a", 0, []string{"198.51.100.0/26"}, "203.0.113.1"))
	store.Add(kubeNode("c", 1, []string{"192.0.2.0/26"}, "198.18.0.3"))
	store.Add(kubeNode("far", 2, []string{"192.0.2.64/26"}, "192.0.2.200"))
	a.syncOnce(true)
	have, err := podroutes.Table{Protocol: podroutes.DefaultProtocol}.List()
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]int{}
	for _, h := range have {
		links[h.Route.String()] = h.LinkIndex
	}
	want := map[string]int{"198.51.100.0/26 via 203.0.113.1": up0.Attrs().Index, "192.0.2.0/26 via 198.18.0.3": net2.Attrs().Index,
		"192.0.2.64/26 via 192.0.2.200": up0.Attrs().Index} // on no network of the host: the default route's link, as before
	if !maps.Equal(links, want) {
		t.Errorf("routes and their links: got %v, want %v", links, want)
	}
}

// TestRoutesModeFlags: the routes mode takes this host's addresses and
// none of the flags of a node's agent.
func TestRoutesModeFlags(t *testing.T) {
	mode, cfg, err := ParseArgs([]string{"routes", "-kubeconfig", "/k", "-host-addrs", "192.0.2.1, 2001:db8::1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if mode != "routes" || !cfg.HostOnly || !cfg.Routes || cfg.Kubeconfig != "/k" || cfg.PluginSrc != "" || !cfg.OVSDB.IsZero() ||
		!slices.Equal(cfg.HostAddrs, []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}) {
		t.Errorf("got mode %q, config %+v; want routes, host only, the two addresses, no plugins, no OVSDB", mode, cfg)
	}
	if err := cfg.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	for _, args := range [][]string{{"routes", "-node-name", "n1"}, {"routes", "-host-addrs", "n1"}} {
		if _, _, err := ParseArgs(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
