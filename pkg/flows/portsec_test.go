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
	ps := PortSecurity{Cookie: c, OFPort: 7, MAC: mac, IPs: []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8:c::10")}}
	psc := c.WithKind(CookieKindPortSecurity).String()
	want := []string{
		"cookie=" + psc + ",table=0,priority=400,arp,in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a,arp_sha=02:00:00:00:00:0a,arp_spa=192.0.2.10,actions=load:1->NXM_NX_REG1[0],resubmit(,0)",
		"cookie=" + psc + ",table=0,priority=400,ip,in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a,nw_src=192.0.2.10,actions=load:1->NXM_NX_REG1[0],resubmit(,0)",
		"cookie=" + psc + ",table=0,priority=400,udp,in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a,nw_src=0.0.0.0,tp_src=68,tp_dst=67,actions=load:1->NXM_NX_REG1[0],resubmit(,0)",
		"cookie=" + psc + ",table=0,priority=400,ipv6,in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a,ipv6_src=2001:db8:c::10,actions=load:1->NXM_NX_REG1[0],resubmit(,0)",
		"cookie=" + psc + ",table=0,priority=400,ipv6,in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a,ipv6_src=fe80::/10,actions=load:1->NXM_NX_REG1[0],resubmit(,0)",
		"cookie=" + psc + ",table=0,priority=400,icmp6,in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a,ipv6_src=::,icmp_type=135,icmp_code=0,actions=load:1->NXM_NX_REG1[0],resubmit(,0)",
		"cookie=" + psc + ",table=0,priority=400,icmp6,in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a,ipv6_src=::,icmp_type=143,actions=load:1->NXM_NX_REG1[0],resubmit(,0)",
		"cookie=" + psc + ",table=0,priority=410,icmp6,in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a,icmp_type=136,icmp_code=0,nd_target=2001:db8:c::10,actions=load:1->NXM_NX_REG1[0],resubmit(,0)",
		"cookie=" + psc + ",table=0,priority=410,icmp6,in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a,icmp_type=136,icmp_code=0,nd_target=fe80::/10,actions=load:1->NXM_NX_REG1[0],resubmit(,0)",
		"cookie=" + psc + ",table=0,priority=405,icmp6,in_port=7,reg1=0/0x1,icmp_type=136,actions=drop",
		"cookie=" + psc + ",table=0,priority=390,in_port=7,reg1=0/0x1,actions=drop",
	}
	var got []string
	for _, f := range PortSecurityFlows(ps) {
		got = append(got, f.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	l2 := PortSecurityFlows(PortSecurity{Cookie: c, OFPort: 7, MAC: mac, L2Only: true})
	if len(l2) != 2 || l2[0].Match != "in_port=7,reg1=0/0x1,dl_src=02:00:00:00:00:0a" || l2[1].Actions != "drop" {
		t.Errorf("L2-only: %v", l2)
	}
	if m := c.AttachmentMatch(); m != "cookie="+c.WithKind(0).String()+"/0xffff00ffffffffff" {
		t.Errorf("AttachmentMatch: %s", m)
	}
}
