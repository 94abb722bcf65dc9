package limit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

func port(t *testing.T, rec *Record, ofport int) ovsdb.OwnedPort {
	t.Helper()
	ids := map[string]string{ovsdb.KeyOwner: ovsdb.OwnerValue, ovsdb.KeyContainerID: "ctr", ovsdb.KeyIfName: "eth0"}
	if rec != nil {
		v, err := rec.Value()
		if err != nil {
			t.Fatal(err)
		}
		ids[record.KeyBandwidth] = v
	}
	return ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovfx", ExternalIDs: ids}, Interface: ovsdb.Interface{OFPort: &ofport}}
}

// Rebuild gives reconcile the meter and flow ADD installed, from the record
// and the ofport OVSDB holds now.
func TestRebuild(t *testing.T) {
	rec := Record{OpenFlow: endpoint.MustParse("unix:/run/br0.mgmt"), Entry: Entry{IngressRate: 8000, IngressBurst: 800, EgressRate: 20_000_000, EgressBurst: 10_000_000}}
	r, ok := Feature{}.Rebuild(port(t, &rec, 40000))
	if !ok || r.Target != rec.OpenFlow || len(r.Meters) != 1 {
		t.Fatalf("Rebuild: got %q, %d meters, %v; want %q, 1 meter", r.Target, len(r.Meters), ok, rec.OpenFlow)
	}
	meter, fl := r.Meters[0], r.Flows
	bw := flows.Bandwidth{Cookie: flows.AttachmentCookie("ctr", "eth0"), OFPort: 40000, RateKbps: 20000, BurstKb: 10000}
	if meter != bw.Meter() {
		t.Errorf("meter: got %s, want %s", meter, bw.Meter())
	}
	if want := flows.BandwidthFlows(bw); len(fl) != 1 || fl[0].String() != want[0].String() || r.Cookie != flows.Cookie(want[0].Cookie) {
		t.Errorf("flows: got %v, want %v", fl, want)
	}
	for name, p := range map[string]ovsdb.OwnedPort{
		"no record":      port(t, nil, 40000),
		"ingress only":   port(t, &Record{OpenFlow: rec.OpenFlow, Entry: Entry{IngressRate: 8000, IngressBurst: 800}}, 40000),
		"no ofport (-1)": port(t, &rec, -1),
	} {
		if _, ok := (Feature{}).Rebuild(p); ok {
			t.Errorf("%s: Rebuild says there is an egress limit", name)
		}
	}
}

func TestQoSSpec(t *testing.T) {
	if s := qosSpec(Entry{EgressRate: 1, EgressBurst: 1}, "net"); s != nil {
		t.Errorf("egress only: got %+v, want no QoS", s)
	}
	s := qosSpec(Entry{IngressRate: 20_000_000, IngressBurst: 10_000_000}, "net")
	if s == nil || s.Type != "linux-htb" || s.OtherConfig["max-rate"] != "20000000" ||
		s.QueueConfig["max-rate"] != "20000000" || s.QueueConfig["burst"] != "10000000" || s.ExternalIDs[ovsdb.KeyNetwork] != "net" {
		t.Errorf("got %+v", s)
	}
}

func TestKilo(t *testing.T) {
	for bits, want := range map[uint64]uint32{1: 1, 499: 1, 1499: 1, 1500: 2, 20_000_000: 20000} {
		if got := kilo(bits); got != want {
			t.Errorf("kilo(%d) = %d, want %d", bits, got, want)
		}
	}
}

// The records in testdata are as ovs-bandwidth wrote them before the record
// embedded the limits: each decodes to the limits it was written from, and
// those give back the same JSON to the byte.
func TestRecordGolden(t *testing.T) {
	br0 := endpoint.MustParse("unix:/run/openvswitch/br0.mgmt")
	for file, want := range map[string]Record{
		"bandwidth_full.json": {OpenFlow: br0, Entry: Entry{IngressRate: 20_000_000, IngressBurst: 10_000_000, EgressRate: 8_000_000, EgressBurst: 4_000_000},
			EgressOFPort: 7},
		"bandwidth_ingress.json":  {OpenFlow: br0, Entry: Entry{IngressRate: 20_000_000, IngressBurst: 10_000_000}},
		"bandwidth_noofport.json": {OpenFlow: endpoint.MustParse("tcp:127.0.0.1:6653"), Entry: Entry{EgressRate: 8_000_000, EgressBurst: 4_000_000}},
	} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			stored := strings.TrimSuffix(string(b), "\n")
			p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: map[string]string{record.KeyBandwidth: stored}}}
			got, ok, err := RecordOf(p)
			if !ok || err != nil || got != want {
				t.Fatalf("RecordOf: %+v, %v, %v; want %+v", got, ok, err, want)
			}
			if raw, err := want.Value(); err != nil || raw != stored {
				t.Errorf("record of the limits\n%s, %v\nwant\n%s", raw, err, stored)
			}
		})
	}
}
