package limit

import (
	"encoding/json"
	"fmt"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// Record is ovs-bandwidth's record of a port's limits, stored as JSON in
// the port's external_ids[record.KeyBandwidth]: what reconcile needs to put
// the egress meter and its flow back (the ingress limit is the port's QoS
// row, which OVSDB keeps), and what CHECK compares the config with. Rates
// are in bits per second, bursts in bits, as in the config. The JSON is
// that of records written before it embedded the limits
// (testdata/bandwidth_*.json).
type Record struct {
	OpenFlow endpoint.Endpoint `json:"openflow"`
	Entry
	// EgressOFPort is the ofport whose meter (flows.MeterOf) holds the
	// egress limit, for the DEL that finds the Interface without one (its
	// veth gone, on the kernel datapath); 0 in records written before it.
	EgressOFPort uint32 `json:"egressOFPort,omitempty"`
}

// Value is the external_ids value of the record.
func (r Record) Value() (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("bandwidth record: %w", err)
	}
	return string(b), nil
}

// RecordOf reads the bandwidth record of a port; ok is false when it has
// none.
func RecordOf(p ovsdb.OwnedPort) (Record, bool, error) {
	var r Record
	raw, ok := p.Port.ExternalIDs[record.KeyBandwidth]
	if !ok {
		return r, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return r, true, fmt.Errorf("bandwidth record of port %q: %w", p.Port.Name, err)
	}
	return r, true, nil
}
