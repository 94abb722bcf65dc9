// Package portmap implements the ovs-portmap CNI plugin: the reference
// portmap plugin's contract (capability "portMappings", prevResult passed
// through) with the translation done by OpenFlow conntrack-NAT flows inside
// Open vSwitch (see pkg/flows for the pipeline, pkg/hostport for the record).
package portmap

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// Conf is the network configuration of ovs-portmap.
type Conf struct {
	types.PluginConf
	OVSDB    string   `json:"ovsdb,omitempty"`
	OpenFlow string   `json:"openflow,omitempty"`
	SNAT     *bool    `json:"snat,omitempty"`
	MasqAll  bool     `json:"masqAll,omitempty"`
	HostIPs  []string `json:"hostIPs,omitempty"`
	DNATZone *int     `json:"dnatZone,omitempty"`
	SNATZone *int     `json:"snatZone,omitempty"`

	// Keys of the iptables/nftables portmap that do not apply here; rejected
	// rather than silently ignored.
	Backend              *string          `json:"backend,omitempty"`
	MarkMasqBit          *json.RawMessage `json:"markMasqBit,omitempty"`
	ExternalSetMarkChain *json.RawMessage `json:"externalSetMarkChain,omitempty"`
	ConditionsV4         *json.RawMessage `json:"conditionsV4,omitempty"`
	ConditionsV6         *json.RawMessage `json:"conditionsV6,omitempty"`

	RuntimeConfig struct {
		PortMaps []Entry `json:"portMappings,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	Args *Args `json:"args,omitempty"`

	// Resolved by LoadConf.
	Mappings []flows.Mapping `json:"-"`
	NodeIPs  []netip.Addr    `json:"-"` // from hostIPs; nil: the bridge's addresses
	Pipeline flows.Pipeline  `json:"-"`
}

// Entry is one runtimeConfig.portMappings element. encoding/json matches keys
// case-insensitively, so containerd's "HostPort"/"HostIP" decode too.
type Entry struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// Args carries Apache Mesos's port mappings:
// args["org.apache.mesos"].network_info.port_mappings.
type Args struct {
	Mesos *struct {
		NetworkInfo struct {
			PortMappings []MesosEntry `json:"port_mappings"`
		} `json:"network_info"`
	} `json:"org.apache.mesos,omitempty"`
}

// MesosEntry is one Mesos port mapping (no host IP).
type MesosEntry struct {
	HostPort      int    `json:"host_port"`
	ContainerPort int    `json:"container_port"`
	Protocol      string `json:"protocol,omitempty"`
}

// MaxMappings bounds the mappings of one attachment.
const MaxMappings = 4096

func invalid(format string, a ...any) error {
	return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(format, a...), "")
}

// Entries returns the requested mappings: runtimeConfig.portMappings, or else
// the Mesos ones.
func (a *Args) entries() []Entry {
	if a == nil || a.Mesos == nil {
		return nil
	}
	out := make([]Entry, 0, len(a.Mesos.NetworkInfo.PortMappings))
	for _, m := range a.Mesos.NetworkInfo.PortMappings {
		out = append(out, Entry{HostPort: m.HostPort, ContainerPort: m.ContainerPort, Protocol: m.Protocol})
	}
	return out
}

// ParseMappings validates entries into mappings; field names the source
// ("runtimeConfig.portMappings" or the Mesos path) in errors.
func ParseMappings(entries []Entry, field string) ([]flows.Mapping, error) {
	if len(entries) > MaxMappings {
		return nil, invalid("%s: %d mappings, at most %d", field, len(entries), MaxMappings)
	}
	out := make([]flows.Mapping, 0, len(entries))
	claimed := map[[2]string]int{}
	for i, e := range entries {
		name := fmt.Sprintf("%s[%d] (hostPort %d, containerPort %d, protocol %q)", field, i, e.HostPort, e.ContainerPort, e.Protocol)
		if e.HostPort < 1 || e.HostPort > 65535 {
			return nil, invalid("%s: hostPort %d: want 1-65535", name, e.HostPort)
		}
		if e.ContainerPort < 1 || e.ContainerPort > 65535 {
			return nil, invalid("%s: containerPort %d: want 1-65535", name, e.ContainerPort)
		}
		proto, err := flows.ParseProtocol(e.Protocol)
		if err != nil {
			return nil, invalid("%s: protocol %q: want tcp, udp or sctp", name, e.Protocol)
		}
		var host netip.Addr
		if e.HostIP != "" {
			if host, err = netip.ParseAddr(e.HostIP); err != nil || host.Zone() != "" {
				return nil, invalid("%s: hostIP %q: not an IP address", name, e.HostIP)
			}
			host = host.Unmap()
		}
		m := flows.Mapping{Protocol: proto, HostIP: host, HostPort: uint16(e.HostPort), ContainerPort: uint16(e.ContainerPort)}
		key := [2]string{proto.String() + "/" + host.String(), fmt.Sprint(e.HostPort)}
		if j, dup := claimed[key]; dup {
			if out[j] == m {
				continue // the same mapping twice
			}
			return nil, invalid("%s: host port %d/%s is mapped twice", name, e.HostPort, proto)
		}
		claimed[key] = len(out)
		out = append(out, m)
	}
	return out, nil
}

// LoadConf decodes stdin, applies defaults, then validates.
func LoadConf(stdin []byte) (*Conf, error) {
	c := &Conf{}
	if err := json.Unmarshal(stdin, c); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding network config: %v", err), "")
	}
	// Defaults.
	if c.OVSDB == "" {
		c.OVSDB = ovsdb.DefaultEndpoint
	}
	if c.SNAT == nil {
		t := true
		c.SNAT = &t
	}
	c.Pipeline = flows.DefaultPipeline()
	// Validation.
	if c.Backend != nil && *c.Backend != "" && *c.Backend != "ovs" {
		return nil, invalid(`"backend" %q does not apply: ovs-portmap always programs Open vSwitch (use "ovs" or leave it out)`, *c.Backend)
	}
	for key, v := range map[string]*json.RawMessage{"markMasqBit": c.MarkMasqBit, "externalSetMarkChain": c.ExternalSetMarkChain,
		"conditionsV4": c.ConditionsV4, "conditionsV6": c.ConditionsV6} {
		if v != nil {
			return nil, invalid("%q is an iptables portmap option and does not apply to ovs-portmap", key)
		}
	}
	if err := ovsdb.ValidateEndpoint(c.OVSDB); err != nil {
		return nil, invalid(`"ovsdb": %v`, err)
	}
	if c.OpenFlow != "" && !strings.HasPrefix(c.OpenFlow, "unix:/") && !strings.HasPrefix(c.OpenFlow, "tcp:") {
		return nil, invalid(`"openflow" %q: want unix:/PATH or tcp:HOST:PORT`, c.OpenFlow)
	}
	if c.OpenFlow != "" && strings.ContainsAny(c.OpenFlow, " \t\n,;'\"") {
		return nil, invalid(`"openflow" %q: unexpected characters`, c.OpenFlow)
	}
	for key, z := range map[string]*int{"dnatZone": c.DNATZone, "snatZone": c.SNATZone} {
		if z != nil && (*z < 1 || *z > 65535) {
			return nil, invalid("%q %d: want 1-65535 (zone 0 is everybody's default zone)", key, *z)
		}
	}
	if c.DNATZone != nil {
		c.Pipeline.DNATZone = uint16(*c.DNATZone)
	}
	if c.SNATZone != nil {
		c.Pipeline.SNATZone = uint16(*c.SNATZone)
	}
	if c.Pipeline.DNATZone == c.Pipeline.SNATZone {
		return nil, invalid(`"dnatZone" and "snatZone" must differ (both %d)`, c.Pipeline.DNATZone)
	}
	for i, s := range c.HostIPs {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.IsUnspecified() {
			return nil, invalid(`"hostIPs"[%d] %q: not a unicast IP address`, i, s)
		}
		c.NodeIPs = append(c.NodeIPs, a.Unmap())
	}
	entries, field := c.RuntimeConfig.PortMaps, "runtimeConfig.portMappings"
	if len(entries) == 0 {
		entries, field = c.Args.entries(), `args["org.apache.mesos"].network_info.port_mappings`
	}
	m, err := ParseMappings(entries, field)
	if err != nil {
		return nil, err
	}
	c.Mappings = m
	return c, nil
}
