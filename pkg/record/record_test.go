package record

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// The host port record gives back, through its JSON in external_ids, the
// pipeline and attachment it was made from.
func TestHostPortsRoundTrip(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	node := netip.MustParseAddr("198.51.100.1")
	pl := flows.Pipeline{DNATZone: 64000, SNATZone: 64001, ContainerZone: 64002, Limit: 100, ContainerLimit: 200}
	a := flows.HostPorts{Cookie: flows.AttachmentCookie("ctr", "eth0"), OFPort: 7, MAC: openflow.MAC(mac),
		IPv4: netip.MustParseAddr("192.0.2.10"), HairpinV4: node, SNAT: true,
		Rules: flows.Resolve([]flows.Mapping{{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80},
			{Protocol: flows.UDP, HostPort: 53, ContainerPort: 53}}, []netip.Addr{node}, netip.MustParseAddr("192.0.2.10"), netip.Addr{})}
	// An earlier ADD's record and claim are on the port: they are replaced.
	before := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: map[string]string{
		KeyHostPorts: "{}", KeyClaimPrefix + "tcp/198.51.100.1:9090": ovsdb.ClaimValue, KeyPortSecurity: "{}"}}}
	unset, set, claims, err := PublishHostPorts(before, endpoint.MustParse("unix:/run/ovs/br0.mgmt"), "", pl, a)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{KeyClaimPrefix + "tcp/198.51.100.1:9090", KeyHostPorts}; !slices.Equal(unset, want) {
		t.Errorf("unset %v, want %v (the earlier record and claim, not the port security record)", unset, want)
	}
	ids := map[string]string{KeyPortSecurity: "{}"}
	for k, v := range set {
		ids[k] = v
	}
	for _, k := range claims {
		ids[k] = ovsdb.ClaimValue
	}
	p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: ids}}
	rec, ok, err := HostPortsOf(p)
	if !ok || err != nil {
		t.Fatalf("HostPortsOf: ok %v, err %v", ok, err)
	}
	if rec.OpenFlow.String() != "unix:/run/ovs/br0.mgmt" {
		t.Errorf("OpenFlow %s, want unix:/run/ovs/br0.mgmt", rec.OpenFlow)
	}
	gotPl, gotA, err := rec.Facts()
	if err != nil {
		t.Fatal(err)
	}
	if gotPl != pl {
		t.Errorf("pipeline %+v, want %+v", gotPl, pl)
	}
	if !reflect.DeepEqual(gotA, a) {
		t.Errorf("attachment %+v, want %+v", gotA, a)
	}
	if got := rec.NodeIPs(); !slices.Equal(got, []netip.Addr{node}) {
		t.Errorf("NodeIPs %v, want [%v]", got, node)
	}
	wantKeys := append([]string{KeyHostPorts}, claims...)
	slices.Sort(wantKeys)
	if got := HostPortKeys(p); !slices.Equal(got, wantKeys) {
		t.Errorf("HostPortKeys %v, want %v (not the port security record)", got, wantKeys)
	}
	if want := "ovsflow.io/claim/tcp/198.51.100.1:8080"; len(claims) != 2 || claims[0] != want {
		t.Errorf("claim %q, want %q", claims[0], want)
	}
}

func TestHostPortsOfMissingAndBroken(t *testing.T) {
	if _, ok, err := HostPortsOf(ovsdb.OwnedPort{}); ok || err != nil {
		t.Errorf("no record: ok %v, err %v; want false, nil", ok, err)
	}
	p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: map[string]string{KeyHostPorts: "{"}}}
	if _, ok, err := HostPortsOf(p); !ok || err == nil {
		t.Errorf("broken record: ok %v, err %v; want true and an error", ok, err)
	}
}

func TestGateways(t *testing.T) {
	ids := map[string]string{KeyGatewayPrefix + "192.0.2.1/24": "1", KeyGatewayPrefix + "2001:db8::1/64": "1",
		KeyGatewayPrefix + "bogus": "1", KeyZoneLimits: "x", "other/192.0.2.9/24": "1"}
	got := Gateways(ids)
	slices.SortFunc(got, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	want := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("2001:db8::1/64")}
	if !slices.Equal(got, want) {
		t.Errorf("Gateways %v, want %v", got, want)
	}
}

func TestPodOf(t *testing.T) {
	for args, want := range map[string]string{
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc": "default/web-0",
		"K8S_POD_NAME=web-0":                "",
		"K8S_POD_NAMESPACE=default":         "",
		"":                                  "",
		"K8S_POD_NAMESPACE=;K8S_POD_NAME=x": "",
		"K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-5d78c9869d-abcde.x": "kube-system/coredns-5d78c9869d-abcde.x",
		"K8S_POD_NAMESPACE=a.b;K8S_POD_NAME=x":                                  "",
		"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=$(touch x)":                          "",
		"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=\xff":                                "",
		"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=-a":                                  "",
		"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=A":                                   "",
	} {
		if got := PodOf(args); got != want {
			t.Errorf("PodOf(%q): got %q, want %q", args, got, want)
		}
	}
}

// The port security records in testdata are as ovs-bridge wrote them
// before the record was derived from flows.PortSecurity: each still
// decodes, gives back the facts it was written from, and the facts give
// back the same JSON to the byte, so that readers of either side of an
// upgrade read what the other wrote.
func TestPortSecurityGolden(t *testing.T) {
	ll := func(m openflow.MAC) netip.Addr { return flows.LinkLocalOf(m.HardwareAddr()) }
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	c := flows.AttachmentCookie("ctr", "eth0")
	for _, tt := range []struct {
		file   string
		target string
		ps     flows.PortSecurity
	}{
		{"portsec_full.json", "unix:/run/openvswitch/br0.mgmt", flows.PortSecurity{Cookie: c, OFPort: 7, MAC: mustMAC(t, "02:00:00:00:00:0a"),
			LinkLocal: ll(mustMAC(t, "02:00:00:00:00:0a")), IPs: addrs("203.0.113.10", "2001:db8:c::a"),
			Allowed:   []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:c::100/128")},
			AllowVRRP: true, AllowRouter: true, AllowDHCPServer: true, VLAN: flows.Trunk}},
		{"portsec_l2only.json", "unix:/run/openvswitch/br0.mgmt", flows.PortSecurity{Cookie: c, OFPort: 7, MAC: mustMAC(t, "02:00:00:00:00:0b"),
			LinkLocal: ll(mustMAC(t, "02:00:00:00:00:0b")), L2Only: true}},
		{"portsec_disabled_access.json", "tcp:127.0.0.1:6653", flows.PortSecurity{Cookie: c, OFPort: 7, MAC: mustMAC(t, "02:00:00:00:00:0c"),
			LinkLocal: ll(mustMAC(t, "02:00:00:00:00:0c")), IPs: addrs("203.0.113.12"), VLAN: flows.Access, Disabled: true}},
		{"portsec_disabled_gateway.json", "unix:/run/openvswitch/br0.mgmt", flows.PortSecurity{Cookie: c, OFPort: 7, MAC: mustMAC(t, "02:00:00:00:00:0d"),
			LinkLocal: ll(mustMAC(t, "02:00:00:00:00:0d")), IPs: addrs("203.0.113.13", "2001:db8:c::d"), Disabled: true,
			Gateways: []netip.Prefix{netip.MustParsePrefix("203.0.113.1/24"), netip.MustParsePrefix("2001:db8:c::1/64")}}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			stored := golden(t, tt.file)
			p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: map[string]string{KeyPortSecurity: stored}}}
			rec, ok := PortSecurityOf(p)
			if !ok {
				t.Fatalf("PortSecurityOf: not ok")
			}
			if rec.OpenFlow.String() != tt.target {
				t.Errorf("target %q, want %q", rec.OpenFlow, tt.target)
			}
			if got := rec.Facts(c, 7); !reflect.DeepEqual(got, tt.ps) {
				t.Errorf("facts\n%+v\nwant\n%+v", got, tt.ps)
			}
			raw, ok, err := NewPortSecurity(endpoint.MustParse(tt.target), tt.ps).Value()
			if err != nil || !ok {
				t.Fatalf("Value: ok %v, err %v", ok, err)
			}
			if raw != stored {
				t.Errorf("record of the facts\n%s\nwant\n%s", raw, stored)
			}
		})
	}
}

// A record with port security off and no VLAN records nothing; one that
// names no 48-bit MAC is not a record.
func TestPortSecurityOfNothing(t *testing.T) {
	if _, ok, err := NewPortSecurity(endpoint.MustParse("unix:/x"), flows.PortSecurity{Disabled: true}).Value(); ok || err != nil {
		t.Errorf("port security off, untagged: ok %v, err %v; want false, nil", ok, err)
	}
	for _, raw := range []string{`{`, `{"openflow":"unix:/x"}`, `{"mac":""}`, `{"mac":"02:00:00:00:00:00:00:01"}`, `{"mac":"x"}`} {
		p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: map[string]string{KeyPortSecurity: raw}}}
		if _, ok := PortSecurityOf(p); ok {
			t.Errorf("PortSecurityOf(%s): ok, want not a record", raw)
		}
	}
}

// The host port records in testdata are as ovs-portmap wrote them before
// the facts carried typed MACs (one of a version without the node MAC):
// each decodes to the facts it was written from, and the facts give back
// the same JSON to the byte.
func TestHostPortsGolden(t *testing.T) {
	node4, node6 := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:100::1")
	c4, c6 := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8:c::a")
	c := flows.AttachmentCookie("ctr", "eth0")
	for _, tt := range []struct {
		file    string
		control string
		pl      flows.Pipeline
		a       flows.HostPorts
	}{
		{"hostports_full.json", "/run/openvswitch/ovs-vswitchd.1.ctl",
			flows.Pipeline{DNATZone: 64000, SNATZone: 64001, ContainerZone: 64002, Limit: 100, ContainerLimit: 200},
			flows.HostPorts{Cookie: c, OFPort: 7, MAC: mustMAC(t, "02:00:00:00:00:0a"), NodeMAC: mustMAC(t, "02:00:00:00:00:fe"),
				IPv4: c4, IPv6: c6, HairpinV4: node4, HairpinV6: node6, SNAT: true, ConnRate: 10, ConnBurst: 20,
				Rules: flows.Resolve([]flows.Mapping{{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80},
					{Protocol: flows.UDP, HostPort: 53, ContainerPort: 53}}, []netip.Addr{node4, node6}, c4, c6)}},
		{"hostports_nonodemac.json", "", flows.Pipeline{DNATZone: 64000, SNATZone: 64001},
			flows.HostPorts{Cookie: c, OFPort: 7, MAC: mustMAC(t, "02:00:00:00:00:0a"), IPv4: c4, HairpinV4: node4,
				Rules: flows.Resolve([]flows.Mapping{{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80}}, []netip.Addr{node4}, c4, netip.Addr{})}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			stored := golden(t, tt.file)
			p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: map[string]string{KeyHostPorts: stored}}}
			rec, ok, err := HostPortsOf(p)
			if !ok || err != nil {
				t.Fatalf("HostPortsOf: ok %v, err %v", ok, err)
			}
			pl, a, err := rec.Facts()
			if err != nil {
				t.Fatal(err)
			}
			if pl != tt.pl || !reflect.DeepEqual(a, tt.a) {
				t.Errorf("facts\n%+v\n%+v\nwant\n%+v\n%+v", pl, a, tt.pl, tt.a)
			}
			_, set, _, err := PublishHostPorts(ovsdb.OwnedPort{}, endpoint.MustParse("unix:/run/openvswitch/br0.mgmt"), tt.control, tt.pl, tt.a)
			if err != nil {
				t.Fatal(err)
			}
			if set[KeyHostPorts] != stored {
				t.Errorf("record of the facts\n%s\nwant\n%s", set[KeyHostPorts], stored)
			}
		})
	}
}

func mustMAC(t *testing.T, s string) openflow.MAC {
	t.Helper()
	m, err := openflow.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// golden is the record stored in testdata/file, without its final newline.
func golden(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// The address claims of a port: its own addresses and link-local one are
// claimed and exclude their allowed marks; its allowed single addresses
// are marked and exclude their claims; a range has no key; an allowed
// address that is its own is only claimed; an L2-only port has none.
func TestAddressClaims(t *testing.T) {
	a := netip.MustParseAddr
	ps := flows.PortSecurity{IPs: []netip.Addr{a("192.0.2.10"), a("2001:db8::10")}, LinkLocal: a("fe80::1"),
		Allowed: []netip.Prefix{netip.MustParsePrefix("192.0.2.250/32"), netip.MustParsePrefix("198.51.100.0/28"),
			netip.MustParsePrefix("192.0.2.10/32"), netip.MustParsePrefix("2001:db8::7/128")}}
	claims, excludes, allowed := AddressClaims("br0", ps)
	want := []string{"ovsflow.io/ip/br0/192.0.2.10", "ovsflow.io/ip/br0/2001:db8::10", "ovsflow.io/ip/br0/fe80::1"}
	if !slices.Equal(claims, want) {
		t.Errorf("claims: got %v, want %v", claims, want)
	}
	want = []string{"ovsflow.io/allowed-ip/br0/192.0.2.10", "ovsflow.io/allowed-ip/br0/2001:db8::10", "ovsflow.io/allowed-ip/br0/fe80::1",
		"ovsflow.io/ip/br0/192.0.2.250", "ovsflow.io/ip/br0/2001:db8::7"}
	if !slices.Equal(excludes, want) {
		t.Errorf("excludes: got %v, want %v", excludes, want)
	}
	want = []string{"ovsflow.io/allowed-ip/br0/192.0.2.250", "ovsflow.io/allowed-ip/br0/2001:db8::7"}
	if !slices.Equal(allowed, want) {
		t.Errorf("allowed: got %v, want %v", allowed, want)
	}
	for _, k := range append(claims, allowed...) {
		if br, addr, ok := AddressOfKey(k); !ok || br != "br0" || !strings.HasSuffix(k, "/"+addr.String()) {
			t.Errorf("AddressOfKey(%q): got %q, %v, %v", k, br, addr, ok)
		}
	}
	if _, _, ok := AddressOfKey(KeyClaimPrefix + "tcp/198.51.100.1:80"); ok {
		t.Errorf("AddressOfKey of a host port claim: ok, want not")
	}
	ps.L2Only = true
	if c, e, al := AddressClaims("br0", ps); c != nil || e != nil || al != nil {
		t.Errorf("L2 only: got %v %v %v, want none", c, e, al)
	}
}
