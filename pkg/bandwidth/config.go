// Package bandwidth implements the ovs-bandwidth CNI plugin: the reference
// bandwidth plugin's contract (capability "bandwidth", ingressRate,
// ingressBurst, egressRate, egressBurst in bits per second and bits,
// prevResult passed through) with the limits enforced inside Open vSwitch
// on the attachment's port by pkg/limit (the ingress a QoS queue, the
// egress an OpenFlow meter).
package bandwidth

import (
	"math"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/limit"
)

// Conf is the network configuration of ovs-bandwidth.
type Conf struct {
	types.PluginConf
	cnicmd.Access
	// The limits may be keys of the config itself, as with the reference
	// plugin: when any of them is there, runtimeConfig.bandwidth is not
	// looked at.
	*limit.Entry
	// UnshapedSubnets and ShapedSubnets are refused: see LoadConf.
	UnshapedSubnets []string `json:"unshapedSubnets,omitempty"`
	ShapedSubnets   []string `json:"shapedSubnets,omitempty"`

	RuntimeConfig struct {
		Bandwidth *limit.Entry `json:"bandwidth,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	LogFile string `json:"logFile,omitempty"` // see package cnilog

	// Limits are the limits in force, resolved by LoadConf.
	Limits limit.Entry `json:"-"`
}

// Meter bounds: an OpenFlow meter counts kilobits (1000 bits) in 32 bits.
const maxMeterBits = math.MaxUint32 * 1000

// LoadConf decodes stdin, chooses the limits (the config's own keys, else
// runtimeConfig.bandwidth), then validates them as the reference plugin
// does, with code 7 naming the key.
func LoadConf(stdin []byte) (*Conf, error) {
	c, err := loadEndpoints(stdin)
	if err != nil {
		return nil, err
	}
	prefix := ""
	switch {
	case c.Entry != nil:
		c.Limits = *c.Entry
	case c.RuntimeConfig.Bandwidth != nil:
		c.Limits, prefix = *c.RuntimeConfig.Bandwidth, "runtimeConfig.bandwidth."
	}
	for _, d := range []struct {
		dir         string
		rate, burst uint64
	}{{"ingress", c.Limits.IngressRate, c.Limits.IngressBurst}, {"egress", c.Limits.EgressRate, c.Limits.EgressBurst}} {
		rate, burst := prefix+d.dir+"Rate", prefix+d.dir+"Burst"
		switch {
		case d.burst == 0 && d.rate != 0:
			return nil, invalid("%q %d with %q 0: if rate is set, burst must also be set", rate, d.rate, burst)
		case d.rate == 0 && d.burst != 0:
			return nil, invalid("%q 0 with %q %d: if burst is set, rate must also be set", rate, burst, d.burst)
		case d.burst/8 >= math.MaxUint32:
			return nil, invalid("%q %d: burst cannot be more than 4GB", burst, d.burst)
		}
	}
	if c.Limits.EgressRate > maxMeterBits {
		return nil, invalid("%q %d: an OpenFlow meter takes at most %d bits per second", prefix+"egressRate", c.Limits.EgressRate, uint64(maxMeterBits))
	}
	for key, v := range map[string][]string{"unshapedSubnets": c.UnshapedSubnets, "shapedSubnets": c.ShapedSubnets} {
		if len(v) > 0 {
			return nil, invalid("%q is not supported by ovs-bandwidth: the ingress limit is the port's QoS queue, "+
				"which takes every packet to the container whatever its source, so the limits apply to all traffic of the interface", key)
		}
	}
	return c, nil
}

// loadEndpoints decodes stdin and validates the endpoints and the timeout
// only: DEL needs no more, and must not fail on limits it does not use.
func loadEndpoints(stdin []byte) (*Conf, error) {
	c := &Conf{}
	if err := cnicmd.Decode(stdin, c); err != nil {
		return nil, err
	}
	if err := c.ParseAccess(); err != nil {
		return nil, err
	}
	return c, nil
}

// GCScope: ovs-bandwidth's GC considers the network's ports on any bridge.
func (c *Conf) GCScope() (string, string, []types.GCAttachment) {
	return c.Name, "", c.ValidAttachments
}

func loadConf(args *skel.CmdArgs) (*Conf, error) { return LoadConf(args.StdinData) }

func invalid(format string, a ...any) error {
	return cnierr.Invalid(format, a...)
}
