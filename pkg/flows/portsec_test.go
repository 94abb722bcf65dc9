package flows

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestPortSecurityFlows(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:0a")
	c := AttachmentCookie("ctr", "eth0")
	ll := LinkLocalOf(mac)
	if ll.String() != "fe80::ff:fe00:a" {
		t.Fatalf("LinkLocalOf(%s) = %s, want fe80::ff:fe00:a", mac, ll)
	}
	ps := PortSecurity{Cookie: c, OFPort: 7, MAC: mac, LinkLocal: ll,
		IPs: []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8:c::10")}}
	psc := "cookie=" + c.WithKind(CookieKindPortSecurity).String() + ",table=0,"
	raw := "in_port=7,reg1=0/0x1"
	port := raw + ",vlan_tci=0x0000/0x1000"
	allow := "actions=load:1->NXM_NX_REG1[0],resubmit(,0)"
	src := port + ",dl_src=02:00:00:00:00:0a"
	want := []string{
		"priority=420,icmp6," + raw + ",icmp_type=134,actions=drop",
		"priority=420,icmp6," + raw + ",icmp_type=137,actions=drop",
		"priority=420,icmp," + raw + ",icmp_type=5,actions=drop",
		"priority=420,udp," + raw + ",tp_src=67,actions=drop",
		"priority=420,udp6," + raw + ",tp_src=547,actions=drop",
		"priority=400,arp," + src + ",arp_sha=02:00:00:00:00:0a,arp_spa=192.0.2.10," + allow,
		"priority=400,ip," + src + ",nw_src=192.0.2.10," + allow,
		"priority=400,udp," + port + ",dl_dst=ff:ff:ff:ff:ff:ff,dl_src=02:00:00:00:00:0a,nw_src=0.0.0.0,nw_dst=255.255.255.255,tp_src=68,tp_dst=67," + allow,
		"priority=400,ipv6," + src + ",ipv6_src=2001:db8:c::10," + allow,
		"priority=400,ipv6," + src + ",ipv6_src=fe80::ff:fe00:a," + allow,
		"priority=400,icmp6," + src + ",ipv6_src=::,icmp_type=143," + allow,
		"priority=410,icmp6," + src + ",ipv6_src=2001:db8:c::10,icmp_type=135,icmp_code=0,nd_sll=02:00:00:00:00:0a," + allow,
		"priority=410,icmp6," + src + ",icmp_type=136,icmp_code=0,nd_target=2001:db8:c::10,nd_tll=02:00:00:00:00:0a," + allow,
		"priority=410,icmp6," + src + ",ipv6_src=2001:db8:c::10,icmp_type=135,icmp_code=0,nd_sll=00:00:00:00:00:00," + allow,
		"priority=410,icmp6," + src + ",icmp_type=136,icmp_code=0,nd_target=2001:db8:c::10,nd_tll=00:00:00:00:00:00," + allow,
		"priority=410,icmp6," + src + ",ipv6_src=fe80::ff:fe00:a,icmp_type=135,icmp_code=0,nd_sll=02:00:00:00:00:0a," + allow,
		"priority=410,icmp6," + src + ",icmp_type=136,icmp_code=0,nd_target=fe80::ff:fe00:a,nd_tll=02:00:00:00:00:0a," + allow,
		"priority=410,icmp6," + src + ",ipv6_src=fe80::ff:fe00:a,icmp_type=135,icmp_code=0,nd_sll=00:00:00:00:00:00," + allow,
		"priority=410,icmp6," + src + ",icmp_type=136,icmp_code=0,nd_target=fe80::ff:fe00:a,nd_tll=00:00:00:00:00:00," + allow,
		"priority=410,icmp6," + src + ",ipv6_src=::,icmp_type=135,icmp_code=0,nd_sll=00:00:00:00:00:00," + allow,
		"priority=405,icmp6," + raw + ",icmp_type=135,actions=drop",
		"priority=405,icmp6," + raw + ",icmp_type=136,actions=drop",
		"priority=390," + raw + ",actions=drop",
	}
	check := func(name string, got []Flow, want []string) {
		t.Helper()
		var g []string
		for _, f := range got {
			g = append(g, strings.TrimPrefix(f.String(), psc))
		}
		if strings.Join(g, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: got\n%s\nwant\n%s", name, strings.Join(g, "\n"), strings.Join(want, "\n"))
		}
	}
	check("dual-stack, untagged", PortSecurityFlows(ps), want)

	// A trunk: tagged frames allowed (ovs-vswitchd checks the VLANs), a
	// second tag is not, and the port never reaches the host port classifiers.
	l2 := PortSecurity{Cookie: c, OFPort: 7, MAC: mac, L2Only: true, VLAN: Trunk, AllowRouter: true, AllowDHCPServer: true}
	check("L2-only trunk, router and DHCP server allowed", PortSecurityFlows(l2), []string{
		"priority=205,in_port=7,actions=NORMAL",
		"priority=420," + raw + ",vlan_tci=0x1000/0x1000,dl_type=0x8100,actions=drop",
		"priority=420," + raw + ",vlan_tci=0x1000/0x1000,dl_type=0x88a8,actions=drop",
		"priority=400," + raw + ",dl_src=02:00:00:00:00:0a," + allow,
		"priority=390," + raw + ",actions=drop",
	})
	check("portSecurity off, access VLAN", PortSecurityFlows(PortSecurity{Cookie: c, OFPort: 7, MAC: mac, VLAN: Access, Disabled: true}),
		[]string{"priority=205,in_port=7,actions=NORMAL"})
	if n := len(PortSecurityFlows(PortSecurity{Cookie: c, OFPort: 7, MAC: mac, Disabled: true})); n != 0 {
		t.Errorf("portSecurity off, untagged: %d flows, want 0", n)
	}
	if b := BaseFlows(); len(b) != 1 || b[0].String() != "cookie="+SharedCookie().String()+",table=0,priority=0,actions=NORMAL" {
		t.Errorf("BaseFlows: %v", b)
	}
	if m := c.AttachmentMatch(); m != "cookie="+c.WithKind(0).String()+"/0xffff00ffffffffff" {
		t.Errorf("AttachmentMatch: %s", m)
	}
}
