package e2e

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/metrics"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// sample is one line of Prometheus's text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
var labelPair = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape GETs url and parses the samples.
func scrape(t *testing.T, url string) []sample {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d, %v\n%s", resp.StatusCode, err, b)
	}
	var out []sample
	for _, line := range strings.Split(string(b), "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("scrape: line %q: %v", line, err)
		}
		s := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.labels[p[1]] = p[2]
		}
		out = append(out, s)
	}
	return out
}

// value returns the value of the sample of name with (at least) labels.
func value(samples []sample, name string, labels map[string]string) (float64, bool) {
	for _, s := range samples {
		if s.name != name {
			continue
		}
		match := true
		for k, v := range labels {
			match = match && s.labels[k] == v
		}
		if match {
			return s.value, true
		}
	}
	return 0, false
}

// TestMetricsScrape builds the collector in process against the sandbox's
// OVS, as the node agent does, and scrapes it over HTTP. A pod sends three
// router advertisements and three frames from another IPv4 address; the
// control, a pod of the same network, sends nothing forbidden. The pod's
// counters of the two reasons move by three, the control's by nothing;
// one connection from outside leaves an entry in the DNAT zone, whose
// limit is the default; the pod publishes three host ports; the agent's
// events count; OnDrops reports each movement once, with the pod's name.
func TestMetricsScrape(t *testing.T) {
	l := newLab(t)
	n := l.network("metrics", nil, map[string]any{})
	p := l.joinPod(n, "attacker pod", "shop/api-0", mappings(pm(8091, 80, "tcp", ""), pm(8092, 53, "udp", "")))
	ctl := l.joinPod(n, "control pod", "shop/api-1", nil)
	p.ServeTCP(t, 80)
	var mu sync.Mutex
	var events []metrics.Drops
	// Fresh < 0: the scrape after the attack reads OVS again, however soon.
	c := metrics.New(metrics.Config{OVSDB: ovsdbEP, Fresh: -1, OnDrops: func(d metrics.Drops) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, d)
	}})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	appctl(t, "revalidator/wait")
	before := scrape(t, srv.URL)
	pod := func(m *member, name, reason string) map[string]string {
		return map[string]string{"container": m.ID, "ifname": "eth0", "namespace": "shop", "pod": name, "reason": reason}
	}
	for _, who := range []struct {
		m    *member
		name string
	}{{p, "api-0"}, {ctl, "api-1"}} {
		for _, r := range []string{flows.ReasonRouterAdvertisement, flows.ReasonSpoofed} {
			if v, ok := value(before, metrics.NameDropped, pod(who.m, who.name, r)); !ok || v != 0 {
				t.Errorf("before: %s %s of %s: got %v, %v; want a counter at 0", metrics.NameDropped, r, who.name, v, ok)
			}
		}
	}

	s := sender(t, p.NS, "eth0")
	allNodes := netip.MustParseAddr("ff02::1")
	ra := ethFrame(multicastMAC(allNodes), p.mac, etherIPv6, icmp6Packet(p.ll, allNodes, icmp6RA, 0, raBody(1, 1800, p.mac, attackerPrefix)))
	spoofed := ethFrame(l.bridgeMAC(t), p.mac, etherIPv4, udp4(netip.MustParseAddr("192.0.2.250"), netip.MustParseAddr(outsideV4), 40000, 53, []byte("x")))
	for range 3 {
		mustSend(t, s, ra, spoofed)
	}
	expect(t, l.Outside.NS, "tcp", hp(nodeV4, 8091), p.Container, outsideV4)
	// A UDP datagram to the UDP host port: its DNAT entry stays for the
	// scrape (the kernel's per-zone count leaves out a TCP connection that
	// has closed, as the one above has).
	if err := l.Outside.NS.Do(func(ns.NetNS) error {
		conn, err := net.Dial("udp", hp(nodeV4, 8092))
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Write([]byte("metrics"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c.ReconcileDone(1500*time.Millisecond, nil)
	c.ReconcileDone(200*time.Millisecond, errors.New("bridge br0 is not there"))
	c.VswitchdRestart()
	appctl(t, "revalidator/wait")
	after := scrape(t, srv.URL)
	var shown []string
	for _, x := range after {
		if c := x.labels["container"]; c == "" || c == p.ID {
			shown = append(shown, fmt.Sprintf("%s%v %v", x.name, x.labels, x.value))
		}
	}
	t.Logf("scrape after the attack:\n%s", strings.Join(shown, "\n"))

	for _, tc := range []struct {
		what    string
		name    string
		labels  map[string]string
		want    float64
		atLeast bool
	}{
		{"pod's router advertisements dropped", metrics.NameDropped, pod(p, "api-0", flows.ReasonRouterAdvertisement), 3, false},
		{"pod's spoofed frames dropped", metrics.NameDropped, pod(p, "api-0", flows.ReasonSpoofed), 3, false},
		{"control's router advertisements dropped", metrics.NameDropped, pod(ctl, "api-1", flows.ReasonRouterAdvertisement), 0, false},
		{"control's spoofed frames dropped", metrics.NameDropped, pod(ctl, "api-1", flows.ReasonSpoofed), 0, false},
		{"host ports of the pod", metrics.NameHostPorts, map[string]string{"container": p.ID, "pod": "api-0"}, 0, true},
		{"conntrack entries of the DNAT zone", metrics.NameConntrackEntries, map[string]string{"zone": "64000"}, 1, true},
		{"limit of the DNAT zone", metrics.NameConntrackLimit, map[string]string{"zone": "64000"}, float64(flows.DefaultLimit), false},
		{"limit of the container zone", metrics.NameConntrackLimit, map[string]string{"zone": "64002"}, float64(flows.DefaultContainerLimit), false},
		{"port security flows", metrics.NameFlows, map[string]string{"bridge": l.Bridge, "group": "port security"}, 1, true},
		{"host port flows", metrics.NameFlows, map[string]string{"bridge": l.Bridge, "group": "host ports"}, 1, true},
		{"bandwidth flows (none: no ovs-bandwidth here)", metrics.NameFlows, map[string]string{"bridge": l.Bridge, "group": "bandwidth"}, 0, false},
		{"reconciles ok", metrics.NameReconciles, map[string]string{"result": "ok"}, 1, false},
		{"reconciles failed", metrics.NameReconciles, map[string]string{"result": "error"}, 1, false},
		{"reconcile durations", metrics.NameReconcileSeconds + "_count", nil, 2, false},
		{"ovs-vswitchd restarts", metrics.NameRestarts, nil, 1, false},
		{"up", metrics.NameUp, nil, 1, false},
	} {
		got, ok := value(after, tc.name, tc.labels)
		if !ok || tc.atLeast && got < tc.want || !tc.atLeast && got != tc.want {
			t.Errorf("%s: %s%v = %v (present %v), want %v%s", tc.what, tc.name, tc.labels, got, ok, tc.want, map[bool]string{true: " or more"}[tc.atLeast])
		}
	}
	// The host ports: tcp and udp on every node address of both families.
	hpWant := float64(len(hostPortRecord(t, p.Container).Rules))
	if got, _ := value(after, metrics.NameHostPorts, map[string]string{"container": p.ID}); got != hpWant || hpWant < 2 {
		t.Errorf("%s of the pod: got %v, want %v (its record's rules)", metrics.NameHostPorts, got, hpWant)
	}
	mu.Lock()
	defer mu.Unlock()
	got := map[string]uint64{}
	for _, e := range events {
		if e.Pod == "shop/api-1" {
			t.Errorf("OnDrops: an event for the control: %s", e)
		}
		if e.Pod == "shop/api-0" {
			got[e.Reason] += e.Packets
		}
	}
	if got[flows.ReasonRouterAdvertisement] != 3 || got[flows.ReasonSpoofed] != 3 {
		t.Errorf("OnDrops: got %v for the pod, want 3 router advertisements and 3 spoofed frames (events %v)", got, events)
	}
}

// countingProxy listens next to the sandbox's OVSDB socket (so that the
// collector finds the bridges' OpenFlow sockets and ovs-vswitchd's control
// socket beside it, as with the real one), counts the connections made to
// it and relays each to the real OVSDB.
func countingProxy(t *testing.T) (endpoint.Endpoint, *atomic.Int64) {
	t.Helper()
	if ovsdbEP.Network != "unix" {
		t.Fatalf("OVSDB %s: the proxy needs a unix socket", ovsdbEP)
	}
	sock := filepath.Join(filepath.Dir(ovsdbEP.Address), uniq("counted")+".sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var dials atomic.Int64
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			go func() {
				defer in.Close()
				out, err := net.Dial("unix", ovsdbEP.Address)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { io.Copy(out, in); out.Close() }()
				io.Copy(in, out)
			}()
		}
	}()
	return endpoint.Endpoint{Network: "unix", Address: sock}, &dials
}

// TestMetricsScrapesDuringADDs: 50 scrapers scrape /metrics without pause
// while 50 pods with a host port each are added at once. Every ADD
// succeeds, every scrape answers, and the scrapes share their reads of
// OVS: OVSDB is dialled at most once per fresh period (metrics.DefaultFresh)
// of the burst, not once per scrape.
func TestMetricsScrapesDuringADDs(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", uniq("scraped"), framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil),
		map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"portMappings": true}}), nil)

	const pods, scrapers = 50, 50
	cs := make([]*framework.Container, pods)
	for i := range cs {
		cs[i] = framework.NewContainer(t)
	}
	caps := func(i int) map[string]any { return mappings(pm(9100+i, 80, "tcp", "")) }
	t.Cleanup(func() { parallel(8, func(k int) error { return delAll(n, cs, k, 8) }) })

	ep, dials := countingProxy(t)
	srv := httptest.NewServer(metrics.New(metrics.Config{OVSDB: ep}).Handler())
	defer srv.Close()
	// Each scraper scrapes until the ADDs are done, then once more.
	stop := make(chan struct{})
	var scrapes atomic.Int64
	var wg sync.WaitGroup
	scrapeErrs := make([]error, scrapers)
	for k := range scrapers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := http.Get(srv.URL)
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if err == nil && res.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				if err != nil {
					scrapeErrs[k] = fmt.Errorf("scraper %d: %w", k, err)
					return
				}
				scrapes.Add(1)
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	begun := time.Now()
	addErrs := parallel(pods, func(i int) error {
		if _, err := n.Add(cs[i], "eth0", caps(i)); err != nil {
			return fmt.Errorf("ADD %d: %w", i, err)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	took := time.Since(begun)
	failed := 0
	for _, err := range addErrs {
		if err != nil {
			failed++
			t.Error(err)
		}
	}
	if err := errors.Join(scrapeErrs...); err != nil {
		t.Error(err)
	}
	// Reads start at most once per fresh period, plus one under way at
	// each end of the burst.
	bound := int64(took/metrics.DefaultFresh) + 2
	t.Logf("%d ADDs (%d failed) and %d scrapes in %s; OVSDB dialled %d times (bound %d)",
		pods, failed, scrapes.Load(), took.Round(time.Millisecond), dials.Load(), bound)
	if d := dials.Load(); d > bound {
		t.Errorf("%d scrapes dialled OVSDB %d times in %s, want at most %d (one read per %s)",
			scrapes.Load(), d, took.Round(time.Millisecond), bound, metrics.DefaultFresh)
	}
}
