package agent

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// status is what the probes read: the outcome of the loops' last passes
// and which loop is busy since when.
type status struct {
	mu         sync.Mutex
	now        func() time.Time
	busySince  map[string]time.Time // loop -> start of the work under way
	plugins    string               // "" once the plugins are in place (or none are to be), else why not
	conflist   string               // "" once the conflist is in place for the Node's podCIDRs, else why not
	routes     string               // "" once the last route sync succeeded, else why not
	reconciled string               // "" once the last reconcile pass succeeded, else why not
	upcalls    string               // "" unless the kernel datapath was last seen losing every upcall (or ovs-vswitchd could not be asked)
}

func newStatus() *status {
	return &status{now: time.Now, busySince: map[string]time.Time{},
		conflist: "not rendered yet", routes: "not synced yet", reconciled: "no reconcile pass yet"}
}

// busy marks loop as working (until idle).
func (s *status) busy(loop string) {
	s.mu.Lock()
	s.busySince[loop] = s.now()
	s.mu.Unlock()
}

// idle marks loop as waiting for work.
func (s *status) idle(loop string) {
	s.mu.Lock()
	delete(s.busySince, loop)
	s.mu.Unlock()
}

func (s *status) set(field *string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		*field = ""
	} else {
		*field = err.Error()
	}
}

// wedged names the loops busy for longer than limit.
func (s *status) wedged(limit time.Duration) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for loop, since := range s.busySince {
		if d := s.now().Sub(since); d > limit {
			out = append(out, fmt.Sprintf("%s busy for %s", loop, d.Round(time.Second)))
		}
	}
	slices.Sort(out)
	return out
}

// server serves the probes, and the metrics handler when there is one.
func (a *Agent) server() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if stuck := a.st.wedged(a.cfg.WedgedAfter); len(stuck) > 0 {
			probeReply(w, false, "wedged: "+strings.Join(stuck, ", "))
			return
		}
		probeReply(w, true, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		checks := a.readiness(r.Context())
		ok := true
		var b strings.Builder
		for _, c := range checks {
			if c.err != "" {
				ok = false
				fmt.Fprintf(&b, "[-]%s: %s\n", c.name, c.err)
			} else {
				fmt.Fprintf(&b, "[+]%s ok\n", c.name)
			}
		}
		probeReply(w, ok, strings.TrimSuffix(b.String(), "\n"))
	})
	if a.cfg.Metrics != nil {
		mux.Handle("/metrics", a.cfg.Metrics)
	}
	// A client that sends slowly, reads slowly or idles does not hold a
	// connection for long; what a request costs is bounded by the handlers
	// (a shared read of OVS, see readiness and pkg/metrics).
	return &http.Server{Addr: a.cfg.HealthAddr, Handler: mux,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
}

func probeReply(w http.ResponseWriter, ok bool, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, body)
}

type check struct{ name, err string }

// bridgesServed says which bridges of the suite (its owner tag) have no
// OpenFlow endpoint: ovs-vswitchd is down or has not re-created them, and
// no flow can be put there.
func bridgesServed(ctx context.Context, cli *ovsdb.Client, ovsdbEndpoint endpoint.Endpoint) string {
	brs, err := cli.Bridges(ctx)
	if err != nil {
		return err.Error()
	}
	var down []string
	for _, br := range brs {
		if br.ExternalIDs[ovsdb.KeyOwner] == ovsdb.OwnerValue && !endpoint.Listening(endpoint.OpenFlow(endpoint.Endpoint{}, ovsdbEndpoint, br.Name)) {
			down = append(down, br.Name)
		}
	}
	if len(down) > 0 {
		return "no OpenFlow endpoint for bridge " + strings.Join(down, ", ")
	}
	return ""
}

// How the probes read OVS: one read at a time, bounded, its result shared
// by the probes of the next ovsFresh.
const (
	ovsTimeout = 2 * time.Second
	ovsFresh   = 2 * time.Second
)

// readiness (of a host that is not a Node: the routes only): the plugins and the conflist are in place for this Node's podCIDRs, the routes
// are synced, OVSDB answers, every bridge of the suite is served by
// ovs-vswitchd, the last reconcile pass succeeded and ovs-vswitchd was not
// last seen without an upcall handler for its kernel datapath.
func (a *Agent) readiness(ctx context.Context) []check {
	a.st.mu.Lock()
	checks := []check{{"plugins", a.st.plugins}, {"conflist", a.st.conflist}, {"routes", a.st.routes}}
	if a.cfg.HostOnly {
		checks = []check{{"routes", a.st.routes}}
	}
	reconciled, upcalls := a.st.reconciled, a.st.upcalls
	a.st.mu.Unlock()
	if !a.cfg.OVSDB.IsZero() {
		ovs, err := a.ovsChecks.Get(ctx)
		if err != nil { // the probe gave up first
			ovs = []check{{"ovsdb", err.Error()}, {"bridges", "OVSDB not read"}}
		}
		checks = append(checks, ovs...)
		checks = append(checks, check{"reconcile", reconciled}, check{"upcalls", upcalls})
	}
	return checks
}

// readOVS is the probes' read of OVS: OVSDB answers, and every bridge of
// the suite is served by ovs-vswitchd.
func (a *Agent) readOVS(ctx context.Context) ([]check, error) {
	c, served := check{name: "ovsdb"}, check{name: "bridges"}
	if cli, err := ovsdb.Dial(ctx, a.cfg.OVSDB); err != nil {
		c.err = err.Error()
		served.err = "OVSDB unreachable"
	} else {
		served.err = bridgesServed(ctx, cli, a.cfg.OVSDB)
		cli.Close()
	}
	return []check{c, served}, nil
}
