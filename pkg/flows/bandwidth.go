package flows

import "github.com/ovsflow/ovs-cni/pkg/openflow"

// Bandwidth is the egress limit of one container port (ovs-bandwidth's
// egressRate and egressBurst): the traffic the container sends, which
// enters Open vSwitch on its port.
type Bandwidth struct {
	Cookie Cookie // the attachment's (AttachmentCookie)
	OFPort uint32
	// RateKbps and BurstKb are the meter's drop band, in kilobits (1000
	// bits) per second and kilobits.
	RateKbps, BurstKb uint32
}

// Meter returns the port's meter (MeterOf).
func (b Bandwidth) Meter() openflow.MeterBand {
	return openflow.MeterBand{ID: MeterOf(b.OFPort), RateKbps: b.RateKbps, BurstKb: b.BurstKb}
}

// BandwidthFlows returns the flow that sends every frame of the port through
// its meter, once (see PriorityBandwidth).
func BandwidthFlows(b Bandwidth) []Flow {
	m := openflow.Match{}.InPort(b.OFPort).RegBits(RegBandwidthMetered, 0)
	return []Flow{flow(b.Cookie.WithKind(CookieKindBandwidth), TableClassifier, PriorityBandwidth, m,
		openflow.Meter{ID: MeterOf(b.OFPort)},
		openflow.Load{Value: 1, Dst: RegBandwidthMetered},
		openflow.Resubmit{Table: TableClassifier})}
}

// BandwidthBundle returns the bundle that replaces the attachment's egress
// limit flows with those of b; its meter must be set first
// (openflow.SetMeters).
func BandwidthBundle(b Bandwidth) openflow.Bundle {
	bundle := openflow.Bundle{b.Cookie.WithKind(CookieKindBandwidth).Delete()}
	for _, f := range BandwidthFlows(b) {
		bundle = append(bundle, f)
	}
	return bundle
}
