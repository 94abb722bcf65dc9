package gateway

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

func TestUnused(t *testing.T) {
	a, b := netip.MustParsePrefix("10.10.0.1/24"), netip.MustParsePrefix("10.20.0.1/24")
	br := ovsdb.Bridge{Name: "br0", ExternalIDs: map[string]string{Key(a): "1", Key(b): "1", record.KeyZoneLimits: "x"}}
	port := func(bridge string, ids map[string]string) ovsdb.OwnedPort {
		m := map[string]string{ovsdb.KeyBridge: bridge}
		for k, v := range ids {
			m[k] = v
		}
		return ovsdb.OwnedPort{Port: ovsdb.Port{ExternalIDs: m}}
	}
	portsec := func(ip string, disabled bool) map[string]string {
		raw, _, _ := record.PortSecurity{PortSecurity: flows.PortSecurity{MAC: [6]byte{2, 0, 0, 0, 0, 1}, IPs: []netip.Addr{netip.MustParseAddr(ip)}, Disabled: disabled, VLAN: 1}}.Value()
		return map[string]string{record.KeyPortSecurity: raw}
	}
	for _, tc := range []struct {
		name  string
		ports []ovsdb.OwnedPort
		want  []netip.Prefix
	}{
		{"no port", nil, []netip.Prefix{a, b}},
		{"a claimed", []ovsdb.OwnedPort{port("br0", Claims([]netip.Prefix{a}))}, []netip.Prefix{b}},
		{"claimed on another bridge", []ovsdb.OwnedPort{port("br1", Claims([]netip.Prefix{a}))}, []netip.Prefix{a, b}},
		{"older port with an address in b", []ovsdb.OwnedPort{port("br0", portsec("10.20.0.7", false))}, []netip.Prefix{a}},
		{"older port, port security off: unknown", []ovsdb.OwnedPort{port("br0", portsec("10.30.0.7", true))}, nil},
		{"older port without a record: unknown", []ovsdb.OwnedPort{port("br0", nil)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unused(br, tc.ports); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
