// Package hostport publishes and withdraws the host ports of one attachment:
// the record in OVSDB (pkg/record: the exclusive claims and the resolved
// facts, on the attachment's own Port row), the OpenFlow flows (pkg/flows,
// applied by pkg/openflow as one bundle under the attachment's cookie), and
// stale conntrack entries. Both ovs-portmap and ovs-bridge (for Apache Mesos port mappings) go
// through here, so there is one pipeline and one cookie per attachment.
package hostport

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
	"github.com/ovsflow/ovs-cni/pkg/rollback"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// Publish records and programs the host ports of the plan on its port,
// replacing what an earlier ADD of the same attachment left, as a sequence
// of named steps, each arming the removal of what it made on one rollback
// list, which a failed publish runs last armed first. It installs nothing
// when a claim is held by another attachment (*ovsdb.ClaimedError).
func (plan *Plan) Publish(ctx context.Context, cli *ovsdb.Client) (retErr error) {
	p := &publishing{Plan: plan, ctx: ctx, cli: cli, bridge: plan.Port.Port.ExternalIDs[ovsdb.KeyBridge]}
	defer func() {
		if retErr != nil {
			p.undo.Run(ctx)
		}
		p.reval.Close()
	}()
	if err := p.facts(); err != nil {
		return err
	}
	if err := p.claim(); err != nil {
		return err
	}
	if err := p.program(); err != nil {
		return err
	}
	if err := p.localnet(); err != nil {
		return err
	}
	if err := p.zoneLimits(); err != nil {
		return err
	}
	if err := p.dropStaleMeters(); err != nil {
		return err
	}
	return p.awaitRevalidation()
}

// publishing is one Publish under way: its plan, what its steps found or
// made so far, and the clean-up armed as each step succeeded (undo).
type publishing struct {
	*Plan
	ctx    context.Context
	cli    *ovsdb.Client
	bridge string // the port's bridge

	stale       []uint32             // an earlier ADD's meters that no flow of HostPorts uses
	meters      []openflow.MeterBand // the new-connection meters of HostPorts
	unset       []string             // the port's external_ids the record replaces
	set         map[string]string    // the record, and IDs
	claims      []string             // the record's exclusive claims
	localnetOff bool                 // route_localnet is off on the bridge interface: publish turns it on
	br          *ovsdb.Bridge        // the port's bridge, as the record's transaction read it
	ctl         string               // ovs-vswitchd's control socket ("": not ours to reach)
	ctlErr      error                // the control socket not found
	reval       *unixctl.Revalidation
	nftIn       bool // the node-local nft elements are in
	undo        rollback.List
}

// facts checks the host ports and derives what the steps write: the
// record, the meters, stale and new, and whether loopback host ports need
// route_localnet turned on.
func (p *publishing) facts() error {
	a := p.HostPorts
	// An earlier ADD's meters that no flow of a uses, from the record the
	// port holds before this ADD: removed once the new flows are in.
	p.stale = staleConnMeters(p.Port, a)
	p.meters = flows.ConnMeters(a)
	if err := a.Validate(); err != nil {
		return fmt.Errorf("host ports of port %q: %w", p.Port.Port.Name, err)
	}
	var err error
	if p.unset, p.set, p.claims, err = record.PublishHostPorts(p.Port, p.Target, p.Control, p.Pipeline, a); err != nil {
		return err
	}
	maps.Copy(p.set, p.IDs)
	// Loopback host ports need route_localnet on the bridge interface: if
	// it is off, the record notes on the bridge that this ADD turns it on
	// (after the guards), for uninstall.
	if len(a.Loopback) > 0 {
		on, err := routeLocalnetOn(p.bridge)
		if err != nil {
			return err
		}
		p.localnetOff = !on
	}
	return nil
}

// claim writes the record and its claims on the port (and on the bridge,
// that route_localnet is turned on). Meanwhile it registers the wait that
// makes the host ports effective on return: until the datapath's flow
// cache follows the new flows (unixctl.StartRevalidation), registered
// before the change and collected last. The registration is a round trip
// to ovs-vswitchd, whose control socket is found once for the wait and the
// zone limits. Not found, there is no wait (as with a tcp: target), and
// the zone limits fail once the flows are in (zoneLimits): ovs-vswitchd
// serves the bridge then, so its socket is elsewhere than the config says.
func (p *publishing) claim() error {
	var bridgeSet map[string]string
	if p.localnetOff {
		bridgeSet = map[string]string{record.KeyRouteLocalnet: "1"}
	}
	type recorded struct {
		br  *ovsdb.Bridge
		err error
	}
	recc := make(chan recorded, 1)
	go func() {
		br, err := p.cli.RecordOnBridge(p.ctx, p.Port.Port.UUID, p.unset, p.set, p.claims, p.bridge, bridgeSet)
		recc <- recorded{br, err}
	}()
	p.ctl, p.ctlErr = controlSocket(p.Target, p.Control)
	var revalErr error
	p.reval, revalErr = unixctl.StartRevalidation(p.ctx, p.ctl)
	rec := <-recc
	if rec.err != nil {
		return rec.err
	}
	p.br = rec.br
	p.undo.Arm(func(ctx context.Context) {
		_ = p.cli.Record(ctx, p.Port.Port.UUID, append(p.claims, record.KeyHostPorts), nil, nil)
	})
	return revalErr
}

// program puts in the meters, the flows, then the conntrack entries that
// traffic to the host ports left before there were flows for them
// (flows.ConntrackFlushes), and the node-local nft elements, which go to
// the kernel meanwhile, not to ovs-vswitchd. The flows' removal is armed
// first: a bundle whose connection breaks mid-commit may have been applied,
// and a failure after it (zone limits, nft) must not leave them.
func (p *publishing) program() error {
	a, target := p.HostPorts, p.Target
	p.undo.Arm(func(ctx context.Context) { _ = openflow.DeleteFlows(ctx, target, a.Cookie.Delete()) })
	// The new-connection meters go before the flows that use them (they
	// cannot be part of the bundle); set again, they keep their flows.
	if len(p.meters) > 0 {
		p.undo.Arm(func(ctx context.Context) { _ = openflow.DeleteMeters(ctx, target, meterIDs(p.meters)...) })
		if err := openflow.SetMeters(p.ctx, target, p.meters...); err != nil {
			return err
		}
	}
	nftc := make(chan error, 1)
	go func() { nftc <- applyNodeLocal(p.ctx, nodeLocalRules(a), false) }()
	// The elements' removal is armed now, for once they are in.
	p.undo.Arm(func(ctx context.Context) {
		if p.nftIn {
			_ = applyNodeLocal(ctx, nodeLocalRules(a), true)
		}
	})
	err := openflow.Apply(p.ctx, target, p.Pipeline.Bundle(a), flows.ConntrackFlushes(p.Pipeline, a.Rules)...)
	if flushUnsupported(err) {
		// An ovs-vswitchd before 3.1 (no NXT_CT_FLUSH): the flows are in;
		// stale entries of the host ports expire instead, as on DEL.
		err = nil
	}
	if nerr := <-nftc; nerr == nil {
		p.nftIn = true
	} else if err == nil {
		err = nerr
	}
	return err
}

// localnet turns route_localnet on where facts found it off: the guards
// are in with the localhost map's elements.
func (p *publishing) localnet() error {
	if !p.localnetOff {
		return nil
	}
	return setRouteLocalnet(p.bridge, true)
}

// zoneLimits sets the zone limits through the control socket
// (ensureZoneLimits), which must have been found.
func (p *publishing) zoneLimits() error {
	if p.ctlErr != nil {
		return p.ctlErr
	}
	return ensureZoneLimits(p.ctx, p.cli, p.br, p.ctl, p.Pipeline)
}

// dropStaleMeters removes the meters of an earlier ADD that no new flow
// uses.
func (p *publishing) dropStaleMeters() error {
	if len(p.stale) == 0 {
		return nil
	}
	return openflow.DeleteMeters(p.ctx, p.Target, p.stale...)
}

// awaitRevalidation collects the revalidation wait that claim registered,
// for at most revalidationCap, and notes for the command's log line how
// long it took: mostly ovs-vswitchd's own pace, which starts a revalidation
// round at most every 5 ms (docs/performance.md).
func (p *publishing) awaitRevalidation() error {
	if p.reval == nil {
		return nil
	}
	start := time.Now()
	err := p.reval.WaitAtMost(p.ctx, revalidationCap)
	cnilog.Note("waited %.1fms for ovs-vswitchd's revalidation", float64(time.Since(start).Microseconds())/1000)
	return err
}

// nodeLocalRules are the rules of a that nft serves to the node's own
// processes: those of the node addresses and the loopback ones.
func nodeLocalRules(a flows.HostPorts) []flows.Rule {
	return slices.Concat(a.Rules, a.Loopback)
}

// staleConnMeters are the new-connection meters of the record port p held
// before this ADD that attachment a does not use.
func staleConnMeters(p ovsdb.OwnedPort, a flows.HostPorts) []uint32 {
	old, ok, err := record.HostPortsOf(p)
	if err != nil || !ok || old.ConnRate == 0 {
		return nil
	}
	_, oa, err := old.Facts()
	if err != nil {
		return nil
	}
	oa.OFPort = a.OFPort
	keep := map[uint32]bool{}
	for _, m := range flows.ConnMeters(a) {
		keep[m.ID] = true
	}
	var stale []uint32
	for _, m := range flows.ConnMeters(oa) {
		if !keep[m.ID] {
			stale = append(stale, m.ID)
		}
	}
	return stale
}

// flushUnsupported reports whether err says only that ovs-vswitchd has no
// conntrack flush (openflow.ConntrackFlushError.Unsupported).
func flushUnsupported(err error) bool {
	var fe *openflow.ConntrackFlushError
	return errors.As(err, &fe) && fe.Unsupported()
}

// revalidationCap bounds the wait for the datapath's flow cache. The round a
// flow change starts ends 1-5 ms after the commit; a few waits in a hundred
// (a round the change did not start, see unixctl.StartRevalidation) would
// otherwise last until the periodic round, up to 500 ms. Past the cap the
// flows are in the table and a cached megaflow may still steer the next
// packets the old way for a few milliseconds.
const revalidationCap = 50 * time.Millisecond

// SetZoneLimits bounds the conntrack entries of the pipeline's zones. The
// limits live in the datapath, which ovs-vswitchd's control socket reaches:
// control, or found next to a unix: OpenFlow target (unixctl.Find); with a
// tcp: target (an ovs-vswitchd elsewhere) and no control they are the
// operator's to set.
func SetZoneLimits(ctx context.Context, target endpoint.Endpoint, control string, pl flows.Pipeline) error {
	ctl, err := controlSocket(target, control)
	if err != nil || ctl == "" {
		return err
	}
	return unixctl.SetZoneLimits(ctx, ctl, pl.ZoneLimits())
}

// controlSocket finds the control socket of target's ovs-vswitchd
// (unixctl.Find): "" with no error when it is not ours to reach (a tcp:
// target without "vswitchdControl"): then neither the zone limits nor a
// revalidation wait are ours; "" with the error when it is not found.
func controlSocket(target endpoint.Endpoint, control string) (string, error) {
	if control == "" && target.Network == "tcp" {
		return "", nil
	}
	return unixctl.Find(target, control)
}

// ensureZoneLimits sets the zone limits through ctl ("": not ours to set)
// unless br (the port's bridge, read with the publish's record) records
// that this very ovs-vswitchd has them already: a request to ovs-vswitchd
// waits behind its reconfigurations.
func ensureZoneLimits(ctx context.Context, cli *ovsdb.Client, br *ovsdb.Bridge, ctl string, pl flows.Pipeline) error {
	if ctl == "" {
		return nil
	}
	want := ctl + "/" + strings.Join(unixctl.ZoneLimitArgs(pl.ZoneLimits()), " ")
	if br != nil && br.ExternalIDs[record.KeyZoneLimits] == want {
		return nil
	}
	if err := unixctl.SetZoneLimits(ctx, ctl, pl.ZoneLimits()); err != nil {
		return err
	}
	if br == nil {
		return nil
	}
	return cli.SetBridgeExternalIDs(ctx, br.UUID, map[string]string{record.KeyZoneLimits: want})
}

// Withdraw removes, for every port in ports, everything Publish made for it:
// flows by cookie, conntrack entries, node-local nft elements, then the
// record and claims. A port without a record is a no-op; an OpenFlow socket
// that is gone (ovs-vswitchd stopped, taking its flows with it) is not an
// error.
func Withdraw(ctx context.Context, cli *ovsdb.Client, ports []ovsdb.OwnedPort) error {
	for _, p := range ports {
		if err := withdraw(ctx, cli, p); err != nil {
			return err
		}
	}
	return nil
}

// withdraw withdraws the host ports of port p.
func withdraw(ctx context.Context, cli *ovsdb.Client, p ovsdb.OwnedPort) error {
	rec, ok, err := record.HostPortsOf(p)
	keys := record.HostPortKeys(p)
	if err == nil && ok {
		pl, a, aerr := rec.Facts()
		if aerr != nil {
			return aerr
		}
		if endpoint.Listening(rec.OpenFlow) {
			// A conntrack flush that fails (an old ovs-vswitchd) does not
			// fail DEL: the entries expire.
			err := openflow.DeleteFlows(ctx, rec.OpenFlow, a.Cookie.Delete(), flows.WithdrawFlushes(pl, a.Rules)...)
			if err != nil && !errors.Is(err, openflow.ErrConntrackFlush) {
				return err
			}
			if a.OFPort = recordedOrCurrent(p, a.OFPort); a.ConnRate > 0 {
				if err := openflow.DeleteMeters(ctx, rec.OpenFlow, meterIDs(flows.ConnMeters(a))...); err != nil {
					return err
				}
			}
		}
		if err := applyNodeLocal(ctx, nodeLocalRules(a), true); err != nil {
			return err
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if err := cli.Record(ctx, p.Port.UUID, keys, nil, nil); err != nil && !errors.Is(err, ovsdb.ErrPortGone) {
		return err
	}
	return nil
}

// Feature is host ports as a feature of an attachment (pkg/feature).
type Feature struct{}

// Name names the feature.
func (Feature) Name() string { return "host ports" }

// Withdraw withdraws the host ports of the ports as ovs-portmap's DEL does
// (Withdraw).
func (Feature) Withdraw(ctx context.Context, cli *ovsdb.Client, ports []ovsdb.OwnedPort) error {
	return Withdraw(ctx, cli, ports)
}

// Rebuild returns what the host port record of port p needs to be
// programmed again: the OpenFlow target, the control socket ADD was given
// ("" when none), the pipeline, the attachment with the ofport OVSDB holds
// now and the bridge interface's MAC of now, and the flows and meters they
// make. ok is false when p has no usable record.
func (Feature) Rebuild(p ovsdb.OwnedPort) (record.Rebuilt, bool) {
	rec, ok, err := record.HostPortsOf(p)
	if err != nil || !ok {
		return record.Rebuilt{}, false
	}
	pl, a, err := rec.Facts()
	if err != nil {
		return record.Rebuilt{}, false
	}
	if p.Interface.OFPort != nil && *p.Interface.OFPort > 0 {
		a.OFPort = uint32(*p.Interface.OFPort)
	}
	if !a.NodeMAC.IsZero() {
		// The bridge interface's MAC as it is now (it follows the bridge's
		// NICs unless other_config:hwaddr pins it).
		if m, err := NodeMAC(p.Port.ExternalIDs[ovsdb.KeyBridge]); err == nil {
			a.NodeMAC = m
		}
	}
	return record.Rebuilt{Target: rec.OpenFlow, Cookie: a.Cookie, Flows: pl.AttachmentFlows(a), Meters: flows.ConnMeters(a),
		HostPorts: &a, Pipeline: &pl, Shared: pl.NodeIPFlows(a), Control: rec.VswitchdControl}, true
}

// meterIDs are the IDs of the meters.
func meterIDs(ms []openflow.MeterBand) []uint32 {
	ids := make([]uint32, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	return ids
}

// recordedOrCurrent is the ofport the attachment's meters are numbered
// by: the port's own now (reconcile numbers them so after a restart), else
// the recorded one.
func recordedOrCurrent(p ovsdb.OwnedPort, recorded uint32) uint32 {
	if p.Interface.OFPort != nil && *p.Interface.OFPort > 0 {
		return uint32(*p.Interface.OFPort)
	}
	return recorded
}
