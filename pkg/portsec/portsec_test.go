package portsec

import (
	"encoding/json"
	"net"
	"net/netip"
	"reflect"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// Reconcile's share: the flows rebuilt from the record of the facts ADD
// built, with the ofport OVSDB holds now, are the flows ADD installed for
// that ofport.
func TestRebuild(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	cookie := flows.AttachmentCookie("ctr", "eth0")
	ps := flows.PortSecurity{Cookie: cookie, OFPort: 9, MAC: openflow.MAC(mac), LinkLocal: flows.LinkLocalOf(mac),
		IPs: []netip.Addr{netip.MustParseAddr("203.0.113.2")}, VLAN: flows.Access,
		Allowed: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/28"), netip.MustParsePrefix("2001:db8::7/128")}, AllowVRRP: true}
	rec := record.NewPortSecurity(endpoint.MustParse("unix:/run/ovs/br0.mgmt"), ps)
	raw, _ := json.Marshal(rec)
	ofport := 9
	p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: map[string]string{
		ovsdb.KeyContainerID: "ctr", ovsdb.KeyIfName: "eth0", record.KeyPortSecurity: string(raw)}},
		Interface: ovsdb.Interface{OFPort: &ofport}}
	r, ok := Feature{}.Rebuild(p)
	target, c, got := r.Target, r.Cookie, r.Flows
	if !ok {
		t.Fatal("Rebuild: not ok")
	}
	want := flows.PortSecurityFlows(ps)
	plain := ps
	plain.Allowed, plain.AllowVRRP = nil, false
	if len(want) == len(flows.PortSecurityFlows(plain)) {
		t.Fatal("the allowed addresses and VRRP add no flows: the test would not see them lost")
	}
	if target != rec.OpenFlow || c != cookie.WithKind(flows.CookieKindPortSecurity) {
		t.Errorf("target %q, cookie %s; want %q, %s", target, c, rec.OpenFlow, cookie.WithKind(flows.CookieKindPortSecurity))
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("flows\n%v\nwant\n%v", got, want)
	}
	other := endpoint.MustParse("unix:/other")
	if Target(p, other) != rec.OpenFlow || Target(ovsdb.OwnedPort{}, other) != other {
		t.Error("Target: want the recorded target, else the fallback")
	}
	for name, q := range map[string]ovsdb.OwnedPort{
		"no record": {Port: ovsdb.Port{ExternalIDs: map[string]string{}}, Interface: p.Interface},
		"no ofport": {Port: p.Port},
	} {
		if _, ok := (Feature{}).Rebuild(q); ok {
			t.Errorf("%s: Rebuild ok, want nothing to rebuild", name)
		}
	}
}
