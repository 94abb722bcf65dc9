package record

import (
	"net"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// The host port record gives back, through its JSON in external_ids, the
// pipeline and attachment it was made from.
func TestHostPortsRoundTrip(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	node := netip.MustParseAddr("198.51.100.1")
	pl := flows.Pipeline{DNATZone: 64000, SNATZone: 64001, ContainerZone: 64002, Limit: 100, ContainerLimit: 200}
	a := flows.Attachment{Cookie: flows.AttachmentCookie("ctr", "eth0"), OFPort: 7, MAC: mac,
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
	gotPl, gotA, err := rec.Attachment()
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
