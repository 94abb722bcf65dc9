package flows

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

func TestPortSecurityFlows(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:0a")
	c := AttachmentCookie("ctr", "eth0")
	ll := LinkLocalOf(mac)
	if ll.String() != "fe80::ff:fe00:a" {
		t.Fatalf("LinkLocalOf(%s) = %s, want fe80::ff:fe00:a", mac, ll)
	}
	ps := PortSecurity{Cookie: c, OFPort: 7, MAC: openflow.MAC(mac), LinkLocal: ll,
		IPs: []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8:c::10")}}
	psc := "cookie=" + c.WithKind(CookieKindPortSecurity).String() + ",table=0,"
	raw := "in_port=7,reg1=0/0x1"
	allow := "actions=load:1->NXM_NX_REG1[0],resubmit(,0)"
	// The whole bundles, guards, fragments and neighbour discovery included.
	golden(t, "portsec_dual.golden", PortSecurityBundle(ps).String())
	v6only := ps
	v6only.IPs = ps.IPs[1:]
	v6only.AllowRouter = true
	golden(t, "portsec_v6_allowrouter.golden", PortSecurityBundle(v6only).String())
	// Allowed addresses (an IPv4 prefix, an IPv6 VIP) and VRRP from them.
	vip := ps
	vip.Allowed = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/28"), netip.MustParsePrefix("2001:db8:c::100/128")}
	vip.AllowVRRP = true
	golden(t, "portsec_allowed_vrrp.golden", PortSecurityBundle(vip).String())
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
	// A trunk: tagged frames allowed (ovs-vswitchd checks the VLANs), a
	// second tag is not, and the port never reaches the host port classifiers.
	l2 := PortSecurity{Cookie: c, OFPort: 7, MAC: openflow.MAC(mac), L2Only: true, VLAN: Trunk, AllowRouter: true, AllowDHCPServer: true}
	check("L2-only trunk, router and DHCP server allowed", PortSecurityFlows(l2), []string{
		"priority=205,in_port=7,actions=NORMAL",
		"priority=420," + raw + ",vlan_tci=0x1000/0x1000,dl_type=0x8100,actions=drop",
		"priority=420," + raw + ",vlan_tci=0x1000/0x1000,dl_type=0x88a8,actions=drop",
		"priority=420," + raw + ",dl_type=0x0800,nw_proto=112,actions=drop",
		"priority=420," + raw + ",dl_type=0x86dd,nw_proto=112,actions=drop",
		"priority=400," + raw + ",dl_src=02:00:00:00:00:0a," + allow,
		"priority=390," + raw + ",actions=drop",
	})
	check("portSecurity off, access VLAN", PortSecurityFlows(PortSecurity{Cookie: c, OFPort: 7, MAC: openflow.MAC(mac), VLAN: Access, Disabled: true}),
		[]string{"priority=205,in_port=7,actions=NORMAL"})
	if n := len(PortSecurityFlows(PortSecurity{Cookie: c, OFPort: 7, MAC: openflow.MAC(mac), Disabled: true})); n != 0 {
		t.Errorf("portSecurity off, untagged: %d flows, want 0", n)
	}
	shared := "cookie=" + SharedCookie().String() + ",table=0,"
	var base []string
	for _, f := range BaseFlows() {
		base = append(base, f.String())
	}
	if !slices.Equal(base, []string{
		shared + "priority=0,actions=NORMAL",
		shared + "priority=330,icmp6,in_port=LOCAL,icmp_type=137,actions=drop",
	}) {
		t.Errorf("BaseFlows: %q", base)
	}
	if m := c.AttachmentMatch(); m != "cookie="+c.WithKind(0).String()+"/0xffff00ffffffffff" {
		t.Errorf("AttachmentMatch: %s", m)
	}
}

// FuzzPortSecurityFlows checks, for arbitrary addresses and options, what
// the port security flows promise: every flow is valid and matches the
// port's unchecked frames; neighbour advertisements and duplicate address
// detection only from and for the container's own addresses; the DHCP
// server guards on both ports, for whole datagrams and for fragments; and
// fragments go through conntrack once.
func FuzzPortSecurityFlows(f *testing.F) {
	f.Add([]byte{2, 0, 0, 0, 0, 0xa}, "192.0.2.10", "2001:db8:c::10", uint8(0), uint32(7))
	f.Add([]byte{2, 0, 0, 0, 0, 0xb}, "", "2001:db8:c::11", uint8(0xff), uint32(0xfeff))
	f.Add([]byte{2, 0, 0, 0, 0, 0xc}, "192.0.2.12", "", uint8(0x12), uint32(1))
	f.Fuzz(func(t *testing.T, hw []byte, a4, a6 string, opts uint8, ofport uint32) {
		if len(hw) != 6 || ofport == 0 || ofport >= 0xff00 {
			return
		}
		mac := net.HardwareAddr(hw)
		ps := PortSecurity{Cookie: AttachmentCookie(a4, a6), OFPort: ofport, MAC: openflow.MAC(mac), LinkLocal: LinkLocalOf(mac),
			L2Only: opts&1 != 0, AllowRouter: opts&2 != 0, AllowDHCPServer: opts&4 != 0, VLAN: PortVLAN(opts >> 3 % 3), Disabled: opts&0x40 != 0}
		own := map[string]bool{ps.LinkLocal.String(): true}
		for _, s := range []string{a4, a6} {
			if a, err := netip.ParseAddr(s); err == nil {
				ps.IPs = append(ps.IPs, a)
				if a = a.Unmap().WithZone(""); !a.IsUnspecified() && !a.IsMulticast() {
					own[a.String()] = true
				}
			}
		}
		var all []string
		for _, fl := range PortSecurityFlows(ps) {
			s := fl.String()
			all = append(all, s)
			if err := fl.Validate(); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			if !strings.Contains(s, fmt.Sprintf("in_port=%d,", ofport)) {
				t.Fatalf("%s: not of in_port=%d", s, ofport)
			}
			field := func(k string) string {
				for _, kv := range strings.Split(s, ",") {
					if v, ok := strings.CutPrefix(kv, k+"="); ok {
						return v
					}
				}
				return ""
			}
			if !strings.HasSuffix(s, "actions=drop") && field("icmp_type") == "136" && (!own[field("ipv6_src")] || !own[field("nd_target")]) {
				t.Fatalf("%s: allows an NA not from and for the container's own addresses %v", s, own)
			}
			if !strings.HasSuffix(s, "actions=drop") && field("icmp_type") == "135" && field("ipv6_src") == "::" && !own[field("nd_target")] {
				t.Fatalf("%s: allows DAD for an address not the container's", s)
			}
			if field("nw_frag") != "" && (field("reg1") != "0/0x3" || !strings.Contains(s, "load:1->NXM_NX_REG1[1],ct(zone=")) {
				t.Fatalf("%s: a fragment flow that does not send it through ct once", s)
			}
		}
		text := strings.Join(all, "\n")
		if ps.Disabled {
			return
		}
		for _, want := range []string{"udp,in_port=%d,reg1=0/0x1,tp_dst=68,", "udp6,in_port=%d,reg1=0/0x1,tp_dst=546,",
			"ip,in_port=%d,reg1=0x2/0x3,ct_state=+trk-inv,ct_nw_proto=17,ct_tp_dst=68,", "ipv6,in_port=%d,reg1=0x2/0x3,ct_state=+trk-inv,ct_nw_proto=17,ct_tp_src=547,"} {
			if got := strings.Contains(text, fmt.Sprintf(want, ofport)); got == ps.AllowDHCPServer {
				t.Fatalf("allowDHCPServer %v: guard %q present %v:\n%s", ps.AllowDHCPServer, fmt.Sprintf(want, ofport), got, text)
			}
		}
		if frag := strings.Contains(text, "nw_frag=yes"); frag == (ps.L2Only && ps.AllowRouter && ps.AllowDHCPServer) {
			t.Fatalf("fragment flows present %v:\n%s", frag, text)
		}
	})
}
