// Package portsec applies the table-0 flows of one ovs-bridge port (port
// security and VLAN isolation, built by pkg/flows from the port's
// flows.PortSecurity), records those facts on the port
// (record.PortSecurity), and rebuilds the flows from that record
// (Feature, for reconcile, CHECK, trace).
package portsec

import (
	"context"
	"net/netip"
	"slices"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// Apply installs the port's table-0 flows for ps (and table 0's NORMAL on
// a fail_mode=secure bridge, and the flows of its gateways on LOCAL) on the bridge at target in one bundle, and,
// given portUUID, first records them on the port for reconcile and claims
// the addresses of ps on bridge (record.AddressClaims), in one transaction
// that fails with an *ovsdb.ClaimedError, before any flow goes in, when
// another port holds one. The bundle first clears every flow of the suite
// on ofport (flows.ClearPort). While ovs-vswitchd does not serve the
// bridge (down, restarting) it tries again until ctx ends, then fails with
// openflow.ErrTimeout (CNI code 11), as it does when ovs-vswitchd does not
// answer.
//
// Unlike ovs-portmap's host ports it does not wait for the datapath's flow
// cache to follow (unixctl.StartRevalidation): the flows match the new
// port's own ingress, which no megaflow cached before the port existed can
// carry.
func Apply(ctx context.Context, cli *ovsdb.Client, target endpoint.Endpoint, ps flows.PortSecurity, secure bool, bridge, portUUID string, recordedGateways []netip.Prefix) error {
	// No flows of ours on this port, only what an earlier one left to
	// clear: nothing to record either, but the addresses are still claimed.
	none := len(flows.PortSecurityFlows(ps)) == 0 && !secure
	if portUUID != "" {
		raw, ok, err := record.NewPortSecurity(target, ps).Value()
		if err != nil {
			return err
		}
		claims, excludes, allowed := record.AddressClaims(bridge, ps)
		set := map[string]string{}
		for _, k := range allowed {
			set[k] = ovsdb.ClaimValue
		}
		var unset []string
		if ok && !none {
			set[record.KeyPortSecurity] = raw
			unset = append(unset, record.KeyPortSecurity)
		}
		if err := cli.Claim(ctx, portUUID, unset, set, claims, excludes); err != nil {
			return err
		}
	}
	var base []flows.Flow
	if secure {
		base = flows.BaseFlows()
	}
	// The flows of the port's gateways on LOCAL (shared by the ports of
	// its network) go in with its own, again, for the gateways the bridge
	// records (recordedGateways): a withdrawal removes them with the
	// record. Those of a gateway not recorded yet go in once it is
	// (ovs-bridge's setupGateway): here, before the port exists, an ADD
	// killed after the bundle would leave them to no one.
	for _, g := range ps.Gateways {
		if slices.Contains(recordedGateways, g) {
			base = append(base, flows.GatewayFlows(g)...)
		}
	}
	clear := flows.ClearPort(ps.OFPort)
	if none {
		return openflow.ApplyServed(ctx, target, openflow.Bundle{clear})
	}
	return openflow.ApplyServed(ctx, target, append(openflow.Bundle{clear}, flows.PortSecurityBundle(ps, base...)...))
}

// Feature is port security as a feature of an attachment (pkg/feature).
type Feature struct{}

// Name names the feature.
func (Feature) Name() string { return "port security" }

// Rebuild returns the port security flows recorded for port p, with the
// ofport OVSDB holds now, their cookie and the OpenFlow target; ok is false
// when p has no record or no ofport.
func (Feature) Rebuild(p ovsdb.OwnedPort) (record.Rebuilt, bool) {
	rec, ok := record.PortSecurityOf(p)
	if !ok || p.Interface.OFPort == nil || *p.Interface.OFPort <= 0 {
		return record.Rebuilt{}, false
	}
	c := flows.AttachmentCookie(p.Attachment().ContainerID, p.Attachment().IfName)
	f := rec.Facts(c, uint32(*p.Interface.OFPort))
	return record.Rebuilt{Target: rec.OpenFlow, Cookie: c.WithKind(flows.CookieKindPortSecurity),
		Flows: flows.PortSecurityFlows(f), PortSecurity: &f}, true
}

// Withdraw has nothing to do: the flows of port security go with the
// attachment's cookie and its record with the port, both ovs-bridge's
// DEL's own steps.
func (Feature) Withdraw(context.Context, *ovsdb.Client, []ovsdb.OwnedPort) error { return nil }

// Target is the OpenFlow target recorded for port p's flows, or fallback
// when it has no record.
func Target(p ovsdb.OwnedPort, fallback endpoint.Endpoint) endpoint.Endpoint {
	if rec, ok := record.PortSecurityOf(p); ok {
		return rec.OpenFlow
	}
	return fallback
}
