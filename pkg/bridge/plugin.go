package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/portsec"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// ipamSection is the "ipam" object of a network config, compacted ("" if
// there is none).
func ipamSection(stdin []byte) string {
	var nc struct {
		IPAM json.RawMessage `json:"ipam"`
	}
	var b bytes.Buffer
	if json.Unmarshal(stdin, &nc) != nil || len(nc.IPAM) == 0 || json.Compact(&b, nc.IPAM) != nil {
		return ""
	}
	return b.String()
}

// releaseWith is the IPAM plugin and network config that release the
// addresses of ports: the "ipam" section their ADD recorded (record.KeyIPAM)
// in place of the current config's, else the current config.
func releaseWith(conf *NetConf, stdin []byte, ports []ovsdb.OwnedPort) (string, []byte, error) {
	for _, p := range ports {
		raw := p.Port.ExternalIDs[record.KeyIPAM]
		if raw == "" || raw == ipamSection(stdin) {
			continue
		}
		var typ struct {
			Type string `json:"type"`
		}
		var nc map[string]json.RawMessage
		if err := json.Unmarshal([]byte(raw), &typ); err != nil || typ.Type == "" {
			return "", nil, fmt.Errorf("port %q: recorded ipam %q: no type", p.Port.Name, raw)
		}
		if err := json.Unmarshal(stdin, &nc); err != nil {
			return "", nil, fmt.Errorf("network config: %w", err)
		}
		nc["ipam"] = json.RawMessage(raw)
		b, err := json.Marshal(nc)
		if err != nil {
			return "", nil, fmt.Errorf("network config with the recorded ipam: %w", err)
		}
		return typ.Type, b, nil
	}
	return conf.IPAM.Type, stdin, nil
}

// notOwnNetNS refuses a CNI_NETNS that is the plugin's own network
// namespace (the node's): the container end would land in the node. The CNI
// library checks this only after the plugin ran.
func notOwnNetNS(path string) error {
	var own, target syscall.Stat_t
	if syscall.Stat("/proc/thread-self/ns/net", &own) != nil || syscall.Stat(path, &target) != nil {
		return nil // ns.GetNS reports a bad path
	}
	if own.Dev == target.Dev && own.Ino == target.Ino {
		return cnierr.New(cnierr.Environment,
			fmt.Sprintf("CNI_NETNS %q is the plugin's own network namespace, not a container's", path), "")
	}
	return nil
}

// macError gives a MAC already used on the node the code of a bad "mac".
func macError(err error) error {
	var inUse *ovsdb.MACInUseError
	if errors.As(err, &inUse) {
		return invalid(`"mac" %s: %v`, inUse.MAC, err)
	}
	return err
}

// portVLAN is how the port's VLAN is configured, for the port flows.
func portVLAN(conf *NetConf) flows.PortVLAN {
	switch {
	case conf.VLAN != nil:
		return flows.Access
	case len(conf.Trunks) > 0:
		return flows.Trunk
	}
	return flows.Untagged
}

// withPortSecRecord puts rec, if it records anything, into the external_ids
// the port is inserted with.
func withPortSecRecord(spec ovsdb.PortSpec, rec record.PortSecurity) error {
	raw, ok, err := rec.Value()
	if ok && err == nil {
		spec.ExternalIDs[record.KeyPortSecurity] = raw
	}
	return err
}

// requestedOFPort refuses a port that ovs-vswitchd numbered otherwise than
// "ofport_request" asked (another interface held the number unrequested).
func requestedOFPort(conf *NetConf, got int) error {
	if conf.OFPortRequest != nil && got != *conf.OFPortRequest {
		return ofportTaken(conf)
	}
	return nil
}

func ofportTaken(conf *NetConf) error {
	return invalid(`"ofport_request" %d: another interface on the node requests or holds it`, *conf.OFPortRequest)
}

// cutOff makes the ports drop everything they receive, then removes all
// their flows, in one bundle per bridge: a tombstone flow per port
// (flows.TombstoneBundle) outlives the port by a few seconds, so that nothing
// passes between its flows going and ovs-vswitchd removing it, and DEL need
// not wait for that. Without ovs-vswitchd (no OpenFlow socket) nothing is
// forwarded anyway.
func cutOff(ctx context.Context, conf *NetConf, ports []ovsdb.OwnedPort) error {
	byTarget := map[endpoint.Endpoint]openflow.Bundle{}
	for _, p := range ports {
		br := p.Port.ExternalIDs[ovsdb.KeyBridge]
		if br == "" {
			br = conf.Bridge
		}
		target := portsec.Target(p, conf.Endpoints.OpenFlowOf(br))
		if p.Interface.OFPort != nil && *p.Interface.OFPort > 0 {
			byTarget[target] = append(byTarget[target], flows.TombstoneBundle(uint32(*p.Interface.OFPort))...)
		}
		a := p.Attachment()
		byTarget[target] = append(byTarget[target], flows.AttachmentCookie(a.ContainerID, a.IfName).AttachmentDelete())
	}
	for target, b := range byTarget {
		if err := openflow.Apply(ctx, target, b); err != nil && !openflow.NotServed(err) {
			return err
		}
	}
	return nil
}

// addressError gives a lost address claim (record.AddressClaims) code 7,
// naming the address and its holder.
func addressError(err error) error {
	var claimed *ovsdb.ClaimedError
	if !errors.As(err, &claimed) {
		return err
	}
	bridge, a, ok := record.AddressOfKey(claimed.Key)
	if !ok {
		return err
	}
	what := "the address"
	if strings.HasPrefix(claimed.Key, record.KeyAllowedAddressPrefix) {
		what = `in the "allowedAddresses"`
	}
	return cnierr.Wrap(cnierr.Config, fmt.Sprintf("address %s on bridge %q is %s of attachment %s (port %q)",
		a, bridge, what, claimed.Holder, claimed.Port), err)
}

// portSecTarget is the OpenFlow target of the port flows, recorded with
// them.
func portSecTarget(conf *NetConf) endpoint.Endpoint {
	return conf.Endpoints.OpenFlowOf(conf.Bridge)
}

// bridgeAddrs are the addresses the bridge holds itself: those of its
// internal interface (the node's, and the gateways put there), the
// gateways recorded on its row (isGateway), and the gateways IPAM gave in
// result.
func bridgeAddrs(br *ovsdb.Bridge, result *current.Result) map[netip.Addr]bool {
	has := map[netip.Addr]bool{}
	for _, ipc := range result.IPs {
		if g, ok := netip.AddrFromSlice(ipc.Gateway); ok {
			has[g.Unmap()] = true
		}
	}
	for k := range br.ExternalIDs {
		if s, ok := strings.CutPrefix(k, record.KeyGatewayPrefix); ok {
			if p, err := netip.ParsePrefix(s); err == nil {
				has[p.Addr().Unmap()] = true
			}
		}
	}
	// The interface exists once ovs-vswitchd has made it; until then it
	// has no address.
	if l, err := netlink.LinkByName(br.Name); err == nil {
		addrs, _ := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				has[ip.Unmap()] = true
			}
		}
	}
	return has
}

// onPort is ps on another ofport.
func onPort(ps flows.PortSecurity, ofport int) flows.PortSecurity {
	ps.OFPort = uint32(ofport)
	return ps
}

func ipList(r *current.Result) []string {
	out := make([]string, 0, len(r.IPs))
	for _, ip := range r.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}

// gateways returns the IPAM gateways of result, each with its subnet's
// prefix: the addresses isGateway puts on the bridge.
func gateways(result *current.Result) []netip.Prefix {
	var gws []netip.Prefix
	for _, ipc := range result.IPs {
		g, ok := netip.AddrFromSlice(ipc.Gateway)
		if !ok {
			continue
		}
		bits, _ := ipc.Address.Mask.Size()
		if p := netip.PrefixFrom(g.Unmap(), bits); p.IsValid() && !slices.Contains(gws, p) {
			gws = append(gws, p)
		}
	}
	return gws
}

// hasAddrs reports whether l has every address in want, with its prefix.
func hasAddrs(l netlink.Link, want []*netlink.Addr) bool {
	have, err := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return false
	}
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.IPNet.IP.Equal(w.IPNet.IP) && h.IPNet.Mask.String() == w.IPNet.Mask.String() {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
