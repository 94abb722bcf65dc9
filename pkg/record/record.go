// Package record is the OVSDB schema of an attachment beyond its identity:
// the external_ids keys the plugins write on their Port rows (the host port
// record, its exclusive claims, the port security record; the limits'
// record is pkg/limit's) and on Bridge rows (the gateway addresses, the
// zone limits set), with the JSON records they hold, and what a feature's
// record rebuilds (Rebuilt). The identity keys (owner, container ID, ifname, netns, network,
// bridge, MAC), by which pkg/ovsdb finds the rows, are declared there.
//
// The records are what survives an ovs-vswitchd restart: the flows of every
// attachment can be rebuilt from OVSDB alone (pkg/reconcile).
package record

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// Keys of the Port rows.
const (
	// KeyHostPorts holds the HostPorts record (JSON) of ovs-portmap, or of
	// ovs-bridge for Apache Mesos port mappings.
	KeyHostPorts = "ovsflow.io/portmap"
	// KeyPortSecurity holds ovs-bridge's PortSecurity record (JSON).
	KeyPortSecurity = "ovsflow.io/portsec"
	// KeyAllowedAddresses ("true") marks a port whose record allows
	// further source addresses (allowedAddresses), so that an ADD finds
	// the few it must not overlap with one select.
	KeyAllowedAddresses = "ovsflow.io/allowed-addresses"
	// KeyClaimPrefix starts the key of every claimed (protocol, node IP,
	// host port): "ovsflow.io/claim/tcp/198.51.100.1:8080". At most one Port
	// row holds a given key (ovsdb.Client.Record).
	KeyClaimPrefix = "ovsflow.io/claim/"
	// KeyPod holds "NAMESPACE/NAME" of the Kubernetes pod of the
	// attachment, when the runtime passed K8S_POD_NAMESPACE and
	// K8S_POD_NAME in CNI_ARGS: how the node tools and the metrics name
	// it.
	KeyPod = "ovsflow.io/pod"
	// KeyBandwidth holds ovs-bandwidth's record of the limits (JSON,
	// pkg/limit's Record).
	KeyBandwidth = "ovsflow.io/bandwidth"
	// KeyIPAM holds the "ipam" section (JSON) of the network config that
	// ovs-bridge's ADD allocated the addresses with: its DEL releases them
	// with that one, not with the current config's, whose IPAM type or
	// store may have changed since.
	KeyIPAM = "ovsflow.io/ipam"
	// KeyAddressPrefix starts the claim of an address an attachment sends
	// from as its own on a bridge: its IPAM addresses and its link-local
	// one ("ovsflow.io/ip/br0/192.0.2.10"). At most one Port row holds a
	// given key, and none while another port allows the address
	// (KeyAllowedAddressPrefix). Ports recorded before the claims existed
	// hold none.
	KeyAddressPrefix = "ovsflow.io/ip/"
	// KeyAllowedAddressPrefix starts the mark of a single address that a
	// port's allowedAddresses allow on a bridge
	// ("ovsflow.io/allowed-ip/br0/192.0.2.250"): several ports may hold
	// it (a VIP they take over from each other), none while another port
	// claims the address as its own. A range (an IPv4 prefix shorter than
	// /32) has no key: ovs-bridge checks it by reading the records.
	KeyAllowedAddressPrefix = "ovsflow.io/allowed-ip/"
)

// AddressKey is the claim of address a as an attachment's own on bridge.
func AddressKey(bridge string, a netip.Addr) string {
	return KeyAddressPrefix + bridge + "/" + a.Unmap().String()
}

// AllowedAddressKey is the mark of address a allowed on bridge.
func AllowedAddressKey(bridge string, a netip.Addr) string {
	return KeyAllowedAddressPrefix + bridge + "/" + a.Unmap().String()
}

// AddressOfKey splits an AddressKey or an AllowedAddressKey into its bridge
// and address; ok is false for any other key.
func AddressOfKey(k string) (bridge string, a netip.Addr, ok bool) {
	rest, found := strings.CutPrefix(k, KeyAddressPrefix)
	if !found {
		if rest, found = strings.CutPrefix(k, KeyAllowedAddressPrefix); !found {
			return "", netip.Addr{}, false
		}
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", netip.Addr{}, false
	}
	a, err := netip.ParseAddr(rest[i+1:])
	return rest[:i], a, err == nil
}

// AddressClaims are the keys that make the addresses of port security
// facts ps exclusive on bridge: claims, that the port takes alone (its own
// addresses and its link-local one); excludes, that no other port may hold
// (the marks of those addresses as allowed, and the claims of its allowed
// single addresses); allowed, the marks it holds (with ovsdb.ClaimValue)
// for its allowed single addresses. An allowed address that is also its own
// is only claimed. A port without addresses (L2 only) claims nothing.
func AddressClaims(bridge string, ps flows.PortSecurity) (claims, excludes, allowed []string) {
	if ps.L2Only {
		return nil, nil, nil
	}
	own := map[netip.Addr]bool{}
	for _, a := range append(slices.Clone(ps.IPs), ps.LinkLocal) {
		if a = a.Unmap(); a.IsValid() && !own[a] {
			own[a] = true
			claims = append(claims, AddressKey(bridge, a))
			excludes = append(excludes, AllowedAddressKey(bridge, a))
		}
	}
	for _, p := range ps.Allowed {
		if a := p.Addr().Unmap(); p.IsSingleIP() && !own[a] {
			allowed = append(allowed, AllowedAddressKey(bridge, a))
			excludes = append(excludes, AddressKey(bridge, a))
		}
	}
	return claims, excludes, allowed
}

// PodOf returns "NAMESPACE/NAME" from CNI_ARGS ("K1=V1;K2=V2"), "" when
// either is missing or is not a Kubernetes name (a namespace is a DNS
// label, a pod name a DNS subdomain): the value ends up in metric labels
// and node tool output, so nothing else is recorded.
func PodOf(cniArgs string) string {
	var ns, name string
	for _, kv := range strings.Split(cniArgs, ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "K8S_POD_NAMESPACE":
			ns = v
		case "K8S_POD_NAME":
			name = v
		}
	}
	if !dnsName(ns, 63, false) || !dnsName(name, 253, true) {
		return ""
	}
	return ns + "/" + name
}

// dnsName reports whether s is a DNS label (RFC 1123: lower-case
// alphanumerics and '-', alphanumeric at both ends) of at most max
// characters, or with dots a subdomain of such labels.
func dnsName(s string, max int, dots bool) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if !dots && label != s || label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Keys of the Bridge rows.
const (
	// KeyGatewayPrefix starts the keys that record the gateway addresses
	// ovs-bridge put on the bridge's internal interface
	// ("ovsflow.io/gateway/192.0.2.1/24" = "1"), so that reconcile can
	// restore them when ovs-vswitchd re-creates the interface.
	KeyGatewayPrefix = "ovsflow.io/gateway/"
	// KeyZoneLimits records the zone limits last set for the bridge's
	// ovs-vswitchd: "<its control socket>/<zone=limit,...>".
	KeyZoneLimits = "ovsflow.io/zone-limits"
	// KeyRouteLocalnet records that ovs-portmap turned route_localnet on
	// for the bridge's internal interface (pkg/hostport, loopback host
	// ports): uninstall turns it off again.
	KeyRouteLocalnet = "ovsflow.io/route-localnet"
)

// ClaimKey is the claim of one rule.
func ClaimKey(r flows.Rule) string {
	return KeyClaimPrefix + r.Protocol.String() + "/" + netip.AddrPortFrom(r.NodeIP, r.HostPort).String()
}

// HostPorts is what ADD resolved for the host ports of an attachment, stored
// as JSON in the port's external_ids[KeyHostPorts]: the facts of its flows,
// the pipeline they run through, and where ovs-vswitchd answers. The JSON is
// that of records written before it embedded the facts
// (testdata/hostports_*.json).
type HostPorts struct {
	Version  int               `json:"v"`
	OpenFlow endpoint.Endpoint `json:"openflow"` // the bridge's OpenFlow target
	// VswitchdControl is the control socket of ovs-vswitchd ADD was given
	// ("": found as unixctl.Find finds it).
	VswitchdControl string `json:"vswitchdControl,omitempty"`
	flows.Pipeline
	flows.HostPorts
}

// PublishHostPorts is the change of port p's external_ids that records the
// host ports of attachment a on the bridge at target (ovsdb.Client.Record's
// arguments): the keys of an earlier record and its claims to remove, the
// record to set, and the claims to take.
func PublishHostPorts(p ovsdb.OwnedPort, target endpoint.Endpoint, control string, pl flows.Pipeline, a flows.HostPorts) (unset []string, set map[string]string, claims []string, err error) {
	raw, err := json.Marshal(HostPorts{Version: 1, OpenFlow: target, VswitchdControl: control, Pipeline: pl, HostPorts: a})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("host port record of port %q: %w", p.Port.Name, err)
	}
	claims = make([]string, 0, len(a.Rules)+len(a.Loopback))
	for _, r := range slices.Concat(a.Rules, a.Loopback) {
		claims = append(claims, ClaimKey(r))
	}
	return HostPortKeys(p), map[string]string{KeyHostPorts: string(raw)}, claims, nil
}

// Facts returns the flow facts of the record. It fails on none: the record
// decodes into them (HostPortsOf).
func (r HostPorts) Facts() (flows.Pipeline, flows.HostPorts, error) {
	return r.Pipeline, r.HostPorts, nil
}

// NodeIPs lists the node addresses the recorded rules use.
func (r HostPorts) NodeIPs() []netip.Addr {
	var out []netip.Addr
	for _, a := range []netip.Addr{r.HairpinV4, r.HairpinV6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	for _, rule := range r.Rules {
		if !slices.Contains(out, rule.NodeIP) {
			out = append(out, rule.NodeIP)
		}
	}
	return out
}

// HostPortsOf reads the host port record of a port; ok is false when it has
// none.
func HostPortsOf(p ovsdb.OwnedPort) (HostPorts, bool, error) {
	raw, ok := p.Port.ExternalIDs[KeyHostPorts]
	if !ok {
		return HostPorts{}, false, nil
	}
	var r HostPorts
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return HostPorts{}, true, fmt.Errorf("portmap record of port %q: %w", p.Port.Name, err)
	}
	return r, true, nil
}

// HostPortKeys lists the host port record and claim keys on the port.
func HostPortKeys(p ovsdb.OwnedPort) []string {
	var keys []string
	for k := range p.Port.ExternalIDs {
		if k == KeyHostPorts || strings.HasPrefix(k, KeyClaimPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// PortSecurity is ovs-bridge's record of a port's table-0 flows (port
// security and VLAN isolation), stored as JSON in the port's
// external_ids[KeyPortSecurity]: their facts and the bridge's OpenFlow
// target. The facts leave out what the port gives again: the ofport, which
// reconcile reads from OVSDB, the cookie, which the port's identity gives,
// and the link-local address, which is the EUI-64 one of the MAC. Made by
// NewPortSecurity, read back by Facts; the JSON is the same as that of
// records written before it was derived from the facts
// (testdata/portsec_*.json).
type PortSecurity struct {
	OpenFlow endpoint.Endpoint `json:"openflow"`
	flows.PortSecurity
}

// NewPortSecurity is the record of ps, whose flows go to the bridge at
// target.
func NewPortSecurity(target endpoint.Endpoint, ps flows.PortSecurity) PortSecurity {
	ps.Cookie, ps.OFPort, ps.LinkLocal = 0, 0, netip.Addr{}
	return PortSecurity{OpenFlow: target, PortSecurity: ps}
}

// Facts returns the flow facts of the record for ofport and cookie c. The
// link-local address is the EUI-64 one of the MAC, which ovs-bridge pins on
// the container interface.
func (r PortSecurity) Facts(c flows.Cookie, ofport uint32) flows.PortSecurity {
	f := r.PortSecurity
	f.Cookie, f.OFPort, f.LinkLocal = c, ofport, flows.LinkLocalOf(r.MAC.HardwareAddr())
	return f
}

// Value is the external_ids value of the record, when it has flows to
// record (not with port security off, no VLAN and no gateway).
func (r PortSecurity) Value() (raw string, ok bool, err error) {
	if r.Disabled && r.VLAN == flows.Untagged && len(r.Gateways) == 0 {
		return "", false, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", false, fmt.Errorf("port security record: %w", err)
	}
	return string(b), true, nil
}

// PortSecurityOf reads the port security record of a port; ok is false
// when it has none, or one that does not decode or names no 48-bit MAC.
func PortSecurityOf(p ovsdb.OwnedPort) (PortSecurity, bool) {
	var r PortSecurity
	raw, ok := p.Port.ExternalIDs[KeyPortSecurity]
	if !ok || json.Unmarshal([]byte(raw), &r) != nil || r.MAC.IsZero() {
		return PortSecurity{}, false
	}
	return r, true
}

// Gateways lists the gateway addresses recorded in a bridge's external_ids.
func Gateways(ids map[string]string) []netip.Prefix {
	var addrs []netip.Prefix
	for k := range ids {
		if s, ok := strings.CutPrefix(k, KeyGatewayPrefix); ok {
			if p, err := netip.ParsePrefix(s); err == nil {
				addrs = append(addrs, p)
			}
		}
	}
	return addrs
}

// Rebuilt is what the record of one feature of an attachment (port
// security, host ports, limits: pkg/feature) asks of its bridge and node,
// with the ofport OVSDB holds now. reconcile installs it, CHECK compares
// the bridge with it, trace names flows by it.
type Rebuilt struct {
	// Target is the bridge's OpenFlow endpoint, as recorded.
	Target endpoint.Endpoint
	// Flows replace every flow of Cookie; Meters go in before them.
	Cookie flows.Cookie
	Flows  []flows.Flow
	Meters []openflow.MeterBand
	// The facts of a feature that its flows are not the whole of, nil for
	// the others: the port's table-0 facts, whose target the bridge's own
	// flows (gateways, overlay) follow; the host ports' translations,
	// served to the node by nft too, and their conntrack pipeline, whose
	// shared flows (and Shared, those of the node addresses, which several
	// attachments may want) go once on a bridge and whose zone limits go
	// through ovs-vswitchd's Control socket ("": found, unixctl.Find).
	PortSecurity *flows.PortSecurity
	HostPorts    *flows.HostPorts
	Pipeline     *flows.Pipeline
	Shared       []flows.Flow
	Control      string
}
