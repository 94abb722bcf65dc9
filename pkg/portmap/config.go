// Package portmap implements the ovs-portmap CNI plugin: the reference
// portmap plugin's contract (capability "portMappings", prevResult passed
// through) with the translation done by OpenFlow conntrack-NAT flows inside
// Open vSwitch (see pkg/flows for the pipeline, pkg/hostport for publishing
// them, pkg/record for what OVSDB records).
package portmap

import (
	"encoding/json"
	"net/netip"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
)

// Conf is the network configuration of ovs-portmap.
type Conf struct {
	types.PluginConf
	cnicmd.Access
	// VswitchdControl is the path of ovs-vswitchd's control socket (its
	// --unixctl), for the zone limits; "": found as ovs-appctl finds it.
	VswitchdControl string   `json:"vswitchdControl,omitempty"`
	SNAT            *bool    `json:"snat,omitempty"`
	MasqAll         bool     `json:"masqAll,omitempty"`
	HostIPs         []string `json:"hostIPs,omitempty"`
	DNATZone        *int     `json:"dnatZone,omitempty"`
	SNATZone        *int     `json:"snatZone,omitempty"`
	// ContainerZone tracks connections whose client is a container.
	ContainerZone *int `json:"containerZone,omitempty"`
	// ConntrackLimit bounds the entries of the DNAT and SNAT zones,
	// ContainerConntrackLimit those of the container zone (0: no limit).
	ConntrackLimit          *int64 `json:"conntrackLimit,omitempty"`
	ContainerConntrackLimit *int64 `json:"containerConntrackLimit,omitempty"`
	// NewConnectionRate bounds each mapping's new connections per second
	// (0: no bound), after a burst of NewConnectionBurst (default: the
	// rate).
	NewConnectionRate  *int64 `json:"newConnectionRate,omitempty"`
	NewConnectionBurst *int64 `json:"newConnectionBurst,omitempty"`

	// Keys of the iptables/nftables portmap that do not apply here; rejected
	// rather than silently ignored.
	Backend              *string          `json:"backend,omitempty"`
	MarkMasqBit          *json.RawMessage `json:"markMasqBit,omitempty"`
	ExternalSetMarkChain *json.RawMessage `json:"externalSetMarkChain,omitempty"`
	ConditionsV4         *json.RawMessage `json:"conditionsV4,omitempty"`
	ConditionsV6         *json.RawMessage `json:"conditionsV6,omitempty"`

	RuntimeConfig struct {
		PortMaps []hostport.Entry `json:"portMappings,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	Args    *hostport.Args `json:"args,omitempty"`
	LogFile string         `json:"logFile,omitempty"` // see package cnilog

	// Resolved by LoadConf.
	ConnRate, ConnBurst uint32          `json:"-"`
	Mappings            []flows.Mapping `json:"-"`
	NodeIPs             []netip.Addr    `json:"-"` // from hostIPs; nil: the bridge's addresses
	Pipeline            flows.Pipeline  `json:"-"`
}

// LoadConf decodes stdin, applies defaults, then validates.
func LoadConf(stdin []byte) (*Conf, error) {
	c := &Conf{}
	if err := cnicmd.Decode(stdin, c); err != nil {
		return nil, err
	}
	// Defaults.
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
	if err := c.ParseAccess(); err != nil {
		return nil, err
	}
	if err := cnicmd.ValidateControl(c.VswitchdControl); err != nil {
		return nil, err
	}
	for _, z := range []struct {
		key string
		v   *int
		to  *uint16
	}{{"dnatZone", c.DNATZone, &c.Pipeline.DNATZone}, {"snatZone", c.SNATZone, &c.Pipeline.SNATZone},
		{"containerZone", c.ContainerZone, &c.Pipeline.ContainerZone}} {
		if z.v == nil {
			continue
		}
		if *z.v < 1 || *z.v > 65535 {
			return nil, invalid("%q %d: want 1-65535 (zone 0 is everybody's default zone)", z.key, *z.v)
		}
		*z.to = uint16(*z.v)
	}
	if p := c.Pipeline; p.DNATZone == p.SNATZone || p.ContainerZone == p.DNATZone || p.ContainerZone == p.SNATZone {
		return nil, invalid(`"dnatZone" %d, "snatZone" %d and "containerZone" %d must differ`, p.DNATZone, p.SNATZone, p.ContainerZone)
	}
	for _, z := range []uint16{c.Pipeline.DNATZone, c.Pipeline.SNATZone, c.Pipeline.ContainerZone} {
		if z == flows.PortSecDefragZone {
			return nil, invalid("zone %d is ovs-bridge's port security reassembly zone: choose another", z)
		}
		if z == flows.GatewayZone {
			return nil, invalid("zone %d is ovs-bridge's zone of Service replies through the gateway: choose another", z)
		}
	}
	for _, l := range []struct {
		key string
		v   *int64
		to  *uint32
	}{{"conntrackLimit", c.ConntrackLimit, &c.Pipeline.Limit}, {"containerConntrackLimit", c.ContainerConntrackLimit, &c.Pipeline.ContainerLimit}} {
		if l.v == nil {
			continue
		}
		if *l.v < 0 || *l.v > 1<<32-1 {
			return nil, invalid("%q %d: want 0 (no limit) to 4294967295 entries", l.key, *l.v)
		}
		*l.to = uint32(*l.v)
	}
	for _, l := range []struct {
		key string
		v   *int64
		to  *uint32
	}{{"newConnectionRate", c.NewConnectionRate, &c.ConnRate}, {"newConnectionBurst", c.NewConnectionBurst, &c.ConnBurst}} {
		if l.v == nil {
			continue
		}
		if *l.v < 0 || *l.v > 1<<32-1 {
			return nil, invalid("%q %d: want 0 to 4294967295 connections", l.key, *l.v)
		}
		*l.to = uint32(*l.v)
	}
	switch {
	case c.ConnRate == 0 && c.ConnBurst != 0:
		return nil, invalid(`"newConnectionBurst" %d without "newConnectionRate"`, c.ConnBurst)
	case c.ConnBurst == 0:
		c.ConnBurst = c.ConnRate
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
		entries, field = c.Args.Entries(), `args["org.apache.mesos"].network_info.port_mappings`
	}
	m, err := hostport.ParseMappings(entries, field)
	if err != nil {
		return nil, err
	}
	c.Mappings = m
	return c, nil
}

// GCScope: ovs-portmap's GC considers the network's ports on any bridge.
func (c *Conf) GCScope() (string, string, []types.GCAttachment) {
	return c.Name, "", c.ValidAttachments
}

func loadConf(args *skel.CmdArgs) (*Conf, error) { return LoadConf(args.StdinData) }

func (c *Conf) options() hostport.Options {
	return hostport.Options{Mappings: c.Mappings, NodeIPs: c.NodeIPs, SNAT: *c.SNAT, MasqAll: c.MasqAll,
		OpenFlow: c.Endpoints.OpenFlow, OVSDB: c.Endpoints.OVSDB, VswitchdControl: c.VswitchdControl, ConnRate: c.ConnRate, ConnBurst: c.ConnBurst,
		Pipeline: c.Pipeline}
}

func invalid(format string, a ...any) error {
	return cnierr.Invalid(format, a...)
}
