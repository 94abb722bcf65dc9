package flows

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

var (
	gw4 = netip.MustParsePrefix("192.0.2.1/24")
	gw6 = netip.MustParsePrefix("2001:db8:c::1/64")
)

func TestGatewayFlows(t *testing.T) {
	golden(t, "gateway_dual.golden", GatewayBundle(gw4, gw6).String())
	c := GatewayCookie(gw4)
	if !c.IsOurs() || c.Kind() != CookieKindGateway || GroupOf(c) != GroupGateway {
		t.Errorf("GatewayCookie(%s) = %s: not a gateway cookie of the suite", gw4, c)
	}
	if GatewayCookie(gw6) == c {
		t.Errorf("two gateways share cookie %s", c)
	}
	for _, g := range []netip.Prefix{{}, netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("0.0.0.0/24"),
		netip.MustParsePrefix("192.0.2.1/0"), netip.MustParsePrefix("ff02::1/64")} {
		if fl := GatewayFlows(g); len(fl) != 0 {
			t.Errorf("GatewayFlows(%s): got %d flows, want none", g, len(fl))
		}
	}
	want := []string{
		"priority=315,ip,in_port=LOCAL,reg1=0/0x8,nw_src=192.0.2.1,actions=load:1->NXM_NX_REG1[3],resubmit(,0)",
		"priority=310,ip,in_port=LOCAL,reg1=0/0x8,nw_src=192.0.2.0/24,nw_dst=192.0.2.0/24," +
			"actions=load:1->NXM_NX_REG1[3],ct(commit,zone=64004,exec(load:1->NXM_NX_CT_MARK[0],move:NXM_OF_ETH_SRC[]->NXM_NX_CT_LABEL[0..47])),resubmit(,0)",
	}
	var got []string
	for _, f := range GatewayFlows(gw4) {
		got = append(got, strings.TrimPrefix(f.String(), "cookie="+c.String()+",table=0,"))
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("GatewayFlows(%s): got\n%s\nwant\n%s", gw4, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestGatewayPortFlows: a port with gateways gets the lookup, the skips and
// the reply steering, with port security and without, and none off VLAN 0.
func TestGatewayPortFlows(t *testing.T) {
	c := AttachmentCookie("ctr", "eth0")
	ps := PortSecurity{Cookie: c, OFPort: 7, MAC: openflow.MAC(mac), LinkLocal: LinkLocalOf(mac),
		IPs: []netip.Addr{ctr4, ctr6}, Gateways: []netip.Prefix{gw4, gw6}}
	golden(t, "portsec_dual_gateway.golden", PortSecurityBundle(ps).String())
	psc := "cookie=" + c.WithKind(CookieKindPortSecurity).String() + ",table=0,"
	want := []string{
		"priority=320,in_port=7,reg1=0x8/0x8,ct_state=+trk+rpl,ct_zone=64004,ct_mark=0x1/0x1,actions=move:NXM_NX_CT_LABEL[0..47]->NXM_OF_ETH_DST[],output:LOCAL",
		"priority=315,ip,in_port=7,reg1=0/0x8,nw_dst=192.0.2.1,actions=load:1->NXM_NX_REG1[3],resubmit(,0)",
		"priority=310,ip,in_port=7,reg1=0/0x8,vlan_tci=0x0000/0x1000,nw_dst=192.0.2.0/24,actions=load:1->NXM_NX_REG1[3],ct(zone=64004,table=0)",
		"priority=315,ipv6,in_port=7,reg1=0/0x8,ipv6_dst=2001:db8:c::1,actions=load:1->NXM_NX_REG1[3],resubmit(,0)",
		"priority=310,ipv6,in_port=7,reg1=0/0x8,vlan_tci=0x0000/0x1000,ipv6_dst=2001:db8:c::/64,actions=load:1->NXM_NX_REG1[3],ct(zone=64004,table=0)",
		"priority=315,icmp6,in_port=7,reg1=0/0x8,icmp_type=135,actions=load:1->NXM_NX_REG1[3],resubmit(,0)",
		"priority=315,icmp6,in_port=7,reg1=0/0x8,icmp_type=136,actions=load:1->NXM_NX_REG1[3],resubmit(,0)",
	}
	off := ps
	off.Disabled = true
	var got []string
	for _, f := range PortSecurityFlows(off) {
		got = append(got, strings.TrimPrefix(f.String(), psc))
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
		if n := Name(f); strings.HasPrefix(n, "a flow of") {
			t.Errorf("%s: no name of its own (%q)", f, n)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("portSecurity off, with gateways: got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// With port security, every gateway flow is among the port's flows,
	// below its allow and drop flows (which see the frame first) and above
	// the host port classifiers.
	all := PortSecurityFlows(ps)
	for _, w := range want {
		found := false
		for _, f := range all {
			found = found || strings.TrimPrefix(f.String(), psc) == w
		}
		if !found {
			t.Errorf("port security on: missing %s", w)
		}
	}
	for _, p := range []uint16{PriorityGatewayReply, PriorityGatewaySkip, PriorityGatewayTrack} {
		if p >= PriorityPortSecDrop || p <= PriorityReplyRelated || p <= PriorityVLANIsolation {
			t.Errorf("priority %d: not between the host port classifiers and port security", p)
		}
	}
	for _, vlan := range []PortVLAN{Access, Trunk} {
		v := off
		v.VLAN = vlan
		if fl := PortSecurityFlows(v); len(fl) != 1 || fl[0].Priority != PriorityVLANIsolation {
			t.Errorf("VLAN %d: got %v, want the VLAN isolation flow only", vlan, fl)
		}
	}
	none := off
	none.Gateways = nil
	if fl := PortSecurityFlows(none); len(fl) != 0 {
		t.Errorf("no gateways, port security off: got %v, want none", fl)
	}
	v4 := off
	v4.Gateways = []netip.Prefix{gw4}
	if fl := PortSecurityFlows(v4); len(fl) != 3 {
		t.Errorf("IPv4 gateway only: got %d flows, want 3 (no ND skips)", len(fl))
	}
}
