package metrics

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestUnreachable scrapes a collector whose OVSDB is not there: the scrape
// succeeds with ovsflow_up 0 and one OVSDB scrape error, and the agent's
// events still count.
func TestUnreachable(t *testing.T) {
	c := New(Config{OVSDB: "unix:" + filepath.Join(t.TempDir(), "none.sock"), Timeout: time.Second})
	c.ReconcileDone(time.Second, nil)
	c.ReconcileDone(time.Second, errors.New("x"))
	c.VswitchdRestart()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range m.GetLabel() {
				k += "/" + l.GetValue()
			}
			switch {
			case m.Gauge != nil:
				got[k] = m.GetGauge().GetValue()
			case m.Counter != nil:
				got[k] = m.GetCounter().GetValue()
			}
		}
	}
	for k, want := range map[string]float64{NameUp: 0, NameScrapeErrors + "/ovsdb": 1, NameReconciles + "/ok": 1,
		NameReconciles + "/error": 1, NameRestarts: 1} {
		if got[k] != want {
			t.Errorf("%s: got %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
}
