// Package hostport publishes and withdraws the host ports of one attachment:
// the record in OVSDB (the exclusive claims and the resolved facts, on the
// attachment's own Port row), the OpenFlow flows (pkg/flows, applied by
// pkg/openflow as one bundle under the attachment's cookie), and stale
// conntrack entries. Both ovs-portmap and ovs-bridge (for Apache Mesos port mappings) go
// through here, so there is one pipeline and one cookie per attachment.
//
// The record is what survives an ovs-vswitchd restart: flows can be rebuilt
// from OVSDB alone.
package hostport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/dial"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// KeyClaimPrefix starts the external_ids key of every claimed
// (protocol, node IP, host port): "ovsflow.io/claim/tcp/198.51.100.1:8080".
// At most one Port row holds a given key (ovsdb.Client.Record).
const KeyClaimPrefix = "ovsflow.io/claim/"

// ClaimKey is the claim of one rule.
func ClaimKey(r flows.Rule) string {
	return KeyClaimPrefix + r.Protocol.String() + "/" + netip.AddrPortFrom(r.NodeIP, r.HostPort).String()
}

// Record is what ADD resolved, stored as JSON in the port's
// external_ids[ovsdb.KeyPortmap].
type Record struct {
	Version  int    `json:"v"`
	OpenFlow string `json:"openflow"` // the bridge's OpenFlow target
	DNATZone uint16 `json:"dnatZone"`
	SNATZone uint16 `json:"snatZone"`
	// ContainerZone and the limits: 0 in records written before they existed.
	ContainerZone  uint16 `json:"containerZone,omitempty"`
	Limit          uint32 `json:"conntrackLimit,omitempty"`
	ContainerLimit uint32 `json:"containerConntrackLimit,omitempty"`
	Cookie         string `json:"cookie"`
	OFPort         uint32 `json:"ofport"`
	MAC            string `json:"mac"`

	IPv4      netip.Addr   `json:"ipv4,omitzero"`
	IPv6      netip.Addr   `json:"ipv6,omitzero"`
	HairpinV4 netip.Addr   `json:"hairpinV4,omitzero"`
	HairpinV6 netip.Addr   `json:"hairpinV6,omitzero"`
	SNAT      bool         `json:"snat"`
	MasqAll   bool         `json:"masqAll"`
	Rules     []flows.Rule `json:"rules"`
}

// Attachment rebuilds the flow facts from the record.
func (r Record) Attachment() (flows.Pipeline, flows.Attachment, error) {
	var c uint64
	if _, err := fmt.Sscanf(r.Cookie, "0x%x", &c); err != nil {
		return flows.Pipeline{}, flows.Attachment{}, fmt.Errorf("record cookie %q: %w", r.Cookie, err)
	}
	mac, err := net.ParseMAC(r.MAC)
	if err != nil {
		return flows.Pipeline{}, flows.Attachment{}, fmt.Errorf("record MAC %q: %w", r.MAC, err)
	}
	pl := flows.Pipeline{DNATZone: r.DNATZone, SNATZone: r.SNATZone, ContainerZone: r.ContainerZone,
		Limit: r.Limit, ContainerLimit: r.ContainerLimit}
	return pl, flows.Attachment{
		Cookie: flows.Cookie(c), OFPort: r.OFPort, MAC: mac, IPv4: r.IPv4, IPv6: r.IPv6,
		HairpinV4: r.HairpinV4, HairpinV6: r.HairpinV6, Rules: r.Rules, SNAT: r.SNAT, MasqAll: r.MasqAll,
	}, nil
}

// RecordOf reads the record of a port; ok is false when it has none.
func RecordOf(p ovsdb.OwnedPort) (Record, bool, error) {
	raw, ok := p.Port.ExternalIDs[ovsdb.KeyPortmap]
	if !ok {
		return Record{}, false, nil
	}
	var r Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return Record{}, true, fmt.Errorf("portmap record of port %q: %w", p.Port.Name, err)
	}
	return r, true, nil
}

// OpenFlowTarget is where ovs-vswitchd listens for OpenFlow on bridge: the
// override if set, else "<directory of the OVSDB unix socket>/<bridge>.mgmt"
// (ovs-vswitchd puts both in its run directory).
func OpenFlowTarget(override, ovsdbEndpoint, bridge string) string {
	if override != "" {
		return override
	}
	dir := "/var/run/openvswitch"
	if p, ok := strings.CutPrefix(ovsdbEndpoint, "unix:"); ok {
		dir = filepath.Dir(p)
	}
	return "unix:" + filepath.Join(dir, bridge+".mgmt")
}

// ownedKeys lists the record and claim keys currently on the port.
func ownedKeys(p ovsdb.OwnedPort) []string {
	var keys []string
	for k := range p.Port.ExternalIDs {
		if k == ovsdb.KeyPortmap || strings.HasPrefix(k, KeyClaimPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Publish records and programs the attachment's host ports on port p,
// replacing what an earlier ADD of the same attachment left. It installs
// nothing when a claim is held by another attachment (*ovsdb.ClaimedError),
// and removes what it did when a later step fails.
func Publish(ctx context.Context, cli *ovsdb.Client, p ovsdb.OwnedPort, target string, pl flows.Pipeline, a flows.Attachment) (retErr error) {
	if err := a.Validate(); err != nil {
		return fmt.Errorf("host ports of port %q: %w", p.Port.Name, err)
	}
	rec := Record{Version: 1, OpenFlow: target, DNATZone: pl.DNATZone, SNATZone: pl.SNATZone,
		ContainerZone: pl.ContainerZone, Limit: pl.Limit, ContainerLimit: pl.ContainerLimit,
		Cookie: a.Cookie.String(), OFPort: a.OFPort, MAC: a.MAC.String(), IPv4: a.IPv4, IPv6: a.IPv6,
		HairpinV4: a.HairpinV4, HairpinV6: a.HairpinV6, SNAT: a.SNAT, MasqAll: a.MasqAll, Rules: a.Rules}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	claims := make([]string, 0, len(a.Rules))
	for _, r := range a.Rules {
		claims = append(claims, ClaimKey(r))
	}
	if err := cli.Record(ctx, p.Port.UUID, ownedKeys(p), map[string]string{ovsdb.KeyPortmap: string(raw)}, claims); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			Rollback(func(ctx context.Context) {
				_ = cli.Record(ctx, p.Port.UUID, append(claims, ovsdb.KeyPortmap), nil, nil)
			})
		}
	}()
	// Effective on return: wait until the datapath's flow cache follows the
	// new flows (openflow.StartRevalidation), registered before the change
	// and collected last, so that the wait overlaps the nft and conntrack work.
	reval, err := openflow.StartRevalidation(ctx, target)
	if err != nil {
		return err
	}
	defer reval.Close()
	if err := openflow.Apply(ctx, target, pl.Bundle(a)); err != nil {
		return err
	}
	if err := ensureZoneLimits(ctx, cli, p.Port.ExternalIDs[ovsdb.KeyBridge], target, pl); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			Rollback(func(ctx context.Context) { _ = openflow.DeleteFlows(ctx, target, a.Cookie.Delete()) })
		}
	}()
	if err := ApplyNodeLocal(ctx, a.Rules, false); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			Rollback(func(ctx context.Context) { _ = ApplyNodeLocal(ctx, a.Rules, true) })
		}
	}()
	if err := openflow.FlushConntrack(ctx, target, flows.ConntrackFlushes(pl, a.Rules)...); err != nil {
		return err
	}
	return waitRevalidation(ctx, reval)
}

// revalidationCap bounds the wait for the datapath's flow cache. The round a
// flow change starts ends 1-5 ms after the commit; a few waits in a hundred
// (a round the change did not start, see openflow.StartRevalidation) would
// otherwise last until the periodic round, up to 500 ms. Past the cap the
// flows are in the table and a cached megaflow may still steer the next
// packets the old way for a few milliseconds.
const revalidationCap = 50 * time.Millisecond

func waitRevalidation(ctx context.Context, reval *openflow.Revalidation) error {
	wctx, cancel := context.WithTimeout(ctx, revalidationCap)
	defer cancel()
	err := reval.Wait(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded) {
		return nil
	}
	return err
}

// setZoneLimits bounds the conntrack entries of the pipeline's zones. The
// limits live in the datapath, which ovs-vswitchd's control socket reaches:
// it is found next to a unix: OpenFlow target; with a tcp: target (an
// ovs-vswitchd elsewhere) they are the operator's to set.
func setZoneLimits(ctx context.Context, target string, pl flows.Pipeline) error {
	err := unixctl.SetZoneLimits(ctx, target, pl.ZoneLimits())
	if errors.Is(err, unixctl.ErrNoSocket) && strings.HasPrefix(target, "tcp:") {
		return nil
	}
	return err
}

// KeyZoneLimits is the Bridge external_ids key that records the zone limits
// last set for the bridge's ovs-vswitchd: "<its pid>/<zone=limit,...>".
const KeyZoneLimits = "ovsflow.io/zone-limits"

// ensureZoneLimits sets the zone limits unless the bridge records that this
// very ovs-vswitchd has them already: an OVSDB select costs a fraction of a
// request to ovs-vswitchd, which waits behind its reconfigurations.
func ensureZoneLimits(ctx context.Context, cli *ovsdb.Client, bridge, target string, pl flows.Pipeline) error {
	sock, err := unixctl.Socket(target)
	if err != nil {
		return setZoneLimits(ctx, target, pl) // a tcp: target, or the error
	}
	want := sock + "/" + zoneLimitsString(pl)
	br, err := cli.Bridge(ctx, bridge)
	if err != nil {
		return err
	}
	if br != nil && br.ExternalIDs[KeyZoneLimits] == want {
		return nil
	}
	if err := setZoneLimits(ctx, target, pl); err != nil {
		return err
	}
	if br == nil {
		return nil
	}
	return cli.SetBridgeExternalIDs(ctx, br.UUID, map[string]string{KeyZoneLimits: want})
}

func zoneLimitsString(pl flows.Pipeline) string {
	l := pl.ZoneLimits()
	zones := slices.Sorted(maps.Keys(l))
	parts := make([]string, len(zones))
	for i, z := range zones {
		parts[i] = fmt.Sprintf("zone=%d,limit=%d", z, l[z])
	}
	return strings.Join(parts, " ")
}

// Withdraw removes everything Publish made for port p: flows by cookie,
// conntrack entries, node-local nft elements, then the record and claims. A port without a record is
// a no-op; an OpenFlow socket that is gone (ovs-vswitchd stopped, taking its
// flows with it) is not an error.
//
// swept is the OpenFlow target on which the caller has already removed every
// flow of the attachment (ovs-bridge removing the port); "" when it has not
// (ovs-portmap, which removes only its own).
func Withdraw(ctx context.Context, cli *ovsdb.Client, p ovsdb.OwnedPort, swept string) error {
	rec, ok, err := RecordOf(p)
	keys := ownedKeys(p)
	if err == nil && ok {
		pl, a, aerr := rec.Attachment()
		if aerr != nil {
			return aerr
		}
		if rec.OpenFlow == swept || reachable(rec.OpenFlow) {
			if rec.OpenFlow != swept {
				if err := openflow.DeleteFlows(ctx, rec.OpenFlow, a.Cookie.Delete()); err != nil {
					return err
				}
			}
			_ = openflow.FlushConntrack(ctx, rec.OpenFlow, flows.ConntrackFlushes(pl, a.Rules)...)
		}
		if err := ApplyNodeLocal(ctx, a.Rules, true); err != nil {
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

// reachable reports whether ovs-vswitchd listens on target. A socket file it
// left when it died refuses connections, and a missing one is gone: its
// flows died with it. Any other failure (a full backlog, a slow accept)
// counts as reachable, so that the real call reports it.
func reachable(target string) bool {
	p, ok := strings.CutPrefix(target, "unix:")
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := dial.Dial(ctx, "unix", p)
	if err != nil {
		return !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT)
	}
	c.Close()
	return true
}

// Rollback runs the clean-up of a failed ADD with a bounded context of its
// own: the command's context may have expired, and clean-up must not hang.
func Rollback(f func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f(ctx)
}

// PortSecRecord is ovs-bridge's record of a port's table-0 flows (port
// security and VLAN isolation), stored as JSON in the port's
// external_ids[ovsdb.KeyPortSec]: what the flows need besides the ofport,
// which reconcile reads from OVSDB.
type PortSecRecord struct {
	OpenFlow string       `json:"openflow"`
	MAC      string       `json:"mac"`
	IPs      []netip.Addr `json:"ips,omitempty"`
	L2Only   bool         `json:"l2only,omitempty"`
	// AllowRouter and AllowDHCPServer are the network's allowRouter and
	// allowDHCPServer.
	AllowRouter     bool `json:"allowRouter,omitempty"`
	AllowDHCPServer bool `json:"allowDHCPServer,omitempty"`
	// VLAN is how the port's VLAN is configured (flows.PortVLAN).
	VLAN flows.PortVLAN `json:"vlan,omitempty"`
	// Disabled: portSecurity is off, only VLAN isolation is recorded.
	Disabled bool `json:"disabled,omitempty"`
}

// PortSecurity returns the flow facts of the record for ofport and cookie c.
// The link-local address is the EUI-64 one of the MAC, which ovs-bridge pins
// on the container interface.
func (r PortSecRecord) PortSecurity(c flows.Cookie, ofport uint32) (flows.PortSecurity, error) {
	mac, err := net.ParseMAC(r.MAC)
	if err != nil {
		return flows.PortSecurity{}, fmt.Errorf("port security record MAC %q: %w", r.MAC, err)
	}
	return flows.PortSecurity{Cookie: c, OFPort: ofport, MAC: mac, IPs: r.IPs, LinkLocal: flows.LinkLocalOf(mac),
		L2Only: r.L2Only, AllowRouter: r.AllowRouter, AllowDHCPServer: r.AllowDHCPServer, VLAN: r.VLAN, Disabled: r.Disabled}, nil
}

// PortSecRecordOf reads the port security record of a port.
func PortSecRecordOf(p ovsdb.OwnedPort) (PortSecRecord, bool) {
	var r PortSecRecord
	raw, ok := p.Port.ExternalIDs[ovsdb.KeyPortSec]
	if !ok || json.Unmarshal([]byte(raw), &r) != nil {
		return r, false
	}
	return r, true
}
