package hostport

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// A retried ADD with fewer mappings, or without a rate, removes the meters
// of the earlier one that no flow uses any more.
func TestStaleConnMeters(t *testing.T) {
	node, ctr := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("192.0.2.10")
	rules := flows.Resolve([]flows.Mapping{{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80}, {Protocol: flows.UDP, HostPort: 53, ContainerPort: 53}},
		[]netip.Addr{node}, ctr, netip.Addr{})
	c := flows.AttachmentCookie("ctr", "eth0")
	mac, err := openflow.ParseMAC("02:00:00:00:00:0a")
	if err != nil {
		t.Fatal(err)
	}
	rec := record.HostPorts{Version: 1, HostPorts: flows.HostPorts{Cookie: c, OFPort: 40000, MAC: mac, IPv4: ctr, Rules: rules, ConnRate: 20, ConnBurst: 10}}
	raw, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovfx", ExternalIDs: map[string]string{record.KeyHostPorts: string(raw)}}}
	a := flows.HostPorts{Cookie: c, OFPort: 40000, IPv4: ctr, Rules: rules, ConnRate: 20, ConnBurst: 10}
	if got := staleConnMeters(p, a); len(got) != 0 {
		t.Errorf("same mappings: got %v, want none", got)
	}
	a.Rules = rules[:1]
	if got := staleConnMeters(p, a); len(got) != 1 || got[0] != flows.ConnMeterOf(40000, 1) {
		t.Errorf("one mapping fewer: got %v, want [%d]", got, flows.ConnMeterOf(40000, 1))
	}
	a.ConnRate = 0
	if got := staleConnMeters(p, a); len(got) != 2 {
		t.Errorf("no rate any more: got %v, want both", got)
	}
}
