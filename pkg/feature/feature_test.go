package feature

import (
	"os"
	"slices"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/limit"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// A port that records every feature rebuilds each one, in the declared
// order, under the attachment's cookie of the feature's kind, on the
// recorded target, with the facts its callers read beyond the flows.
func TestRebuildAll(t *testing.T) {
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile("../record/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	bw, err := limit.Record{OpenFlow: endpoint.MustParse("unix:/run/openvswitch/br0.mgmt"), Entry: limit.Entry{EgressRate: 20_000_000, EgressBurst: 10_000_000}}.Value()
	if err != nil {
		t.Fatal(err)
	}
	ofport := 7
	p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: map[string]string{
		ovsdb.KeyContainerID: "ctr", ovsdb.KeyIfName: "eth0",
		record.KeyPortSecurity: read("portsec_full.json"), record.KeyHostPorts: read("hostports_nonodemac.json"), record.KeyBandwidth: bw}},
		Interface: ovsdb.Interface{OFPort: &ofport}}
	c := flows.AttachmentCookie("ctr", "eth0")
	want := []struct {
		name string
		kind uint8
	}{{"port security", flows.CookieKindPortSecurity}, {"limits", flows.CookieKindBandwidth}, {"host ports", flows.CookieKindAttachment}}
	if len(All) != len(want) {
		t.Fatalf("%d features, want %d", len(All), len(want))
	}
	for i, f := range All {
		if f.Name() != want[i].name {
			t.Errorf("feature %d: %q, want %q", i, f.Name(), want[i].name)
		}
		r, ok := f.Rebuild(p)
		if !ok || len(r.Flows) == 0 {
			t.Errorf("%s: ok %v, %d flows; want its flows", f.Name(), ok, len(r.Flows))
			continue
		}
		if r.Target.String() != "unix:/run/openvswitch/br0.mgmt" {
			t.Errorf("%s: target %s", f.Name(), r.Target)
		}
		// The host port record names its cookie (that of the attachment
		// it was written for); the others are the port's identity's.
		if r.Cookie.Kind() != want[i].kind || f.Name() != "host ports" && r.Cookie != c.WithKind(want[i].kind) {
			t.Errorf("%s: cookie %s, want %s", f.Name(), r.Cookie, c.WithKind(want[i].kind))
		}
		for _, fl := range r.Flows {
			if flows.Cookie(fl.Cookie) != r.Cookie {
				t.Errorf("%s: flow %s not of cookie %s", f.Name(), fl, r.Cookie)
			}
		}
		if got := []bool{r.PortSecurity != nil, len(r.Meters) > 0, r.HostPorts != nil && r.Pipeline != nil}; !slices.Equal(got, []bool{i == 0, i == 1, i == 2}) {
			t.Errorf("%s: facts %v (port security, meters, host ports)", f.Name(), got)
		}
	}
}
