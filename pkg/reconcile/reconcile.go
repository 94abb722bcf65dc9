// Package reconcile rebuilds, from OVSDB alone, what ovs-vswitchd forgets
// when it restarts: the flows and meters of every live attachment (each
// feature of pkg/feature rebuilds its own from its record), the node-local
// nft elements of the host ports, the gateway addresses of the bridges and
// their flows, the overlay's flows (pkg/overlay, from its tunnel port's
// record); it removes the flows of attachments that are gone.
// `ovs-portmap reconcile` runs it once, or on every ovs-vswitchd start
// (Run).
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/feature"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/gateway"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/overlay"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// endpointTimeout bounds what a pass does at one OpenFlow endpoint (a
// dump, the meters, a bundle; the zone limits): it runs under the sweep,
// which holds every ADD and DEL of the node back, so an ovs-vswitchd that
// does not answer keeps them waiting no longer than this, and the other
// bridges get their turn; the next pass tries it again. The plugins wait
// as long as their own budget (pkg/cnicmd); a pass, for everyone, does not.
const endpointTimeout = 30 * time.Second

// Stats counts what one reconcile pass did.
type Stats struct {
	Attachments int // live attachments whose flows were rebuilt
	Bridges     int // bridges reprogrammed
	Stale       int // attachment cookies removed (no live attachment)
	Gateways    int // gateway addresses restored
	Withdrawn   int // gateway addresses withdrawn (no port needs them)
	// InSync holds the OpenFlow endpoints whose flows are, after the pass,
	// what the records want.
	InSync map[endpoint.Endpoint]bool
	Took   time.Duration // how long the pass took (Once)
}

func (s Stats) String() string {
	return fmt.Sprintf("attachments=%d bridges=%d stale=%d gateways=%d withdrawn=%d", s.Attachments, s.Bridges, s.Stale, s.Gateways, s.Withdrawn)
}

// Reconcile rebuilds, from OVSDB alone, the flows and node-local rules of
// every live attachment (from the records ADD wrote, with the ofport OVSDB
// holds now), removes the flows of attachments that no longer exist, and
// restores recorded gateway addresses. It is idempotent: each bridge whose
// flows differ from what the records want gets one atomic bundle that
// replaces what is there (see inSync). The zone limits go through the
// control socket of ovs-vswitchd that ADD recorded, else control, else the
// one unixctl.Find finds ("" for control: that one).
//
// It is a sweep (ovsdb.BeginSweep): while it runs no ADD claims an ofport or
// inserts its port and no DEL begins, so that it never removes the flows of
// an ADD in flight (they are kept by the attachment's claim, as are those of
// every port) nor restores those of a DEL in flight. An OpenFlow endpoint
// that does not answer is reported, after the others are done.
func Reconcile(ctx context.Context, cli *ovsdb.Client, ovsdbEndpoint endpoint.Endpoint, control string) (st Stats, retErr error) {
	sweep, err := cli.BeginSweep(ctx)
	if err != nil {
		return st, err
	}
	swept := false
	endSweep := func() error {
		if swept {
			return nil
		}
		swept = true
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return cli.EndSweep(ctx, sweep)
	}
	defer func() { retErr = errors.Join(retErr, endSweep()) }()
	bridges, err := cli.Bridges(ctx)
	if err != nil {
		return st, err
	}
	ports, err := cli.OwnedPorts(ctx)
	if err != nil {
		return st, err
	}
	tunnels, err := cli.Tunnels(ctx)
	if err != nil {
		return st, err
	}
	byTarget := map[endpoint.Endpoint]*target{}
	get := func(t endpoint.Endpoint) *target {
		if byTarget[t] == nil {
			byTarget[t] = &target{live: map[flows.Cookie]bool{}}
		}
		return byTarget[t]
	}
	addFlows := func(t *target, c flows.Cookie, fl []flows.Flow) {
		t.live[c] = true
		t.mods = append(t.mods, c.Delete())
		for _, f := range fl {
			t.mods = append(t.mods, f)
		}
	}
	// Kept: the port security flows of every port and of every ADD in
	// flight. Those of a DEL in flight are not restored.
	kept := map[flows.Cookie]bool{}
	keep := func(a ovsdb.Attachment) {
		v, _ := flows.AttachmentCookie(a.ContainerID, a.IfName).AnyKind()
		kept[v] = true
	}
	for a := range sweep.Adding {
		keep(a)
	}
	var rules []flows.Rule
	localnet := map[string]bool{} // bridges with loopback host ports
	// The OpenFlow target of each bridge's port flows as recorded, where
	// the flows of its gateways go too.
	portTarget := map[string]endpoint.Endpoint{}
	for _, p := range ports {
		keep(p.Attachment())
		if _, deleting := sweep.Deleting[p.Attachment()]; deleting {
			continue
		}
		rebuilt := false // any of the attachment's flows: counted once
		for _, f := range feature.All {
			r, ok := f.Rebuild(p)
			if !ok {
				continue
			}
			rebuilt = true
			t := get(r.Target)
			if b := p.Port.ExternalIDs[ovsdb.KeyBridge]; r.PortSecurity != nil && b != "" {
				if _, ok := portTarget[b]; !ok {
					portTarget[b] = r.Target
				}
			}
			if r.Pipeline != nil {
				if r.Control != "" {
					t.ctl = r.Control
				}
				if t.shared == nil {
					t.shared = r.Pipeline.SharedFlows()
				}
				t.pl = r.Pipeline
			}
			for _, sf := range r.Shared {
				if !slices.ContainsFunc(t.shared, func(g flows.Flow) bool { return g.Line() == sf.Line() }) {
					t.shared = append(t.shared, sf)
				}
			}
			t.meters = append(t.meters, r.Meters...)
			addFlows(t, r.Cookie, r.Flows)
			if a := r.HostPorts; a != nil {
				rules = append(rules, a.Rules...)
				if len(a.Loopback) > 0 {
					rules = append(rules, a.Loopback...)
					localnet[p.Port.ExternalIDs[ovsdb.KeyBridge]] = true
				}
			}
		}
		if rebuilt {
			st.Attachments++
		}
	}
	var errs []error
	for _, br := range bridges {
		t := get(endpoint.OpenFlow(endpoint.Endpoint{}, ovsdbEndpoint, br.Name))
		if br.Secure() && t.live != nil && (len(t.live) > 0 || br.ExternalIDs[ovsdb.KeyOwner] == ovsdb.OwnerValue) {
			// Ours to restore: the bridge carries our ports or we created it.
			t.base = flows.BaseFlows()
		}
		// Gateways no port needs any more go (pkg/gateway), the others
		// come back.
		gone, err := gateway.Withdraw(ctx, cli, br, ports)
		if err != nil {
			errs = append(errs, fmt.Errorf("bridge %q: %w", br.Name, err))
		}
		st.Withdrawn += len(gone)
		ids := maps.Clone(br.ExternalIDs)
		for _, g := range gone {
			delete(ids, gateway.Key(g))
		}
		br.ExternalIDs = ids
		st.Gateways += gateway.Restore(br)
		// The flows of the gateways that stay (pkg/flows, gateway.go);
		// those of the others are stale.
		if gws := record.Gateways(ids); len(gws) > 0 {
			gt := t
			if pt, ok := portTarget[br.Name]; ok {
				gt = get(pt)
			}
			for _, g := range gws {
				if fl := flows.GatewayFlows(g); len(fl) > 0 {
					addFlows(gt, flows.GatewayCookie(g), fl)
				}
			}
		}
		// The overlay's flows, from its tunnel port's record (pkg/overlay);
		// without one they are stale.
		for _, tun := range tunnels {
			if tun.Bridge() != br.Name {
				continue
			}
			if _, fl, ok := overlay.Rebuild(tun); ok {
				ot := t
				if pt, ok := portTarget[br.Name]; ok {
					ot = get(pt)
				}
				addFlows(ot, flows.OverlayCookie(), fl)
			}
		}
	}
	st.InSync = map[endpoint.Endpoint]bool{}
	for name, t := range byTarget {
		tctx, cancel := context.WithTimeout(ctx, endpointTimeout)
		err := t.apply(tctx, name, kept, &st)
		cancel()
		if err != nil {
			errs = append(errs, err)
		} else {
			st.InSync[name] = true
		}
	}
	// The rest is the node's and the datapath's, not of any one port.
	errs = append(errs, endSweep())
	for name, t := range byTarget {
		if t.pl != nil && endpoint.Listening(name) {
			ctl := t.ctl
			if ctl == "" {
				ctl = control
			}
			tctx, cancel := context.WithTimeout(ctx, endpointTimeout)
			err := hostport.SetZoneLimits(tctx, name, ctl, *t.pl)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("OpenFlow endpoint %s: %w", name, err))
			}
		}
	}
	if err := hostport.RebuildNodeLocal(ctx, rules); err != nil {
		return st, errors.Join(append(errs, err)...)
	}
	// The guards are in: route_localnet where loopback host ports need it.
	for i := range bridges {
		if localnet[bridges[i].Name] {
			if err := hostport.EnsureRouteLocalnet(ctx, cli, &bridges[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return st, errors.Join(errs...)
}

// apply brings the flows of one OpenFlow endpoint in line with t: what the
// records want, less the cookies of stale attachments (neither kept nor
// rebuilt).
func (t *target) apply(ctx context.Context, name endpoint.Endpoint, kept map[flows.Cookie]bool, st *Stats) error {
	if !endpoint.Listening(name) {
		if len(t.mods) == 0 && t.base == nil && t.shared == nil {
			return nil // nothing of ours to put there (a bridge of someone else's)
		}
		// ovs-vswitchd is down or has not re-created the bridge yet.
		return fmt.Errorf("OpenFlow endpoint %s is not there", name)
	}
	suite := flows.SuiteDelete()
	dumped, err := openflow.Dump(ctx, name, suite.Cookie, suite.Mask)
	if err != nil {
		return fmt.Errorf("OpenFlow endpoint %s: %w", name, err)
	}
	var b openflow.Bundle
	for _, f := range append(t.base, t.shared...) {
		b = append(b, f)
	}
	b = append(b, t.mods...)
	// Port security flows that no record rebuilt are kept for every port
	// and every ADD in flight: they go in before the record is written.
	// So are egress limit flows: ovs-bandwidth's ADD, which no sweep
	// holds off, may have recorded and installed them since the ports were
	// read. Host port flows without a record are stale: ovs-portmap
	// records before it installs, and removes the record last.
	keptFlows := func(c flows.Cookie) bool {
		v, _ := c.AnyKind()
		k := c.Kind()
		return (k == flows.CookieKindPortSecurity || k == flows.CookieKindBandwidth) && !t.live[c] && kept[v]
	}
	var present []openflow.Flow // what the bundle is compared with
	for _, f := range dumped {
		if !keptFlows(flows.Cookie(f.Cookie)) {
			present = append(present, f)
		}
	}
	for _, c := range cookiesOf(dumped) {
		// Tombstones go by their hard timeout.
		if c.Kind() != flows.CookieKindShared && c.Kind() != flows.CookieKindTombstone && !t.live[c] && !keptFlows(c) {
			b = append(b, c.Delete())
			st.Stale++
		}
	}
	if len(b) == 0 {
		return nil
	}
	// Meters are not part of a bundle, and must be there before the flows
	// that use them; set again, they keep their flows.
	if err := openflow.SetMeters(ctx, name, t.meters...); err != nil {
		return fmt.Errorf("OpenFlow endpoint %s: %w", name, err)
	}
	if !inSync(b, present) {
		if err := openflow.Apply(ctx, name, b); err != nil {
			return fmt.Errorf("OpenFlow endpoint %s: %w", name, err)
		}
		st.Bridges++
	}
	return nil
}

// target is what one OpenFlow endpoint (a bridge) is to have.
type target struct {
	shared []flows.Flow // once per bridge
	base   []flows.Flow // table 0's NORMAL on a fail_mode=secure bridge
	pl     *flows.Pipeline
	ctl    string // ovs-vswitchd's control socket, as recorded
	mods   openflow.Bundle
	meters []openflow.MeterBand  // of the egress limits
	live   map[flows.Cookie]bool // rebuilt from the records
}

// inSync reports whether the bridge's flows of ours (present, tombstones
// aside) are exactly the flows of bundle b, compared as openflow.Diff does
// (what ovs-ofctl diff-flows would find): no flow missing, none extra (a
// stale attachment's flows are extra) and none with other actions or
// cookie. Then the bundle would change nothing and is not sent.
func inSync(b openflow.Bundle, present []openflow.Flow) bool {
	var want, ours []openflow.Flow
	for _, m := range b {
		if f, ok := m.(openflow.Flow); ok {
			want = append(want, f)
		}
	}
	for _, f := range present {
		if flows.Cookie(f.Cookie).Kind() != flows.CookieKindTombstone {
			ours = append(ours, f)
		}
	}
	return openflow.Diff(want, ours) == nil
}

// cookiesOf returns the distinct cookies of dumped flows that carry the
// suite tag, in the order first seen.
func cookiesOf(dumped []openflow.Flow) []flows.Cookie {
	var out []flows.Cookie
	seen := map[flows.Cookie]bool{}
	for _, f := range dumped {
		if c := flows.Cookie(f.Cookie); c.IsOurs() && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// Run reconciles the node of the OVSDB at ovsdbEndpoint once, or, with
// watch, whenever an ovs-vswitchd (re)starts, never returning. It logs each
// pass to out and returns the exit code of `ovs-portmap reconcile`.
func Run(ovsdbEndpoint endpoint.Endpoint, control string, watch bool, out io.Writer) int {
	logf := func(format string, a ...any) {
		fmt.Fprintf(out, "%s %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
	}
	logPass := func(st Stats, err error) {
		if err != nil {
			logf("reconcile: %s error: %v", st, err)
			return
		}
		logf("reconcile: %s", st)
	}
	if !watch {
		// At boot (deploy/node-prep.sh) this may be the first reconcile
		// after a watch set flow-restore-wait and died with the node: it
		// clears it, as the watch would have, or the node forwards nothing.
		_, err := Restore(context.Background(), ovsdbEndpoint, control, Hooks{
			Pass: logPass,
			Note: func(what string) { logf("reconcile: %s", what) },
		}, true)
		if err != nil {
			return 1
		}
		return 0
	}
	Watch(context.Background(), ovsdbEndpoint, control, Hooks{
		Pass:    logPass,
		Retry:   func(err error) { logf("watch: %v; retrying", err) },
		Note:    func(what string) { logf("watch: %s", what) },
		Upcalls: OnChange(func(err error) { logf("watch: %s", UpcallsLine(err)) }),
	})
	return 0
}

// OnChange returns a hook that calls f with the first error and with each
// that differs from the one before (nil included): a state said once.
func OnChange(f func(error)) func(error) {
	var last *string
	return func(err error) {
		s := ""
		if err != nil {
			s = err.Error()
		}
		if last != nil && *last == s {
			return
		}
		last = &s
		f(err)
	}
}

// UpcallsLine is what a log says of Hooks.Upcalls' err.
func UpcallsLine(err error) string {
	switch {
	case err == nil:
		return "ovs-vswitchd handles the kernel datapath's upcalls"
	case errors.Is(err, unixctl.ErrNoUpcallHandler):
		return fmt.Sprintf("%v; Open vSwitch 3.1.0 started within 10 s of boot on a machine of at most 2 CPUs does this until it is restarted (fixed in 3.1.1 and 3.2.0; docs/resilience.md)", err)
	}
	return err.Error()
}

// Once dials the OVSDB at ovsdbEndpoint and reconciles its node once,
// within a minute.
func Once(ctx context.Context, ovsdbEndpoint endpoint.Endpoint, control string) (Stats, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, ovsdbEndpoint)
	if err != nil {
		return Stats{Took: time.Since(start)}, err
	}
	defer cli.Close()
	st, err := Reconcile(ctx, cli, ovsdbEndpoint, control)
	st.Took = time.Since(start)
	return st, err
}

// Hooks are what Watch reports; nil ones are skipped.
type Hooks struct {
	// Pass is called after each reconcile pass with its outcome.
	Pass func(Stats, error)
	// Retry is called when the watch on OVSDB ended with err and is
	// started again a second later.
	Retry func(err error)
	// Running is called when a round of passes begins, Waiting when the
	// watch blocks until an ovs-vswitchd runs or goes: a round that does
	// not end is a wedged loop.
	Running, Waiting func()
	// Note tells what the watch did about flow-restore-wait.
	Note func(what string)
	// Upcalls is called after each round's restore while a bridge of ours
	// is on the kernel datapath: with unixctl.ErrNoUpcallHandler (wrapped)
	// while the datapath loses every upcall, with another error when
	// ovs-vswitchd could not be asked, and with nil once an upcall was
	// handled (watchUpcalls).
	Upcalls func(err error)
}

// Watch reconciles whenever an ovs-vswitchd (re)starts, until ctx is done
// (then it returns ctx's error). It learns of that through OVSDB: see
// ovsdb.VswitchdWatch.
func Watch(ctx context.Context, ovsdbEndpoint endpoint.Endpoint, control string, h Hooks) error {
	for {
		err := watchLoop(ctx, ovsdbEndpoint, control, h)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if h.Retry != nil {
			h.Retry(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// watchLoop reconciles whenever an ovs-vswitchd (re)starts. When one dies
// while a bridge of ours is on the kernel datapath, the watch sets
// flow-restore-wait before it lets the next one take the lock: the next
// ovs-vswitchd then keeps the datapath's flows (they came from our secure
// pipeline) and forwards nothing that misses them, until the pipeline is
// back (one bundle per bridge) and the watch clears the flag. A flag of
// ours left by a watch that died is cleared after the next pass.
func watchLoop(ctx context.Context, ovsdbEndpoint endpoint.Endpoint, control string, h Hooks) error {
	w, err := ovsdb.WatchVswitchd(ctx, ovsdbEndpoint)
	if err != nil {
		return err
	}
	defer w.Close()
	note := func(what string) {
		if h.Note != nil {
			h.Note(what)
		}
	}
	for {
		if h.Waiting != nil {
			h.Waiting()
		}
		if err := w.WaitRunning(ctx, 50*time.Millisecond); err != nil {
			return err
		}
		if h.Running != nil {
			h.Running()
		}
		if _, err := Restore(ctx, ovsdbEndpoint, control, h, false); errors.Is(err, errClearing) {
			return err
		}
		if h.Waiting != nil {
			h.Waiting()
		}
		round, endRound := context.WithCancel(ctx)
		upcalls := make(chan struct{})
		go func() {
			defer close(upcalls)
			watchUpcalls(round, ovsdbEndpoint, control, h.Upcalls)
		}()
		err := w.WaitGone(ctx, func(context.Context) error {
			return withClient(ovsdbEndpoint, func(ctx context.Context, cli *ovsdb.Client) error {
				keep, err := kernelBridges(ctx, cli, ovsdbEndpoint)
				if err != nil || len(keep) == 0 {
					return err
				}
				if err := cli.SetFlowRestoreWait(ctx); err != nil {
					return err
				}
				note("ovs-vswitchd is gone; flow-restore-wait set: the next one keeps the kernel datapath's flows")
				return nil
			})
		})
		endRound()
		<-upcalls
		if err != nil {
			return err
		}
	}
}

// upcallsEvery is how often watchUpcalls reads the kernel datapath's
// lookups.
const upcallsEvery = 2 * time.Second

// watchUpcalls tells report whether the ovs-vswitchd that the round
// restored handles its kernel datapath's upcalls. Every upcallsEvery it
// reads the datapath's lookups (unixctl.ReadLookups): two intervals whose
// every upcall was lost (not necessarily in a row: an interval without a
// miss says nothing) report unixctl.ErrNoUpcallHandler, and it goes on
// reading (reported once: the counts in its text change each interval);
// the first interval with an upcall handled reports nil and ends it. A
// reading that fails is reported, and the next one that does not reports
// the state again (the alarm, or nil). Without a kernel bridge of ours it
// asks nothing: ovs-vswitchd's kernel datapath exists only where the
// module is.
func watchUpcalls(ctx context.Context, ovsdbEndpoint endpoint.Endpoint, control string, report func(error)) {
	if report == nil {
		return
	}
	var before map[string]unixctl.Lookups
	var alarm error
	lost, failed := 0, false
	for {
		after, err := lookupsOf(ctx, ovsdbEndpoint, control)
		if ctx.Err() != nil || errors.Is(err, errNoKernelBridge) {
			return
		}
		switch {
		case err != nil:
			report(err)
			failed = true
		case failed:
			report(alarm)
			failed = false
		}
		if err == nil {
			if before != nil {
				switch kernelVerdict(before, after) {
				case unixctl.Handled:
					report(nil)
					return
				case unixctl.AllLost:
					if lost++; lost >= 2 && alarm == nil {
						alarm = fmt.Errorf("%w (%s)", unixctl.ErrNoUpcallHandler, lostLine(before, after))
						report(alarm)
					}
				}
			}
			before = after
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(upcallsEvery):
		}
	}
}

// kernelVerdict is unixctl.Verdict over the kernel datapaths ("system@")
// of two readings: Handled if one handled an upcall, else AllLost if one
// lost every upcall, else NoMiss.
func kernelVerdict(before, after map[string]unixctl.Lookups) unixctl.UpcallVerdict {
	v := unixctl.NoMiss
	for dp, a := range after {
		b, ok := before[dp]
		if !ok || !strings.HasPrefix(dp, "system@") {
			continue
		}
		switch unixctl.Verdict(b, a) {
		case unixctl.Handled:
			return unixctl.Handled
		case unixctl.AllLost:
			v = unixctl.AllLost
		}
	}
	return v
}

// lostLine says what the kernel datapaths of after lost since before.
func lostLine(before, after map[string]unixctl.Lookups) string {
	var parts []string
	for dp, a := range after {
		if b, ok := before[dp]; ok && strings.HasPrefix(dp, "system@") {
			parts = append(parts, fmt.Sprintf("%s: %d of %d upcalls lost in the last %v", dp, a.Lost-b.Lost, a.Missed-b.Missed, upcallsEvery))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

var errNoKernelBridge = errors.New("no kernel bridge of ours")

// lookupsOf reads the lookup counters of ovs-vswitchd's datapaths
// (unixctl.ReadLookups).
func lookupsOf(ctx context.Context, ovsdbEndpoint endpoint.Endpoint, control string) (map[string]unixctl.Lookups, error) {
	var bridges []endpoint.Endpoint
	if err := withClient(ovsdbEndpoint, func(ctx context.Context, cli *ovsdb.Client) (err error) {
		bridges, err = kernelBridges(ctx, cli, ovsdbEndpoint)
		return err
	}); err != nil {
		return nil, fmt.Errorf("reading the kernel datapath's lookups: %w", err)
	}
	if len(bridges) == 0 {
		return nil, errNoKernelBridge
	}
	sock, err := unixctl.Find(bridges[0], control)
	if err != nil {
		return nil, fmt.Errorf("reading the kernel datapath's lookups: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := unixctl.ReadLookups(ctx, sock)
	if err != nil {
		return nil, fmt.Errorf("reading the kernel datapath's lookups: %w", err)
	}
	return l, nil
}

// RestoreDeadline bounds how long Restore waits for the pipeline before it
// clears a flow-restore-wait of ours whatever the state (while an
// ovs-vswitchd runs): a bridge that never answers must not keep the others
// from forwarding for ever.
const RestoreDeadline = 30 * time.Second

// errClearing wraps a failure to clear flow-restore-wait.
var errClearing = errors.New("clearing flow-restore-wait")

// Restore reconciles after an ovs-vswitchd (re)start, the watch's and the
// one-shot `ovs-portmap reconcile`'s alike: it runs passes until one
// succeeds or RestoreDeadline has passed (ovs-vswitchd re-creates its
// bridges after taking its lock, and reconcile fails until every bridge
// answers), and clears a flow-restore-wait of ours once the bridges it
// protects have their pipeline (the pass succeeded, or every
// kernel-datapath bridge of ours is in sync: a dead endpoint elsewhere
// does not hold it), or after the deadline if an ovs-vswitchd runs. One
// that someone else set (no mark of ours) stays. With oneShot, a single
// pass is all when no flag of ours waits to be cleared: the caller retries
// (deploy/node-prep.sh does). It returns the last pass's outcome, or an
// error wrapping errClearing.
func Restore(ctx context.Context, ovsdbEndpoint endpoint.Endpoint, control string, h Hooks, oneShot bool) (Stats, error) {
	deadline := time.Now().Add(RestoreDeadline)
	for {
		st, err := Once(ctx, ovsdbEndpoint, control)
		if h.Pass != nil {
			h.Pass(st, err)
		}
		late := time.Now().After(deadline) || ctx.Err() != nil
		pending, perr := restoreWaitOurs(ovsdbEndpoint)
		if perr != nil && err == nil {
			err = perr
		}
		if pending && (err == nil || kernelInSync(ovsdbEndpoint, st) || late && vswitchdRunning(ovsdbEndpoint)) {
			done, cerr := clearRestoreWait(ovsdbEndpoint)
			if cerr != nil {
				return st, fmt.Errorf("%w: %w", errClearing, cerr)
			}
			if done && h.Note != nil {
				h.Note("flow-restore-wait cleared")
			}
			pending = false
		}
		if err == nil || late || oneShot && !pending {
			return st, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// restoreWaitOurs reports whether a flow-restore-wait of ours is set.
func restoreWaitOurs(ovsdbEndpoint endpoint.Endpoint) (ours bool, err error) {
	err = withClient(ovsdbEndpoint, func(ctx context.Context, cli *ovsdb.Client) error {
		ours, err = cli.RestoreWaitOurs(ctx)
		return err
	})
	return ours, err
}

// vswitchdRunning reports whether an ovs-vswitchd holds its OVSDB lock.
func vswitchdRunning(ovsdbEndpoint endpoint.Endpoint) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := ovsdb.WatchVswitchd(ctx, ovsdbEndpoint)
	if err != nil {
		return false
	}
	defer w.Close()
	running, err := w.Running(ctx)
	return running && err == nil
}

// clearRestoreWait clears a flow-restore-wait of ours; it reports whether
// there was one.
func clearRestoreWait(ovsdbEndpoint endpoint.Endpoint) (cleared bool, err error) {
	err = withClient(ovsdbEndpoint, func(ctx context.Context, cli *ovsdb.Client) error {
		cleared, err = cli.ClearFlowRestoreWait(ctx)
		return err
	})
	return cleared, err
}

// kernelInSync reports whether every kernel-datapath bridge of ours got its
// pipeline in the pass st.
func kernelInSync(ovsdbEndpoint endpoint.Endpoint, st Stats) bool {
	var names []endpoint.Endpoint
	if err := withClient(ovsdbEndpoint, func(ctx context.Context, cli *ovsdb.Client) (err error) {
		names, err = kernelBridges(ctx, cli, ovsdbEndpoint)
		return err
	}); err != nil {
		return false
	}
	for _, n := range names {
		if !st.InSync[n] {
			return false
		}
	}
	return true
}

// withClient runs f with a client of the OVSDB at ep, for at most 10 s.
func withClient(ep endpoint.Endpoint, f func(context.Context, *ovsdb.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, ep)
	if err != nil {
		return err
	}
	defer cli.Close()
	return f(ctx, cli)
}

// kernelBridges returns the OpenFlow endpoints of the bridges of ours
// (tagged ours, or carrying a port of ours) on the kernel datapath, whose
// flows outlive ovs-vswitchd. The userspace datapath's live in ovs-vswitchd
// and die with it: there, flow-restore-wait would keep nothing.
func kernelBridges(ctx context.Context, cli *ovsdb.Client, ovsdbEndpoint endpoint.Endpoint) ([]endpoint.Endpoint, error) {
	bridges, err := cli.KernelBridges(ctx)
	if err != nil {
		return nil, err
	}
	ports, err := cli.OwnedPorts(ctx)
	if err != nil {
		return nil, err
	}
	ours := map[string]bool{}
	for _, p := range ports {
		ours[p.Port.UUID] = true
	}
	var names []endpoint.Endpoint
	for _, br := range bridges {
		if br.ExternalIDs[ovsdb.KeyOwner] == ovsdb.OwnerValue || slices.ContainsFunc(br.Ports, func(u string) bool { return ours[u] }) {
			names = append(names, endpoint.OpenFlow(endpoint.Endpoint{}, ovsdbEndpoint, br.Name))
		}
	}
	return names, nil
}
