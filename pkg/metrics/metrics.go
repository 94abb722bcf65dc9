// Package metrics exposes what the pipeline does on a node to Prometheus:
// the packets port security dropped per attachment and reason, the
// conntrack entries and limit of each of the pipeline's zones, the host
// ports published, the flows by group, and the node agent's own events
// (reconcile passes, ovs-vswitchd restarts). Everything but the events is
// read from OVS when Prometheus scrapes (a Collector): the records in
// OVSDB, one OpenFlow flow-stats dump per bridge, dpctl/ct-get-limits per
// ovs-vswitchd. That read is bounded: one at a time, with a timeout, and
// its samples are kept for a few seconds; scrapes that meet a read under
// way or its fresh samples share them, so that scrapers, however many,
// put at most one read's load on ovs-vswitchd's main loop (which also
// serves the plugins' ADDs) every few seconds.
//
// It imports prometheus/client_golang and is for the long-running node
// agent only: the plugins never import it.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/feature"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/memo"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/portsec"
	"github.com/ovsflow/ovs-cni/pkg/record"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// Config is where the collector reads OVS.
type Config struct {
	// OVSDB is the OVSDB endpoint (default endpoint.DefaultOVSDB).
	OVSDB endpoint.Endpoint
	// VswitchdControl is ovs-vswitchd's control socket for records that
	// name none (default: found as ovs-appctl finds it).
	VswitchdControl string
	// Timeout bounds one read of OVS (default DefaultTimeout).
	Timeout time.Duration
	// Fresh is how long the samples of a read serve the scrapes that
	// follow it (default DefaultFresh; < 0: none, each scrape that meets
	// no read under way starts one).
	Fresh time.Duration
	// OnDrops, when set, is called during a read of OVS for every
	// attachment whose drop counter of a reason moved since the previous
	// read (not on the first): the hook for an event on the pod. Off by
	// default.
	OnDrops func(Drops)
}

// Drops is the movement of one attachment's drop counter.
type Drops struct {
	Attachment ovsdb.Attachment
	Pod        string // NAMESPACE/NAME, "" when not recorded
	Reason     string // flows.Reason*
	Packets    uint64 // since the previous read
}

// Collector is a prometheus.Collector of the node's pipeline.
type Collector struct {
	cfg Config

	dropped, hostPorts, flowCount, ctEntries, ctLimit, up, overlayDropped *prometheus.Desc

	reconciles       *prometheus.CounterVec
	reconcileSeconds prometheus.Histogram
	restarts         prometheus.Counter
	orphans          *prometheus.CounterVec
	orphanPlugins    *prometheus.CounterVec
	noUpcalls        prometheus.Gauge
	podRoutes        prometheus.Gauge
	notRouted        *prometheus.GaugeVec
	scrapeErrors     *prometheus.CounterVec

	read *memo.Value[[]prometheus.Metric] // the samples read from OVS, shared

	mu   sync.Mutex
	last map[dropKey]uint64 // drop counters of the previous read (OnDrops)
}

// Defaults of Config.
const (
	DefaultTimeout = 10 * time.Second
	DefaultFresh   = 5 * time.Second
)

type dropKey struct {
	a      ovsdb.Attachment
	reason string
}

// Metric names.
const (
	NameDropped          = "ovsflow_port_security_dropped_packets_total"
	NameOverlayDropped   = "ovsflow_overlay_dropped_packets_total"
	NameHostPorts        = "ovsflow_host_ports"
	NameFlows            = "ovsflow_flows"
	NameConntrackEntries = "ovsflow_conntrack_entries"
	NameConntrackLimit   = "ovsflow_conntrack_zone_limit"
	NameUp               = "ovsflow_up"
	NameReconciles       = "ovsflow_reconcile_total"
	NameReconcileSeconds = "ovsflow_reconcile_duration_seconds"
	NameRestarts         = "ovsflow_vswitchd_restarts_total"
	NameOrphansDeleted   = "ovsflow_orphans_deleted_total"
	NameOrphanDelFailed  = "ovsflow_orphan_del_failures_total"
	NameNoUpcallHandler  = "ovsflow_vswitchd_no_upcall_handler"
	NamePodRoutes        = "ovsflow_pod_routes"
	NameNotRouted        = "ovsflow_pod_ranges_not_routed"
	NameScrapeErrors     = "ovsflow_scrape_errors_total"
)

var attachmentLabels = []string{"container", "ifname", "namespace", "pod"}

// New returns the collector of cfg.
func New(cfg Config) *Collector {
	if cfg.OVSDB.IsZero() {
		cfg.OVSDB = endpoint.MustParse(endpoint.DefaultOVSDB)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Fresh == 0 {
		cfg.Fresh = DefaultFresh
	}
	c := &Collector{
		cfg: cfg,
		dropped: prometheus.NewDesc(NameDropped,
			"Packets the port security of an attachment dropped, by reason (the packet counters of its drop flows; they restart when the flows are reinstalled).",
			append(slices.Clone(attachmentLabels), "reason"), nil),
		overlayDropped: prometheus.NewDesc(NameOverlayDropped,
			"Packets the overlay of a bridge dropped, by reason (overlay-refused: from the tunnel, from no tunnelled Node or for none of this node's pods; overlay-no-peer: routed to the overlay for no Node's range; the packet counters of its drop flows).",
			[]string{"bridge", "reason"}, nil),
		hostPorts: prometheus.NewDesc(NameHostPorts,
			"Host ports an attachment publishes (resolved rules: protocol, node address, host port).", attachmentLabels, nil),
		flowCount: prometheus.NewDesc(NameFlows,
			"Flows of the pipeline on a bridge, by group (port security, host ports, shared pipeline, tombstone, bandwidth, gateway, overlay).", []string{"bridge", "group"}, nil),
		ctEntries: prometheus.NewDesc(NameConntrackEntries,
			"Conntrack entries of a zone of the pipeline, per datapath.", []string{"datapath", "zone"}, nil),
		ctLimit: prometheus.NewDesc(NameConntrackLimit,
			"Conntrack entry limit of a zone of the pipeline, per datapath (0: none of its own).", []string{"datapath", "zone"}, nil),
		up: prometheus.NewDesc(NameUp,
			"Whether the last read of OVS read OVSDB (1) or not (0).", nil, nil),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: NameReconciles,
			Help: "Reconcile passes of the node agent, by result (ok, error)."}, []string{"result"}),
		reconcileSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: NameReconcileSeconds,
			Help: "How long the node agent's reconcile passes took.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Name: NameRestarts,
			Help: "ovs-vswitchd (re)starts the node agent saw."}),
		orphans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: NameOrphansDeleted,
			Help: "DELs the node agent replayed for orphaned attachments (host veth gone, no DEL run), by result (ok, error)."}, []string{"result"}),
		orphanPlugins: prometheus.NewCounterVec(prometheus.CounterOpts{Name: NameOrphanDelFailed,
			Help: "DELs of plugins of the chain that are not the suite's that failed in a replayed DEL (the suite's went on), by plugin type."}, []string{"plugin"}),
		noUpcalls: prometheus.NewGauge(prometheus.GaugeOpts{Name: NameNoUpcallHandler,
			Help: "1 while the kernel datapath was last seen losing every upcall (no ovs-vswitchd handler gets them: it forwards no new flow), else 0."}),
		podRoutes: prometheus.NewGauge(prometheus.GaugeOpts{Name: NamePodRoutes,
			Help: "Routes to other nodes' pod ranges the node agent keeps (its last route sync)."}),
		notRouted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: NameNotRouted,
			Help: "Other nodes' pod ranges the node agent does not route, by reason (conflict: overlaps an older Node's; local: a network of this node; nodeaddr: holds a node's InternalIP; self: this node's range or address; family: no InternalIP of its family; foreign: a route of another protocol)."}, []string{"reason"}),
		scrapeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: NameScrapeErrors,
			Help: "Reads of OVS (each serves the scrapes of a few seconds) that could not read a source (ovsdb, openflow, conntrack) or dropped a sample whose labels were not valid (labels)."}, []string{"source"}),
	}
	c.read = memo.New(c.readOVS, cfg.Fresh, cfg.Timeout)
	return c
}

// ReconcileDone records one reconcile pass of the agent.
func (c *Collector) ReconcileDone(d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	c.reconciles.WithLabelValues(result).Inc()
	c.reconcileSeconds.Observe(d.Seconds())
}

// VswitchdRestart records an ovs-vswitchd (re)start the agent saw.
func (c *Collector) VswitchdRestart() { c.restarts.Inc() }

// OrphanDeleted records one DEL the agent replayed for an orphaned
// attachment (pkg/orphan).
func (c *Collector) OrphanDeleted(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	c.orphans.WithLabelValues(result).Inc()
}

// OrphanPluginFailed records the failed DEL of a plugin of the chain that
// is not the suite's in a DEL the agent replayed (pkg/orphan).
func (c *Collector) OrphanPluginFailed(plugin string) {
	c.orphanPlugins.WithLabelValues(plugin).Inc()
}

// VswitchdUpcalls records what the agent last learnt of ovs-vswitchd's
// kernel datapath's upcalls: unixctl.ErrNoUpcallHandler sets the gauge, anything
// else clears it.
func (c *Collector) VswitchdUpcalls(err error) {
	if errors.Is(err, unixctl.ErrNoUpcallHandler) {
		c.noUpcalls.Set(1)
		return
	}
	c.noUpcalls.Set(0)
}

// RoutesPlanned records the node agent's last route sync.
func (c *Collector) RoutesPlanned(routed int, notRouted map[string]int) {
	c.podRoutes.Set(float64(routed))
	c.notRouted.Reset()
	for reason, n := range notRouted {
		c.notRouted.WithLabelValues(reason).Set(float64(n))
	}
}

// Handler serves the collector (and nothing else: no Go runtime metrics,
// which the agent may add to a registry of its own) in Prometheus's
// exposition format.
func (c *Collector) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.dropped, c.hostPorts, c.flowCount, c.ctEntries, c.ctLimit, c.up, c.overlayDropped} {
		ch <- d
	}
	for _, e := range c.events() {
		e.Describe(ch)
	}
}

// events are the agent's own metrics, which it counts as things happen.
func (c *Collector) events() []prometheus.Collector {
	return []prometheus.Collector{c.reconciles, c.reconcileSeconds, c.restarts, c.orphans, c.orphanPlugins,
		c.noUpcalls, c.podRoutes, c.notRouted, c.scrapeErrors}
}

// Collect implements prometheus.Collector: the samples of the last read of
// OVS while they are fresh, else of the read under way, else of a new one;
// then the agent's events.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ms, _ := c.read.Get(context.Background()) // bounded by the read's timeout
	for _, m := range ms {
		ch <- m
	}
	for _, e := range c.events() {
		e.Collect(ch)
	}
}

// readOVS reads the samples of OVS, ovsflow_up last.
func (c *Collector) readOVS(ctx context.Context) ([]prometheus.Metric, error) {
	ch := make(chan prometheus.Metric)
	done := make(chan []prometheus.Metric)
	go func() {
		var ms []prometheus.Metric
		for m := range ch {
			ms = append(ms, m)
		}
		done <- ms
	}()
	err := c.collect(ctx, ch)
	close(ch)
	ms := <-done
	up := 1.0
	if err != nil {
		up = 0
	}
	return append(ms, prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)), nil
}

// port is one attachment of the node as its records say.
type port struct {
	id     ovsdb.Attachment
	labels []string // attachmentLabels' values
	pod    string
}

// bridgeState is what one OpenFlow endpoint serves.
type bridgeState struct {
	name    string
	ports   map[flows.Cookie]port // by the attachment's cookie (kind 0)
	zones   map[uint16]bool
	control string
	tunnel  bool // the overlay's tunnel is on it
}

// collect reads the node; the error says only that OVSDB could not be
// read (the other sources count in scrapeErrors).
func (c *Collector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	cli, err := ovsdb.Dial(ctx, c.cfg.OVSDB)
	if err != nil {
		c.scrapeErrors.WithLabelValues("ovsdb").Inc()
		return err
	}
	owned, err := cli.OwnedPorts(ctx)
	var tunnels []ovsdb.Tunnel
	if err == nil {
		tunnels, err = cli.Tunnels(ctx)
	}
	cli.Close()
	if err != nil {
		c.scrapeErrors.WithLabelValues("ovsdb").Inc()
		return err
	}
	byTarget := map[endpoint.Endpoint]*bridgeState{}
	state := func(target endpoint.Endpoint, bridge string) *bridgeState {
		if byTarget[target] == nil {
			byTarget[target] = &bridgeState{name: bridge, ports: map[flows.Cookie]port{}, zones: map[uint16]bool{}}
		}
		return byTarget[target]
	}
	for _, p := range owned {
		id := p.Attachment()
		pod := p.Port.ExternalIDs[record.KeyPod]
		ns, name, _ := strings.Cut(pod, "/")
		pt := port{id: id, pod: pod, labels: []string{id.ContainerID, id.IfName, ns, name}}
		bridge := p.Port.ExternalIDs[ovsdb.KeyBridge]
		target := portsec.Target(p, endpoint.OpenFlow(endpoint.Endpoint{}, c.cfg.OVSDB, bridge))
		v, _ := flows.AttachmentCookie(id.ContainerID, id.IfName).AnyKind()
		for _, f := range feature.All {
			// The features with conntrack zones (the host ports) name
			// the bridge's target and control socket, and count their
			// translations.
			r, ok := f.Rebuild(p)
			if !ok || r.Pipeline == nil {
				continue
			}
			target = r.Target
			s := state(target, bridge)
			if r.Control != "" {
				s.control = r.Control
			}
			for z := range r.Pipeline.ZoneLimits() {
				s.zones[z] = true
			}
			c.emit(ch, c.hostPorts, prometheus.GaugeValue, float64(len(r.HostPorts.Rules)), pt.labels...)
		}
		state(target, bridge).ports[v] = pt
	}
	// The bridges of the overlay's tunnels, for its drops.
	for _, tun := range tunnels {
		if !slices.ContainsFunc(slices.Collect(maps.Values(byTarget)), func(s *bridgeState) bool { return s.name == tun.Bridge() }) {
			state(endpoint.OpenFlow(endpoint.Endpoint{}, c.cfg.OVSDB, tun.Bridge()), tun.Bridge())
		}
		for _, s := range byTarget {
			if s.name == tun.Bridge() {
				s.tunnel = true
			}
		}
	}
	moved := map[dropKey]uint64{}
	sockets := map[string]map[uint16]bool{}
	for target, s := range byTarget {
		suite := flows.SuiteDelete()
		fs, err := openflow.DumpStats(ctx, target, suite.Cookie, suite.Mask)
		if err != nil {
			c.scrapeErrors.WithLabelValues("openflow").Inc()
			continue
		}
		groups := map[flows.Group]int{}
		drops := map[dropKey]uint64{}
		overlayDrops := map[string]uint64{}
		secured := map[flows.Cookie]bool{} // attachments with port security flows
		for _, f := range fs {
			cookie := flows.Cookie(f.Cookie)
			g := flows.GroupOf(cookie)
			groups[g]++
			if g == flows.GroupOverlay {
				if r := flows.DropReason(f.Flow); r != "" {
					overlayDrops[r] += f.Packets
				}
			}
			if g != flows.GroupPortSecurity {
				continue
			}
			v, _ := cookie.AnyKind()
			secured[v] = true
			if r := flows.DropReason(f.Flow); r != "" {
				if pt, ok := s.ports[v]; ok {
					drops[dropKey{pt.id, r}] += f.Packets
				}
			}
		}
		for _, g := range []flows.Group{flows.GroupPortSecurity, flows.GroupHostPorts, flows.GroupShared, flows.GroupTombstone, flows.GroupBandwidth, flows.GroupGateway, flows.GroupOverlay} {
			c.emit(ch, c.flowCount, prometheus.GaugeValue, float64(groups[g]), s.name, g.String())
		}
		if s.tunnel {
			for _, r := range []string{flows.ReasonOverlayNoPeer, flows.ReasonOverlayRefused} {
				c.emit(ch, c.overlayDropped, prometheus.CounterValue, float64(overlayDrops[r]), s.name, r)
			}
		}
		// Every reason of every attachment with port security flows, so
		// that a counter exists before its first drop.
		for v, pt := range s.ports {
			for _, r := range reasons {
				k := dropKey{pt.id, r}
				if !secured[v] {
					continue
				}
				n := drops[k]
				moved[k] = n
				c.emit(ch, c.dropped, prometheus.CounterValue, float64(n), append(slices.Clone(pt.labels), r)...)
			}
		}
		if len(s.zones) == 0 {
			continue
		}
		ctl := s.control
		if ctl == "" {
			ctl = c.cfg.VswitchdControl
		}
		sock, err := unixctl.Find(target, ctl)
		if err != nil {
			c.scrapeErrors.WithLabelValues("conntrack").Inc()
			continue
		}
		if sockets[sock] == nil {
			sockets[sock] = map[uint16]bool{}
		}
		for z := range s.zones {
			sockets[sock][z] = true
		}
	}
	type dpZone struct {
		dp   string
		zone uint16
	}
	seen := map[dpZone]bool{}
	for sock, zones := range sockets {
		zs := slices.Sorted(maps.Keys(zones))
		dps, err := unixctl.Datapaths(ctx, sock)
		if err != nil {
			c.scrapeErrors.WithLabelValues("conntrack").Inc()
			continue
		}
		for _, dp := range dps {
			counts, err := unixctl.ZoneCounts(ctx, sock, dp, zs...)
			if err != nil {
				c.scrapeErrors.WithLabelValues("conntrack").Inc()
				continue
			}
			for _, z := range counts {
				if k := (dpZone{dp, z.Zone}); seen[k] {
					continue
				} else {
					seen[k] = true
				}
				zone := strconv.Itoa(int(z.Zone))
				c.emit(ch, c.ctEntries, prometheus.GaugeValue, float64(z.Count), dp, zone)
				c.emit(ch, c.ctLimit, prometheus.GaugeValue, float64(z.Limit), dp, zone)
			}
		}
	}
	c.notify(moved, byTarget)
	return nil
}

// emit sends one sample, or counts a scrape error when its label values
// are not valid (UTF-8): they come from OVSDB rows a runtime's arguments
// filled, and must not stop the scrape.
func (c *Collector) emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		c.scrapeErrors.WithLabelValues("labels").Inc()
		return
	}
	ch <- m
}

// reasons are the drop reasons of port security flows.
var reasons = []string{flows.ReasonRouterAdvertisement, flows.ReasonRedirect, flows.ReasonDHCPServer,
	flows.ReasonDoubleTag, flows.ReasonVRRP, flows.ReasonFragment, flows.ReasonNeighbourDiscovery, flows.ReasonSpoofed}

// notify calls OnDrops for the counters that moved since the previous
// scrape.
func (c *Collector) notify(now map[dropKey]uint64, byTarget map[endpoint.Endpoint]*bridgeState) {
	if c.cfg.OnDrops == nil {
		return
	}
	pods := map[ovsdb.Attachment]string{}
	for _, s := range byTarget {
		for _, pt := range s.ports {
			pods[pt.id] = pt.pod
		}
	}
	c.mu.Lock()
	last := c.last
	c.last = now
	c.mu.Unlock()
	if last == nil {
		return
	}
	for k, n := range now {
		if before, ok := last[k]; ok && n > before {
			c.cfg.OnDrops(Drops{Attachment: k.a, Pod: pods[k.a], Reason: k.reason, Packets: n - before})
		}
	}
}

// String renders a Drops for logs and events.
func (d Drops) String() string {
	who := d.Attachment.String()
	if d.Pod != "" {
		who = "pod " + d.Pod + " (" + who + ")"
	}
	return fmt.Sprintf("%s: port security dropped %d packets (%s)", who, d.Packets, d.Reason)
}
