// Package limit is the bandwidth limits of one attachment, on its
// ovs-bridge port (ovs-bandwidth's feature; the plugin is pkg/bandwidth):
//
//   - ingress, the traffic to the container, leaves Open vSwitch on the
//     port: a linux-htb QoS row with one queue shapes it there (a tc htb
//     qdisc on the host veth, which both datapaths send through);
//   - egress, the traffic from the container, enters Open vSwitch on the
//     port: an OpenFlow meter (pkg/flows, PriorityBandwidth) drops what is
//     above the rate, before port security and everything else sees it.
//
// The QoS and Queue rows carry the attachment's identity in their
// external_ids and the port records the limits (Record), so that
// DEL and GC find what is theirs and reconcile puts the meter back after an
// ovs-vswitchd restart (the rows survive it, the meter does not).
package limit

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
	"github.com/ovsflow/ovs-cni/pkg/rollback"
)

// Entry is one set of limits, as the reference plugin and the CNI
// conventions' runtimeConfig.bandwidth spell it: rates in bits per second,
// bursts in bits, 0 for no limit; a rate needs its burst and a burst its
// rate. A Record writes them without the zeros.
type Entry struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

// IsZero reports whether no limit is set.
func (e Entry) IsZero() bool {
	return e.IngressRate == 0 && e.IngressBurst == 0 && e.EgressRate == 0 && e.EgressBurst == 0
}

// Ingress and Egress report whether the direction is limited.
func (e Entry) Ingress() bool { return e.IngressRate > 0 && e.IngressBurst > 0 }
func (e Entry) Egress() bool  { return e.EgressRate > 0 && e.EgressBurst > 0 }

// QoSType is the QoS of the ingress limit: tc htb on the port's device.
// Both datapaths send to a veth through the kernel's qdisc (the kernel
// datapath's vport, and the userspace datapath's packet socket alike).
// Open vSwitch's egress-policer would be the userspace alternative, but it
// serves DPDK ports only.
const QoSType = "linux-htb"

// kilo converts bits (per second) to the kilobits of a meter, rounded to
// the nearest and at least 1.
func kilo(bits uint64) uint32 { return uint32(max((bits+500)/1000, 1)) }

// egress is the egress limit of port p, in flow facts.
func egress(p ovsdb.OwnedPort, l Entry) (flows.Bandwidth, error) {
	if p.Interface.OFPort == nil || *p.Interface.OFPort <= 0 {
		return flows.Bandwidth{}, fmt.Errorf("port %q has no ofport", p.Port.Name)
	}
	a := p.Attachment()
	return flows.Bandwidth{Cookie: flows.AttachmentCookie(a.ContainerID, a.IfName), OFPort: uint32(*p.Interface.OFPort),
		RateKbps: kilo(l.EgressRate), BurstKb: kilo(l.EgressBurst)}, nil
}

// qosSpec is the ingress limit of the attachment of network, in OVSDB rows.
func qosSpec(l Entry, network string) *ovsdb.QoSSpec {
	if !l.Ingress() {
		return nil
	}
	rate := strconv.FormatUint(l.IngressRate, 10)
	return &ovsdb.QoSSpec{Type: QoSType, OtherConfig: map[string]string{"max-rate": rate},
		QueueConfig: map[string]string{"max-rate": rate, "burst": strconv.FormatUint(l.IngressBurst, 10)},
		ExternalIDs: map[string]string{ovsdb.KeyNetwork: network}}
}

// Apply puts limits l on port p of network, whose bridge answers OpenFlow
// at target: first the record and the QoS, in one OVSDB transaction
// (reconcile then knows of the meter even if this command dies), then the
// meter and its flow. A failure undoes what went in.
func Apply(ctx context.Context, cli *ovsdb.Client, p ovsdb.OwnedPort, target endpoint.Endpoint, network string, l Entry) (err error) {
	old, hadOld, _ := RecordOf(p)
	rec := Record{OpenFlow: target, Entry: l}
	var bw flows.Bandwidth
	if l.Egress() {
		if bw, err = egress(p, l); err != nil {
			return err
		}
		rec.EgressOFPort = bw.OFPort
	}
	val, err := rec.Value()
	if err != nil {
		return err
	}
	a := p.Attachment()
	if err := cli.SetPortQoS(ctx, a, qosSpec(l, network), map[string]string{record.KeyBandwidth: val}, nil); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			rollback.Do(ctx, func(ctx context.Context) { _ = withdraw(ctx, cli, p, rec) })
		}
	}()
	if !l.Egress() {
		if hadOld && old.EgressRate > 0 {
			return removeEgress(ctx, cli, p, old)
		}
		return nil
	}
	if err := openflow.SetMeters(ctx, target, bw.Meter()); err != nil {
		return fmt.Errorf("egress limit of port %q: %w", p.Port.Name, err)
	}
	if err := openflow.Apply(ctx, target, flows.BandwidthBundle(bw)); err != nil {
		return fmt.Errorf("egress limit of port %q: %w", p.Port.Name, err)
	}
	return nil
}

// removeEgress removes the egress flow and meter of port p (rec: its
// record), if ovs-vswitchd serves the bridge (else they went with it).
func removeEgress(ctx context.Context, cli *ovsdb.Client, p ovsdb.OwnedPort, rec Record) error {
	target := rec.OpenFlow
	if target.IsZero() || !endpoint.Listening(target) {
		return nil
	}
	a := p.Attachment()
	c := flows.AttachmentCookie(a.ContainerID, a.IfName).WithKind(flows.CookieKindBandwidth)
	if err := openflow.DeleteFlows(ctx, target, c.Delete()); err != nil {
		return fmt.Errorf("egress limit of port %q: %w", p.Port.Name, err)
	}
	ofport, err := meterPort(ctx, cli, p, rec)
	if err != nil || ofport == 0 {
		return err
	}
	if err := openflow.DeleteMeters(ctx, target, flows.MeterOf(ofport)); err != nil {
		return fmt.Errorf("egress limit of port %q: %w", p.Port.Name, err)
	}
	return nil
}

// meterPort is the ofport whose meter holds port p's egress limit, 0 for
// none to delete: the Interface's ofport; without one (its veth gone: the
// kernel datapath gives it ofport -1), the recorded one, unless another
// interface of the bridge holds that number now (its meter is that
// interface's, and deleting a meter deletes the flows that use it).
func meterPort(ctx context.Context, cli *ovsdb.Client, p ovsdb.OwnedPort, rec Record) (uint32, error) {
	if p.Interface.OFPort != nil && *p.Interface.OFPort > 0 {
		return uint32(*p.Interface.OFPort), nil
	}
	if rec.EgressOFPort == 0 {
		return 0, nil
	}
	ports, err := cli.BridgePorts(ctx, p.Port.ExternalIDs[ovsdb.KeyBridge])
	if err != nil {
		return 0, fmt.Errorf("egress limit of port %q: %w", p.Port.Name, err)
	}
	for _, q := range ports {
		if q.Interface.OFPort != nil && *q.Interface.OFPort == int(rec.EgressOFPort) {
			return 0, nil
		}
	}
	return rec.EgressOFPort, nil
}

// Withdraw removes the limits of the ports: the egress flow and meter, then
// the QoS rows and the record, in one OVSDB transaction. Ports without
// limits, and limits already gone, are no error.
func Withdraw(ctx context.Context, cli *ovsdb.Client, ports []ovsdb.OwnedPort) error {
	for _, p := range ports {
		rec, ok, err := RecordOf(p)
		if err != nil {
			return err
		}
		if !ok {
			// No record: no meter; rows of an ADD that died are removed
			// all the same.
			rec = Record{}
		}
		if err := withdraw(ctx, cli, p, rec); err != nil {
			return err
		}
	}
	return nil
}

func withdraw(ctx context.Context, cli *ovsdb.Client, p ovsdb.OwnedPort, rec Record) error {
	if err := removeEgress(ctx, cli, p, rec); err != nil {
		return err
	}
	return cli.ClearPortQoS(ctx, []string{record.KeyBandwidth}, p.Attachment())
}

// Feature is the limits as a feature of an attachment (pkg/feature).
type Feature struct{}

// Name names the feature.
func (Feature) Name() string { return "limits" }

// Withdraw withdraws the limits of the ports that record some (Withdraw):
// a port without a record has no rows of ours (ADD writes both in one
// transaction).
func (Feature) Withdraw(ctx context.Context, cli *ovsdb.Client, ports []ovsdb.OwnedPort) error {
	var limited []ovsdb.OwnedPort
	for _, p := range ports {
		if _, ok := p.Port.ExternalIDs[record.KeyBandwidth]; ok {
			limited = append(limited, p)
		}
	}
	return Withdraw(ctx, cli, limited)
}

// Rebuild returns what the record of port p needs to be programmed again:
// the OpenFlow target, the meter and the flows; ok is false when the port
// has no egress limit.
func (Feature) Rebuild(p ovsdb.OwnedPort) (record.Rebuilt, bool) {
	rec, ok, err := RecordOf(p)
	if err != nil || !ok || rec.EgressRate == 0 || rec.EgressBurst == 0 || rec.OpenFlow.IsZero() {
		return record.Rebuilt{}, false
	}
	bw, err := egress(p, rec.Entry)
	if err != nil {
		return record.Rebuilt{}, false
	}
	return record.Rebuilt{Target: rec.OpenFlow, Cookie: bw.Cookie.WithKind(flows.CookieKindBandwidth),
		Flows: flows.BandwidthFlows(bw), Meters: []openflow.MeterBand{bw.Meter()}}, true
}

// ErrLimitMissing says that CHECK found a limit of the config missing or
// different in Open vSwitch.
var ErrLimitMissing = errors.New("limit not in force")

// Check verifies that port p has exactly the limits l: the record, the QoS
// the port uses with its queue, the egress flow and its meter's band.
func Check(ctx context.Context, cli *ovsdb.Client, p ovsdb.OwnedPort, target endpoint.Endpoint, l Entry) error {
	rec, ok, err := RecordOf(p)
	if err != nil {
		return err
	}
	want := Record{OpenFlow: target, Entry: l}
	if l.Egress() && rec.EgressOFPort != 0 && p.Interface.OFPort != nil {
		// The meter's port, as ADD recorded it (records written before
		// it have none).
		want.EgressOFPort = uint32(*p.Interface.OFPort)
	}
	if !ok || rec != want {
		return fmt.Errorf("port %q: %w: recorded %+v, want %+v", p.Port.Name, ErrLimitMissing, rec, want)
	}
	q, err := cli.PortQoS(ctx, p.Attachment())
	if err != nil {
		return err
	}
	if spec := qosSpec(l, ""); spec == nil {
		if len(q.QoS)+len(q.Queues) > 0 || q.PortQoS != nil {
			return fmt.Errorf("port %q: QoS without an ingress limit: %+v", p.Port.Name, q)
		}
	} else if len(q.QoS) != 1 || len(q.Queues) != 1 || q.PortQoS == nil || *q.PortQoS != q.QoS[0].UUID ||
		q.QoS[0].Type != spec.Type || !sameConfig(q.QoS[0].OtherConfig, spec.OtherConfig) || !sameConfig(q.Queues[0].OtherConfig, spec.QueueConfig) {
		return fmt.Errorf("port %q: ingress %w: QoS rows %+v, want one %s QoS %v used by the port with queue %v",
			p.Port.Name, ErrLimitMissing, q, spec.Type, spec.OtherConfig, spec.QueueConfig)
	}
	a := p.Attachment()
	c := flows.AttachmentCookie(a.ContainerID, a.IfName).WithKind(flows.CookieKindBandwidth)
	got, err := openflow.Dump(ctx, target, uint64(c), ^uint64(0))
	if err != nil {
		return err
	}
	var wantFlows []flows.Flow
	if l.Egress() {
		bw, err := egress(p, l)
		if err != nil {
			return err
		}
		wantFlows = flows.BandwidthFlows(bw)
	}
	if err := openflow.Diff(wantFlows, got); err != nil {
		return fmt.Errorf("port %q: egress %w: %w", p.Port.Name, ErrLimitMissing, err)
	}
	if !l.Egress() {
		return nil
	}
	bw, _ := egress(p, l)
	m, ok, err := openflow.DumpMeter(ctx, target, bw.Meter().ID)
	if err != nil {
		return err
	}
	if !ok || m != bw.Meter() {
		return fmt.Errorf("port %q: egress %w: meter %v, want %s", p.Port.Name, ErrLimitMissing, m, bw.Meter())
	}
	return nil
}

// sameConfig reports whether got holds the keys of want with their values
// (ovs-vswitchd adds none, but an operator might).
func sameConfig(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// RemoveOrphans removes the egress flows and meters of attachments that
// have no port of ours any more (their port went without a DEL, and with
// it the record): on every bridge, the bandwidth flows whose attachment
// hash is of no port, and the meters they name, then the egress meters
// (flows.EgressMeterPort) whose ofport is no port of ours on the bridge
// (their flow went first), each bridge's at the OpenFlow endpoint eps
// gives it (Endpoints.OpenFlowOf). An ADD in flight is safe: ovs-bridge
// has inserted its port before ovs-bandwidth runs.
func RemoveOrphans(ctx context.Context, cli *ovsdb.Client, eps cnicmd.Endpoints) error {
	bridges, err := cli.Bridges(ctx)
	if err != nil {
		return err
	}
	if err := removeOrphanFlows(ctx, cli, bridges, eps); err != nil {
		return err
	}
	return removeOrphanMeters(ctx, cli, bridges, eps)
}

// removeOrphanMeters removes the egress meters of bridges whose ofport is
// no port of ours on the bridge. The meters are listed before the ports are
// read: a meter listed was set after its port went in, so a port that is
// not in the later read is gone.
func removeOrphanMeters(ctx context.Context, cli *ovsdb.Client, bridges []ovsdb.Bridge, eps cnicmd.Endpoints) error {
	var errs []error
	meters := map[string][]uint32{}
	for _, br := range bridges {
		target := eps.OpenFlowOf(br.Name)
		if !endpoint.Listening(target) {
			continue
		}
		ids, err := openflow.MeterIDs(ctx, target)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		meters[br.Name] = ids
	}
	if len(meters) == 0 {
		return errors.Join(errs...)
	}
	ports, err := cli.OwnedPorts(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	held := map[string]map[uint32]bool{}
	for _, p := range ports {
		br := p.Port.ExternalIDs[ovsdb.KeyBridge]
		if held[br] == nil {
			held[br] = map[uint32]bool{}
		}
		if p.Interface.OFPort == nil || *p.Interface.OFPort <= 0 {
			// Not numbered yet: its meter, if any, cannot be told
			// from an orphan; the bridge waits for the next sweep.
			meters[br] = nil
			continue
		}
		held[br][uint32(*p.Interface.OFPort)] = true
	}
	for br, ids := range meters {
		var orphans []uint32
		for _, id := range ids {
			if ofport, ok := flows.EgressMeterPort(id); ok && !held[br][ofport] {
				orphans = append(orphans, id)
			}
		}
		errs = append(errs, openflow.DeleteMeters(ctx, eps.OpenFlowOf(br), orphans...))
	}
	return errors.Join(errs...)
}

// removeOrphanFlows removes the bandwidth flows whose attachment hash is of
// no port of ours, and the meters they name.
func removeOrphanFlows(ctx context.Context, cli *ovsdb.Client, bridges []ovsdb.Bridge, eps cnicmd.Endpoints) error {
	ports, err := cli.OwnedPorts(ctx)
	if err != nil {
		return err
	}
	live := map[flows.Cookie]bool{}
	for _, p := range ports {
		a := p.Attachment()
		live[flows.AttachmentCookie(a.ContainerID, a.IfName).WithKind(flows.CookieKindBandwidth)] = true
	}
	kind := flows.CookieSuite | flows.Cookie(flows.CookieKindBandwidth)<<flows.CookieKindShift
	mask := flows.SuiteMask | flows.Cookie(0xff)<<flows.CookieKindShift
	var errs []error
	for _, br := range bridges {
		target := eps.OpenFlowOf(br.Name)
		if !endpoint.Listening(target) {
			continue
		}
		dumped, err := openflow.Dump(ctx, target, uint64(kind), uint64(mask))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range dumped {
			c := flows.Cookie(f.Cookie)
			if live[c] {
				continue
			}
			if err := openflow.DeleteFlows(ctx, target, c.Delete()); err != nil {
				errs = append(errs, err)
				continue
			}
			if len(f.Actions) > 0 {
				if m, ok := f.Actions[0].(openflow.Meter); ok {
					errs = append(errs, openflow.DeleteMeters(ctx, target, m.ID))
				}
			}
		}
	}
	return errors.Join(errs...)
}
