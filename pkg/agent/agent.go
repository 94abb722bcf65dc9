// Package agent is the node agent of a Kubernetes cluster (cmd/ovsflow-agent,
// run by the DaemonSet of deploy/ovsflow-cni.yaml). From the Node objects,
// read with client-go informers, it keeps:
//
//   - the plugins in the node's CNI bin dir and the node's conflist in its
//     CNI conf dir: the template with one range per pod CIDR of this node's
//     own Node (spec.podCIDRs, pkg/conflist), written atomically;
//   - a route to every other Node's pod ranges via that node's InternalIP of
//     the same family (pkg/podroutes: host-gw, the nodes share an L2 segment),
//     or, for a Node on another subnet, through the bridge's tunnel port to
//     that InternalIP (pkg/overlay, Config.Overlay);
//   - the flows of the node, rebuilt from OVSDB whenever ovs-vswitchd
//     (re)starts (pkg/reconcile, what `ovs-portmap reconcile -watch` does);
//   - no orphaned attachment: one whose host veth and netns are gone with
//     its sandbox while the runtime never ran its DEL gets that DEL, from the node's
//     conflist (pkg/orphan; a runtime without CNI GC loses such a DEL);
//
// and serves /healthz and /readyz for the pod's probes (and /metrics when
// given a handler). Uninstall removes what the suite put on the node.
//
// On a host that is not a Node (a control-plane host: kube-apiserver dials
// pods for its proxy, admission webhooks and aggregated APIs), the agent
// keeps only the routes (Config.HostOnly, `ovsflow-agent routes`): the same
// routes to every Node's pod ranges, from this host's own addresses.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	informersv1 "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/memo"
	"github.com/ovsflow/ovs-cni/pkg/noderanges"
	"github.com/ovsflow/ovs-cni/pkg/orphan"
	"github.com/ovsflow/ovs-cni/pkg/overlay"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/podroutes"
	"github.com/ovsflow/ovs-cni/pkg/reconcile"
)

// Config is what the agent does; zero values take the defaults of
// cmd/ovsflow-agent's flags (Defaults).
type Config struct {
	NodeName   string // this node's Node object
	Kubeconfig string // "": the pod's ServiceAccount (in-cluster)

	// PluginSrc holds the plugins to install into CNIBinDir ("": none).
	PluginSrc, CNIBinDir string
	Plugins              []string // always installed
	OptionalPlugins      []string // installed only where the node has none of that name

	// ConfTemplate is the conflist template (the ConfigMap's key), rendered
	// into CNIConfDir under its own base name.
	ConfTemplate, CNIConfDir string

	// OVSDB is the node's OVSDB; none (zero) runs no reconcile (and
	// /readyz checks no OVSDB). VswitchdControl is ovs-vswitchd's control
	// socket, when ADD recorded none.
	OVSDB           endpoint.Endpoint
	VswitchdControl string

	// Routes: keep the routes to the other nodes' pod ranges, in RouteTable
	// (0: main) with protocol RouteProtocol.
	Routes        bool
	RouteTable    int
	RouteProtocol int
	// Overlay is how the routes reach the Nodes on other subnets
	// (pkg/overlay; "": overlay.Hybrid). It needs OVSDB: without it every
	// Node is reached by host-gw.
	Overlay overlay.Mode
	// Underlay is the address family the tunnel runs over ("":
	// overlay.Auto, IPv4 where the node has it).
	Underlay overlay.Underlay

	// HostOnly: the agent of a host that is not a Node (a control-plane
	// host). It keeps only the routes, to every Node's pod ranges, from
	// this host with addresses HostAddrs (none: podroutes.HostAddrs, read
	// on each pass) and no pod range of its own. NodeName, the plugins,
	// the conflist and OVSDB are not used.
	HostOnly  bool
	HostAddrs []netip.Addr

	// HealthAddr serves /healthz, /readyz and, when Metrics is set,
	// /metrics ("": no server).
	HealthAddr string
	Metrics    http.Handler
	// Events, when set, hears of each reconcile pass and of each
	// ovs-vswitchd restart the watch sees (the metrics' counters).
	Events Events

	// OrphanInterval is the orphan sweep's interval (pkg/orphan): an
	// attachment seen orphaned by two of its passes this far apart gets
	// its DEL (0: orphan.DefaultInterval; < 0: no sweep). It needs OVSDB
	// and CNIBinDir.
	OrphanInterval time.Duration

	Resync      time.Duration // a full pass at least this often (a wiped file is repaired)
	WedgedAfter time.Duration // /healthz fails when a loop is busy for longer
	Log         io.Writer
}

// Events are what the agent reports to the metrics.
type Events interface {
	ReconcileDone(took time.Duration, err error)
	VswitchdRestart()
	OrphanDeleted(err error)
	// OrphanPluginFailed: the DEL of a plugin of the chain that is not
	// ours failed in a replayed DEL (ours went on).
	OrphanPluginFailed(plugin string)
	// VswitchdUpcalls: what the reconcile watch last learnt of
	// ovs-vswitchd's upcall handlers (reconcile.Hooks.Upcalls).
	VswitchdUpcalls(err error)
	// RoutesPlanned: the pod ranges of other nodes routed by the last
	// route sync, and those not routed by why (podroutes.Skip*, or
	// "foreign": a route of another protocol has the destination).
	RoutesPlanned(routed int, notRouted map[string]int)
}

// Defaults fills in the zero fields.
func (c *Config) Defaults() {
	if c.RouteProtocol == 0 {
		c.RouteProtocol = podroutes.DefaultProtocol
	}
	if c.Overlay == "" {
		c.Overlay = overlay.Hybrid
	}
	if c.Underlay == "" {
		c.Underlay = overlay.Auto
	}
	if c.Resync == 0 {
		c.Resync = 30 * time.Second
	}
	if c.OrphanInterval == 0 {
		c.OrphanInterval = orphan.DefaultInterval
	}
	if c.WedgedAfter == 0 {
		c.WedgedAfter = 2 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

func (c *Config) validate() error {
	if c.RouteProtocol < 1 || c.RouteProtocol > 255 {
		return fmt.Errorf("route protocol %d: want 1-255", c.RouteProtocol)
	}
	if _, err := overlay.ParseMode(string(c.Overlay)); err != nil {
		return err
	}
	if _, err := overlay.ParseUnderlay(string(c.Underlay)); err != nil {
		return err
	}
	if c.HostOnly {
		if !c.Routes {
			return errors.New("a host that is not a Node keeps the routes, or nothing")
		}
		return nil
	}
	if c.NodeName == "" {
		return errors.New("no node name (-node-name, or NODE_NAME from the downward API)")
	}
	if c.ConfTemplate == "" || c.CNIConfDir == "" {
		return errors.New("no conflist template or CNI conf dir")
	}
	if c.PluginSrc != "" && c.CNIBinDir == "" {
		return errors.New("plugins to install but no CNI bin dir")
	}
	return nil
}

// Agent is one running agent.
type Agent struct {
	cfg   Config
	st    *status
	nodes listersv1.NodeLister
	kick  chan struct{}
	// apiServer is the API server's address when the client's URL names
	// one: no peer's range may take it (podroutes.Plan's local networks).
	apiServer []netip.Prefix

	ovsChecks *memo.Value[[]check] // the probes' shared read of OVS

	// mtu is the pods' MTU the last route pass found (overlay.ConflistMTU;
	// 0: the template's), which the conflist follows.
	mtu atomic.Int64
	// tunnelled: a pass put the tunnel in (pkg/overlay); a pass that
	// cannot reach OVSDB then keeps the routes as they are.
	tunnelled atomic.Bool

	logMu   sync.Mutex
	lastLog map[string]string // what was last said on each subject
}

// Run runs the agent until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	cfg.Defaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	rc, err := restConfig(cfg.Kubeconfig)
	if err != nil {
		return err
	}
	rc.UserAgent = "ovsflow-agent/" + buildinfo.Version
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	a := newAgent(cfg)
	if u, err := url.Parse(rc.Host); err == nil {
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
			a.apiServer = append(a.apiServer, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	errc := make(chan error, 1)
	if cfg.HealthAddr != "" {
		srv := a.server()
		ln, err := net.Listen("tcp", cfg.HealthAddr)
		if err != nil {
			return fmt.Errorf("health address: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				select {
				case errc <- fmt.Errorf("health server: %w", err):
				default:
				}
				cancel()
			}
		}()
		go func() {
			<-ctx.Done()
			sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
			defer c()
			srv.Shutdown(sctx)
		}()
	}
	if !cfg.OVSDB.IsZero() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.reconcileLoop(ctx)
		}()
	}
	if !cfg.OVSDB.IsZero() && cfg.CNIBinDir != "" && cfg.OrphanInterval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.orphanSweeper().Run(ctx)
		}()
	}

	factory, inf := nodeInformer(cs, func(string) { a.trigger() })
	a.nodes = inf.Lister()
	factory.Start(ctx.Done())
	a.say("nodes", "waiting for the Node list of the API server")
	for !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() == nil {
		a.say("nodes", "Node list synced")
		a.syncLoop(ctx)
	}
	cancel()
	factory.Shutdown()
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// nodeInformer watches the Nodes: it keeps of each only what the agent
// reads (slimNode), and calls changed with a Node's name when the Node
// comes, goes or changes in that (not on a status heartbeat, which every
// Node of a cluster sends every few seconds).
func nodeInformer(cs kubernetes.Interface, changed func(node string)) (informers.SharedInformerFactory, informersv1.NodeInformer) {
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTransform(slimNode))
	inf := factory.Core().V1().Nodes()
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { changed(nodeName(o)) },
		UpdateFunc: func(o, n any) {
			if nodeChanged(o, n) {
				changed(nodeName(n))
			}
		},
		DeleteFunc: func(o any) { changed(nodeName(o)) },
	})
	return factory, inf
}

// slimNode is the informer's transform: of a Node it keeps its identity
// and what Peer and PodCIDRs read, and drops the rest (images, managed
// fields, conditions, labels...), most of a Node's size.
func slimNode(o any) (any, error) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return o, nil // a tombstone (cache.DeletedFinalStateUnknown)
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp},
		Spec:   corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status: corev1.NodeStatus{Addresses: n.Status.Addresses},
	}, nil
}

// nodeChanged says whether an update changed what slimNode keeps, bar the
// resource version.
func nodeChanged(o, n any) bool {
	x, ok1 := o.(*corev1.Node)
	y, ok2 := n.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return x.Name != y.Name || x.UID != y.UID || !x.CreationTimestamp.Equal(&y.CreationTimestamp) ||
		(x.DeletionTimestamp == nil) != (y.DeletionTimestamp == nil) ||
		x.Spec.PodCIDR != y.Spec.PodCIDR || !slices.Equal(x.Spec.PodCIDRs, y.Spec.PodCIDRs) ||
		!slices.Equal(x.Status.Addresses, y.Status.Addresses)
}

func nodeName(o any) string {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if n, ok := o.(*corev1.Node); ok {
		return n.Name
	}
	return ""
}

func newAgent(cfg Config) *Agent {
	a := &Agent{cfg: cfg, st: newStatus(), kick: make(chan struct{}, 1), lastLog: map[string]string{}}
	a.ovsChecks = memo.New(a.readOVS, ovsFresh, ovsTimeout)
	return a
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster API access (or give -kubeconfig): %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return c, nil
}

// trigger asks the sync loop for a pass (events coalesce).
func (a *Agent) trigger() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// say logs msg on subject when it differs from what was last said on it.
func (a *Agent) say(subject, msg string) {
	a.logMu.Lock()
	defer a.logMu.Unlock()
	if a.lastLog[subject] == msg {
		return
	}
	a.lastLog[subject] = msg
	fmt.Fprintf(a.cfg.Log, "%s %s: %s\n", time.Now().UTC().Format(time.RFC3339), subject, msg)
}

// syncLoop runs a pass on every Node event and a full one (the plugins
// too) at start and every Resync: the plugins change only with the image,
// and comparing them reads megabytes, which a Node's status update, in a
// cluster of many nodes, should not cost.
func (a *Agent) syncLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.Resync)
	defer t.Stop()
	full := true
	for {
		a.st.busy("sync")
		a.syncOnce(full)
		a.st.idle("sync")
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
			full = false
		case <-t.C:
			full = true
		}
	}
}

// syncOnce: the plugins (full), then the conflist (a runtime sees the
// network only once its plugins are there), then the routes, whatever
// became of the plugins and the conflist (the other nodes' pods are
// reached through this node's routes, CNI or not).
func (a *Agent) syncOnce(full bool) {
	if a.cfg.HostOnly {
		a.st.set(&a.st.routes, a.syncHostRoutes())
		return
	}
	if a.cfg.PluginSrc != "" && full {
		installed, err := installPlugins(a.cfg.PluginSrc, a.cfg.CNIBinDir, a.cfg.Plugins, a.cfg.OptionalPlugins)
		for _, p := range installed {
			fmt.Fprintf(a.cfg.Log, "%s plugins: installed %s\n", time.Now().UTC().Format(time.RFC3339), p)
		}
		a.st.set(&a.st.plugins, err)
		if err != nil {
			a.say("plugins", "error: "+err.Error())
		} else {
			a.say("plugins", "in place")
		}
	}
	self, err := a.nodes.Get(a.cfg.NodeName)
	if apierrors.IsNotFound(err) {
		err = fmt.Errorf("no Node %q", a.cfg.NodeName)
	}
	if err != nil {
		self = nil
	}
	a.st.mu.Lock()
	pluginsOK := a.st.plugins == ""
	a.st.mu.Unlock()
	if pluginsOK { // else no conflist for a network whose plugins are not there
		a.syncConflist(self, err)
	}
	if a.cfg.Routes {
		if self == nil {
			err = fmt.Errorf("%w: the routes are kept as they are", err)
			a.say("routes", "error: "+err.Error())
		} else {
			err = a.syncNodeRoutes(self)
		}
		a.st.set(&a.st.routes, err)
	} else {
		a.st.set(&a.st.routes, nil)
	}
}

// syncConflist renders the conflist for self's pod ranges (self is nil
// when err says why there is no Node).
func (a *Agent) syncConflist(self *corev1.Node, err error) {
	var own []netip.Prefix
	if err == nil {
		own = PodCIDRs(self)
		if len(own) == 0 {
			err = fmt.Errorf("node %s has no spec.podCIDRs (yet)", a.cfg.NodeName)
		}
	}
	confirm := confirmedRangesPath(a.cfg.ConfTemplate)
	if err != nil && confirm != "" {
		// No Node (deleted, not registered again yet) or none with pod
		// ranges: the conflist on disk may be the old Node's.
		if gone, rerr := noderanges.Remove(confirm); rerr != nil {
			err = errors.Join(err, rerr)
		} else if gone {
			a.logf("conflist: confirmation of the pod ranges withdrawn (%s): %v", confirm, err)
		}
	}
	if err == nil {
		if confirm != "" && !noderanges.Holds(confirm, own) {
			// The ranges change: the plugins serve none until the conflist
			// is the new one.
			_, err = noderanges.Remove(confirm)
		}
		var wrote bool
		if err == nil {
			mtu := int(a.mtu.Load())
			if wrote, err = installConflistMTU(a.cfg.ConfTemplate, a.cfg.CNIConfDir, filepath.Base(a.cfg.ConfTemplate), own, mtu); wrote {
				a.logf("conflist: installed %s for %v%s", filepath.Join(a.cfg.CNIConfDir, filepath.Base(a.cfg.ConfTemplate)), own, mtuNote(mtu))
			}
		}
		if err == nil && confirm != "" {
			if wrote, err = noderanges.Write(confirm, own); wrote {
				a.logf("conflist: pod ranges %v confirmed in %s", own, confirm)
			}
		}
	}
	a.st.set(&a.st.conflist, err)
	if err != nil {
		a.say("conflist", "error: "+err.Error())
	} else {
		a.say("conflist", fmt.Sprintf("in place for %v", own))
	}
}

// confirmedRangesPath is the file the conflist template's ovs-bridge names
// for the agent's confirmation of the pod ranges (package noderanges), ""
// when it names none (or the template cannot be read: installConflist says
// so).
func confirmedRangesPath(template string) string {
	b, err := os.ReadFile(template)
	if err != nil {
		return ""
	}
	return noderanges.ConfigPath(b)
}

// logf writes one line of the agent's log, stamped.
func (a *Agent) logf(format string, args ...any) {
	fmt.Fprintf(a.cfg.Log, "%s %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
}

// syncNodeRoutes: the routes of node self, from its InternalIPs and pod
// ranges, to the other Nodes' pod ranges.
func (a *Agent) syncNodeRoutes(self *corev1.Node) error {
	me := Peer(self)
	if len(me.Addrs) == 0 {
		err := fmt.Errorf("node %s has no InternalIP (yet): the routes are kept as they are", self.Name)
		a.say("routes", "error: "+err.Error())
		return err
	}
	me.PodCIDRs = PodCIDRs(self)
	return a.syncRoutes(me, self.Name)
}

// mtuNote says the conflist's MTU in its log line, when the agent sets one.
func mtuNote(mtu int) string {
	if mtu == 0 {
		return ""
	}
	return fmt.Sprintf(" (mtu %d: the overlay's)", mtu)
}

// syncHostRoutes: the routes of a host that is not a Node, from its own
// addresses (the flag's, else those of its default routes' links), to
// every Node's pod ranges.
func (a *Agent) syncHostRoutes() error {
	me := podroutes.Peer{Name: "this host", Addrs: a.cfg.HostAddrs}
	if name, err := os.Hostname(); err == nil {
		me.Name = name
	}
	if len(me.Addrs) == 0 {
		addrs, err := podroutes.HostAddrs()
		if err == nil && len(addrs) == 0 {
			err = errors.New("no global address on the link of a default route (give -host-addrs)")
		}
		if err != nil {
			err = fmt.Errorf("this host's addresses: %w: the routes are kept as they are", err)
			a.say("routes", "error: "+err.Error())
			return err
		}
		me.Addrs = addrs
	}
	return a.syncRoutes(me, "")
}

// syncRoutes makes the routes to the pod ranges of the Nodes but selfNode
// ("": every Node) what the Nodes say, within what this host's own facts
// (me) allow (podroutes.Plan). Without them (no address yet, its networks
// unreadable) it changes nothing: the routes of the last good pass are
// better than none.
func (a *Agent) syncRoutes(me podroutes.Peer, selfNode string) error {
	local, err := podroutes.Local()
	if err != nil {
		err = fmt.Errorf("this node's networks: %w: the routes are kept as they are", err)
		a.say("routes", "error: "+err.Error())
		return err
	}
	local = append(local, a.apiServer...)
	all, err := a.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	var peers []podroutes.Peer
	for _, n := range all {
		if n.Name != selfNode {
			peers = append(peers, Peer(n))
		}
	}
	want, skipped := podroutes.Plan(me, local, peers)
	notRouted := map[string]int{}
	seen := map[string]bool{}
	for _, s := range skipped {
		notRouted[s.Kind]++
		subject := "route " + s.Node + " " + s.Dst.String()
		seen[subject] = true
		a.say(subject, "not routed: "+s.String())
	}
	a.forget("route ", seen)
	// The next hops are on the segment of this node's own InternalIPs.
	links := map[bool]int{}
	var errs []error
	for _, ip := range me.Addrs {
		if _, ok := links[ip.Is4()]; ok {
			continue
		}
		idx, err := podroutes.LinkOf(ip)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		links[ip.Is4()] = idx
	}
	tb := podroutes.Table{Table: a.cfg.RouteTable, Protocol: a.cfg.RouteProtocol}
	var res podroutes.Result
	var installErr error
	installed := false
	install := func(routes []podroutes.Route) error {
		installed, want = true, routes
		res, installErr = tb.Sync(routes, links)
		return installErr
	}
	if selfNode == "" {
		// A host on several networks (a control-plane host on each of the
		// Nodes' subnets) reaches each Node on the network that holds it.
		for i, r := range want {
			if idx, err := podroutes.LinkOn(r.Via); err != nil {
				errs = append(errs, err)
			} else if idx != 0 {
				want[i].Link = idx
			}
		}
		install(want)
	} else if oerr := a.syncOverlay(me, want, peers, install); oerr != nil && !installed {
		return oerr // said: the routes are kept as they are
	} else if oerr != nil && oerr != installErr {
		errs = append(errs, oerr) // the tunnel's withdrawal, after the routes
	}
	err = installErr
	if res.Changed > 0 || res.Removed > 0 {
		fmt.Fprintf(a.cfg.Log, "%s routes: %d added or changed, %d removed; now %v\n", time.Now().UTC().Format(time.RFC3339), res.Changed, res.Removed, want)
	}
	for _, r := range res.Foreign {
		notRouted["foreign"]++
		a.say("route "+r.Node+" "+r.Dst.String(), "not routed: node "+r.Node+": "+r.Dst.String()+" has a route of another protocol (left to it)")
	}
	if a.cfg.Events != nil {
		a.cfg.Events.RoutesPlanned(len(want)-len(res.Foreign), notRouted)
	}
	if err = errors.Join(append(errs, err)...); err != nil {
		a.say("routes", "error: "+err.Error())
		return err
	}
	a.say("routes", fmt.Sprintf("%d in place", len(want)-len(res.Foreign)))
	return nil
}

// forget drops what was last said on the subjects with prefix that are not
// in keep: a range routed again, then refused again, is said again.
func (a *Agent) forget(prefix string, keep map[string]bool) {
	a.logMu.Lock()
	defer a.logMu.Unlock()
	for subject := range a.lastLog {
		if strings.HasPrefix(subject, prefix) && !keep[subject] {
			delete(a.lastLog, subject)
		}
	}
}

func (a *Agent) reconcileLoop(ctx context.Context) {
	rounds := 0
	logUpcalls := reconcile.OnChange(func(err error) {
		fmt.Fprintf(a.cfg.Log, "%s reconcile: watch: %s\n", time.Now().UTC().Format(time.RFC3339), reconcile.UpcallsLine(err))
	})
	reconcile.Watch(ctx, a.cfg.OVSDB, a.cfg.VswitchdControl, reconcile.Hooks{
		Pass: func(st reconcile.Stats, err error) {
			// A route pass after each: ovs-vswitchd re-creates the bridge
			// interface (userspace datapath) without the overlay's
			// neighbours and routes, and a pass rebuilt the overlay's flows
			// from a record the agent may have changed since it read it.
			defer a.trigger()
			if a.cfg.Events != nil {
				a.cfg.Events.ReconcileDone(st.Took, err)
			}
			a.st.set(&a.st.reconciled, err)
			line := fmt.Sprintf("%s reconcile: %s", time.Now().UTC().Format(time.RFC3339), st)
			if err != nil {
				line += " error: " + err.Error()
			}
			fmt.Fprintln(a.cfg.Log, line)
		},
		Retry: func(err error) {
			a.st.set(&a.st.reconciled, fmt.Errorf("watching ovs-vswitchd: %w", err))
			fmt.Fprintf(a.cfg.Log, "%s reconcile: watch: %v; retrying\n", time.Now().UTC().Format(time.RFC3339), err)
		},
		Note: func(what string) {
			fmt.Fprintf(a.cfg.Log, "%s reconcile: watch: %s\n", time.Now().UTC().Format(time.RFC3339), what)
		},
		Upcalls: func(err error) {
			a.st.set(&a.st.upcalls, err)
			if a.cfg.Events != nil {
				a.cfg.Events.VswitchdUpcalls(err)
			}
			logUpcalls(err)
		},
		Waiting: func() { a.st.idle("reconcile") },
		Running: func() {
			// The first round is the agent's start, each later one an
			// ovs-vswitchd that started again.
			if rounds++; rounds > 1 && a.cfg.Events != nil {
				a.cfg.Events.VswitchdRestart()
			}
			a.st.busy("reconcile")
		},
	})
}

// orphanSweeper replays, from the conflist the agent installs, the DEL of
// the node's orphaned attachments, with the plugins of the node's CNI bin
// dir. Until the conflist is in place its passes fail and touch nothing.
func (a *Agent) orphanSweeper() *orphan.Sweeper {
	return orphan.New(orphan.Config{
		OVSDB:    a.cfg.OVSDB,
		Conflist: filepath.Join(a.cfg.CNIConfDir, filepath.Base(a.cfg.ConfTemplate)),
		CNIPath:  []string{a.cfg.CNIBinDir},
		Interval: a.cfg.OrphanInterval,
		Log:      a.cfg.Log,
		Deleted: func(_ ovsdb.Attachment, err error) {
			if a.cfg.Events != nil {
				a.cfg.Events.OrphanDeleted(err)
			}
		},
		PluginFailed: func(plugin string) {
			if a.cfg.Events != nil {
				a.cfg.Events.OrphanPluginFailed(plugin)
			}
		},
	})
}

// PodCIDRs are a Node's pod ranges (spec.podCIDRs, else spec.podCIDR).
func PodCIDRs(n *corev1.Node) []netip.Prefix {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// Peer is a Node as podroutes sees it: its age, pod ranges and InternalIPs.
func Peer(n *corev1.Node) podroutes.Peer {
	p := podroutes.Peer{Name: n.Name, Created: n.CreationTimestamp.Time, PodCIDRs: PodCIDRs(n)}
	for _, ad := range n.Status.Addresses {
		if ad.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(ad.Address); err == nil {
			p.Addrs = append(p.Addrs, ip.Unmap())
		}
	}
	return p
}
