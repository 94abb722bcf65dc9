package e2e

import (
	"maps"
	"slices"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovsflow/ovs-cni/pkg/metrics"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// dropCounts reads the port-security drop counters of container c's eth0
// by reason, through pkg/metrics in process, as Prometheus scrapes them.
func dropCounts(t *testing.T, c *framework.Container) map[string]float64 {
	t.Helper()
	// The flows' counters follow the datapath's once a revalidation round
	// has pushed its statistics: wait for one, instead of for a while.
	appctl(t, "revalidator/wait")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.New(metrics.Config{OVSDB: ovsdbEP}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("scraping the drop counters: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != metrics.NameDropped {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["container"] == c.ID && l["ifname"] == "eth0" {
				out[l["reason"]] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// zoneMetrics reads the conntrack entries and limit of a zone through
// pkg/metrics, as Prometheus scrapes them.
func zoneMetrics(t *testing.T, zone int) (entries, limit float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.New(metrics.Config{OVSDB: ovsdbEP}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("scraping the conntrack zones: %v", err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, p := range m.GetLabel() {
				if p.GetName() != "zone" || p.GetValue() != strconv.Itoa(zone) {
					continue
				}
				switch mf.GetName() {
				case metrics.NameConntrackEntries:
					entries = m.GetGauge().GetValue()
				case metrics.NameConntrackLimit:
					limit = m.GetGauge().GetValue()
				}
			}
		}
	}
	return entries, limit
}

// dropWatch is the drop counters of one attachment when an attack starts.
type dropWatch struct {
	c      *framework.Container
	before map[string]float64
}

func watchDrops(t *testing.T, c *framework.Container) *dropWatch {
	t.Helper()
	return &dropWatch{c, dropCounts(t, c)}
}

// check asserts, when blocked, that the counter of each reason moved and,
// when not (the control), that none of them did (none of the
// attachment's, without reasons: its own kernel may send what another
// guard drops, a router solicitation from :: say, and that is not the
// attack).
func (w *dropWatch) check(t *testing.T, blocked bool, reasons ...string) {
	t.Helper()
	now := dropCounts(t, w.c)
	if blocked {
		for _, r := range reasons {
			if now[r] <= w.before[r] {
				t.Errorf("drop counter %s of %s: got %v, was %v, want it to move (counters now: %v)", r, w.c.ID, now[r], w.before[r], now)
			}
		}
		return
	}
	if len(reasons) == 0 {
		reasons = slices.Sorted(maps.Keys(now))
	}
	for _, r := range reasons {
		if now[r] != w.before[r] {
			t.Errorf("control: drop counter %s of %s moved from %v to %v", r, w.c.ID, w.before[r], now[r])
		}
	}
}

// expect asserts that the counters of the reasons moved did and those of
// unmoved did not.
func (w *dropWatch) expect(t *testing.T, moved, unmoved []string) {
	t.Helper()
	now := dropCounts(t, w.c)
	for _, r := range moved {
		if now[r] <= w.before[r] {
			t.Errorf("drop counter %s of %s: got %v, was %v, want it to move (counters now: %v)", r, w.c.ID, now[r], w.before[r], now)
		}
	}
	for _, r := range unmoved {
		if now[r] != w.before[r] {
			t.Errorf("drop counter %s of %s moved from %v to %v, want it still", r, w.c.ID, w.before[r], now[r])
		}
	}
}
