package hostport

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

func TestResolvePlan(t *testing.T) {
	ofport := 5
	port := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf1", ExternalIDs: map[string]string{ovsdb.KeyBridge: "br0"}},
		Interface: ovsdb.Interface{OFPort: &ofport}}
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	node := []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:100::1")}
	v4, v6 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8:c::10")
	m := func(host string, hp uint16) flows.Mapping {
		var a netip.Addr
		if host != "" {
			a = netip.MustParseAddr(host)
		}
		return flows.Mapping{Protocol: flows.TCP, HostIP: a, HostPort: hp, ContainerPort: 80}
	}
	opts := Options{Mappings: []flows.Mapping{m("", 8080), m("127.0.0.1", 8081), m("::1", 8082), m("198.51.100.1", 8083)},
		NodeIPs: node, NodeMAC: openflow.MAC(mac), SNAT: true, OVSDB: endpoint.MustParse("unix:/run/ovs/db.sock")}
	plan, err := Resolve(opts, "ctr", "eth0", port, v4, v6, openflow.MAC(mac))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range plan.HostPorts.Rules {
		got = append(got, r.String())
	}
	want := "tcp 198.51.100.1:8080->192.0.2.10:80,tcp 198.51.100.1:8083->192.0.2.10:80,tcp [2001:db8:100::1]:8080->[2001:db8:c::10]:80"
	if strings.Join(got, ",") != want {
		t.Errorf("rules: got %s, want %s (loopback mappings left out)", strings.Join(got, ","), want)
	}
	if plan.Target.String() != "unix:/run/ovs/br0.mgmt" || plan.HostPorts.OFPort != 5 || plan.HostPorts.HairpinV4 != node[0] {
		t.Errorf("plan: %+v", plan)
	}
	opts.Mappings = []flows.Mapping{m("203.0.113.9", 8080)}
	_, err = Resolve(opts, "ctr", "eth0", port, v4, v6, openflow.MAC(mac))
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "203.0.113.9 is not a node address") {
		t.Errorf("foreign hostIP: got %v", err)
	}
	for _, tc := range []struct {
		name      string
		tag       int
		trunks    []int
		wantField string
	}{{"access VLAN 20", 20, nil, `"vlan"`}, {"trunk", 0, []int{20, 30}, `"trunk"`}} {
		p := port
		p.Port.Tag, p.Port.Trunks = &tc.tag, tc.trunks
		opts.Mappings = []flows.Mapping{m("", 8080)}
		_, err = Resolve(opts, "ctr", "eth0", p, v4, v6, openflow.MAC(mac))
		if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, tc.wantField) {
			t.Errorf("%s: got %v, want code 7 naming %s", tc.name, err, tc.wantField)
		}
	}
}
