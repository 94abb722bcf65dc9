package metrics

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// TestUnreachable scrapes a collector whose OVSDB is not there: the scrape
// succeeds with ovsflow_up 0 and one OVSDB scrape error, and the agent's
// events still count.
func TestUnreachable(t *testing.T) {
	c := New(Config{OVSDB: endpoint.MustParse("unix:" + filepath.Join(t.TempDir(), "none.sock")), Timeout: time.Second})
	c.ReconcileDone(time.Second, nil)
	c.ReconcileDone(time.Second, errors.New("x"))
	c.VswitchdRestart()
	c.OrphanDeleted(nil)
	c.OrphanDeleted(nil)
	c.OrphanDeleted(errors.New("x"))
	c.OrphanPluginFailed("sbr")
	c.VswitchdUpcalls(fmt.Errorf("x: %w", unixctl.ErrNoUpcallHandler))
	c.RoutesPlanned(2, map[string]int{"local": 9})
	c.RoutesPlanned(3, map[string]int{"conflict": 1}) // the last sync's figures only
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
		NameReconciles + "/error": 1, NameRestarts: 1, NameOrphansDeleted + "/ok": 2, NameOrphansDeleted + "/error": 1,
		NameOrphanDelFailed + "/sbr": 1, NameNoUpcallHandler: 1, NamePodRoutes: 3, NameNotRouted + "/conflict": 1, NameNotRouted + "/local": 0} {
		if got[k] != want {
			t.Errorf("%s: got %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
}

// TestEmitBadLabels drops a sample whose label value is not UTF-8 and
// counts it, instead of panicking in the scrape.
func TestEmitBadLabels(t *testing.T) {
	c := New(Config{})
	ch := make(chan prometheus.Metric, 2)
	c.emit(ch, c.hostPorts, prometheus.GaugeValue, 1, "ctr", "eth0", "ns", "\xff")
	c.emit(ch, c.hostPorts, prometheus.GaugeValue, 1, "ctr", "eth0", "ns", "web-0")
	if len(ch) != 1 {
		t.Errorf("got %d samples, want 1", len(ch))
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.scrapeErrors)
	mfs, _ := reg.Gather()
	if len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Errorf("scrape errors: got %v, want one of source labels", mfs)
	}
}

// TestScrapesShareARead: 50 scrapes at once, and more while their samples
// are fresh, dial OVSDB once between them; the scrape errors count that
// one read.
func TestScrapesShareARead(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "db.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dials atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			conn.Close() // no OVSDB here: the read fails, and counts
		}
	}()
	c := New(Config{OVSDB: endpoint.MustParse("unix:" + sock), Timeout: 5 * time.Second, Fresh: time.Hour})
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	scrape := func() error {
		res, err := http.Get(srv.URL)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || !strings.Contains(string(b), NameUp+" 0") {
			return fmt.Errorf("scrape: %d\n%s", res.StatusCode, b)
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = scrape()
		}()
	}
	wg.Wait()
	if err := errors.Join(append(errs, scrape())...); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("51 scrapes dialled OVSDB %d times, want 1", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c.scrapeErrors)
	mfs, _ := reg.Gather()
	if len(mfs) != 1 || mfs[0].GetMetric()[0].GetCounter().GetValue() != 1 {
		t.Errorf("scrape errors: got %v, want 1 (one read)", mfs)
	}
}
