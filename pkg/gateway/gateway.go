// Package gateway keeps the gateway addresses that ovs-bridge puts on a
// bridge's internal interface (isGateway) for as long as an attachment of
// ours needs them, and no longer.
//
// Each such attachment claims its gateways on its own Port row
// (record.KeyGatewayPrefix + "192.0.2.1/24" = "1", the same key as the
// bridge's record), before the address is put on: with the port row
// inserted, or, for dhcp, as soon as the lease names them. The bridge's
// record (what reconcile restores after ovs-vswitchd re-creates the
// interface) and the address are withdrawn when no port claims them any
// more: on the DEL and GC of an attachment, and by every reconcile. Claim,
// then act: the withdrawal takes the address off first, then removes the
// bridge's record in a transaction that fails while a port on the bridge
// claims it, and puts the address back when it failed. An ADD in flight
// reads the bridge's record again after its claim is in, so that either
// the withdrawal sees its claim and fails, or the ADD sees the record gone
// and puts both back after the address went.
package gateway

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// Key is the external_ids key of gateway p, on the bridge (its record)
// and on each port that claims it.
func Key(p netip.Prefix) string { return record.KeyGatewayPrefix + p.String() }

// Claims returns the port keys that claim gateways gws.
func Claims(gws []netip.Prefix) map[string]string {
	m := map[string]string{}
	for _, p := range gws {
		m[Key(p)] = ovsdb.ClaimValue
	}
	return m
}

// claimed returns the gateways port p claims, and whether it claims any
// the way this package does; a port of ours without a claim may predate
// them (see Unused).
func claimed(p ovsdb.OwnedPort) []netip.Prefix {
	return record.Gateways(p.Port.ExternalIDs)
}

// Unused returns the gateways recorded on bridge br that no port of ours on
// it needs. A port needs the gateways it claims; a port that claims none
// (written before ports claimed their gateways, or on a network without
// isGateway) needs those whose subnet holds one of the addresses of its
// port security record, and, with no such record (port security off), it
// may need any: then none is unused.
func Unused(br ovsdb.Bridge, ports []ovsdb.OwnedPort) []netip.Prefix {
	recorded := record.Gateways(br.ExternalIDs)
	need := map[netip.Prefix]bool{}
	for _, p := range ports {
		if b := p.Port.ExternalIDs[ovsdb.KeyBridge]; b != "" && b != br.Name {
			continue
		}
		if gws := claimed(p); len(gws) > 0 {
			for _, g := range gws {
				need[g] = true
			}
			continue
		}
		ps, ok := record.PortSecurityOf(p)
		if !ok || ps.Disabled {
			return nil
		}
		for _, g := range recorded {
			if slices.ContainsFunc(ps.IPs, func(a netip.Addr) bool { return g.Masked().Contains(a) }) {
				need[g] = true
			}
		}
	}
	var out []netip.Prefix
	for _, g := range recorded {
		if !need[g] {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// Withdraw takes the gateways of bridge br that no port needs (Unused,
// with ports as read) off its internal interface and removes their record,
// each record only while no port on the bridge claims it (else its address
// is put back). It returns the gateways withdrawn.
func Withdraw(ctx context.Context, cli *ovsdb.Client, br ovsdb.Bridge, ports []ovsdb.OwnedPort) ([]netip.Prefix, error) {
	unused := Unused(br, ports)
	if len(unused) == 0 {
		return nil, nil
	}
	l, _ := netlink.LinkByName(br.Name) // none: nothing to take off
	var done []netip.Prefix
	var errs []error
	for _, g := range unused {
		had := false
		if l != nil {
			err := netlink.AddrDel(l, addr(g))
			had = err == nil
		}
		if err := cli.WithdrawBridgeKey(ctx, br, Key(g)); err != nil {
			if had {
				_ = netlink.AddrReplace(l, addr(g))
			}
			if !errors.Is(err, ovsdb.ErrUnreachable) && ctx.Err() == nil {
				continue // a port claimed it since the ports were read
			}
			errs = append(errs, err)
			continue
		}
		done = append(done, g)
	}
	return done, errors.Join(errs...)
}

// WithdrawOn is Withdraw for the bridge named name, reading it and the
// ports of ours now. It also returns, after the gateways withdrawn, those
// of gone (the gateways that the ports just deleted claimed) that the
// bridge does not record and no port of ours claims: an ADD that put their
// address and flows on and died before it recorded them. Their address is
// taken off; their flows are the caller's to remove.
func WithdrawOn(ctx context.Context, cli *ovsdb.Client, name string, gone []netip.Prefix) ([]netip.Prefix, error) {
	br, err := cli.Bridge(ctx, name)
	if err != nil || br == nil {
		return nil, err
	}
	recorded := record.Gateways(br.ExternalIDs)
	if len(recorded) == 0 && len(gone) == 0 {
		return nil, nil
	}
	// While another port claims every recorded gateway and those of gone
	// are recorded, nothing is withdrawn: that is asked of OVSDB by the
	// claims alone (AnyOwnedPortWith), not by reading every port's record
	// (about 130 ms of CPU and 20 MB for a DEL beside 500 ports). Only the
	// DEL of a gateway's last claimant reads them all.
	if all, err := claimedStill(ctx, cli, name, recorded, gone); err != nil || all {
		return nil, err
	}
	ports, err := cli.OwnedPorts(ctx)
	if err != nil {
		return nil, err
	}
	done, err := Withdraw(ctx, cli, *br, ports)
	return append(done, unrecorded(*br, ports, gone)...), err
}

// claimedStill reports whether every gateway of gone is among recorded and
// a port of ours on bridge still claims each of recorded. It asks OVSDB
// for every gateway at once: one round trip, whatever their number.
func claimedStill(ctx context.Context, cli *ovsdb.Client, bridge string, recorded, gone []netip.Prefix) (bool, error) {
	for _, g := range gone {
		if !slices.Contains(recorded, g) {
			return false, nil
		}
	}
	sets := make([]map[string]string, len(recorded))
	for i, g := range recorded {
		sets[i] = map[string]string{ovsdb.KeyBridge: bridge, Key(g): ovsdb.ClaimValue}
	}
	found, err := cli.AnyOwnedPortWith(ctx, sets...)
	if err != nil {
		return false, err
	}
	return !slices.Contains(found, false), nil
}

// unrecorded returns the gateways of gone that bridge br does not record
// and no port of ports claims, taking their address off its interface.
// A port claims its gateways before anything is put on for them, so one
// that will need such a gateway is among ports.
func unrecorded(br ovsdb.Bridge, ports []ovsdb.OwnedPort, gone []netip.Prefix) []netip.Prefix {
	recorded := record.Gateways(br.ExternalIDs)
	var out []netip.Prefix
	for _, g := range gone {
		if slices.Contains(recorded, g) || slices.Contains(out, g) || slices.ContainsFunc(ports, func(p ovsdb.OwnedPort) bool {
			return slices.Contains(claimed(p), g)
		}) {
			continue
		}
		out = append(out, g)
	}
	if l, _ := netlink.LinkByName(br.Name); l != nil {
		for _, g := range out {
			_ = netlink.AddrDel(l, addr(g))
		}
	}
	return out
}

// Restore puts the recorded gateway addresses back on the bridge's
// internal interface (ovs-vswitchd re-creates it without them on the
// userspace datapath) and brings it up. It returns how many it put.
func Restore(br ovsdb.Bridge) int {
	addrs := record.Gateways(br.ExternalIDs)
	if len(addrs) == 0 {
		return 0
	}
	l, err := netlink.LinkByName(br.Name)
	if err != nil {
		return 0
	}
	_ = link.SetSysctl("net/ipv6/conf/"+br.Name+"/accept_dad", "0")
	n := 0
	for _, p := range addrs {
		if err := netlink.AddrReplace(l, addr(p)); err == nil {
			n++
		}
	}
	_ = netlink.LinkSetUp(l)
	return n
}

func addr(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
}
