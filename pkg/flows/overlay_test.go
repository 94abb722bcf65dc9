package flows

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// sampleOverlay is a dual-stack node with two tunnelled peers, one of them
// given twice and out of order: the flows come out sorted, once each.
func sampleOverlay() Overlay {
	return Overlay{TunnelPort: 3, BridgeMAC: openflow.MAC{0x02, 0, 0, 0, 0, 0x0a},
		Local: []netip.Prefix{netip.MustParsePrefix("2001:db8:a::/64"), netip.MustParsePrefix("198.18.1.0/24")},
		Peers: []OverlayPeer{
			{Dst: netip.MustParsePrefix("198.18.3.0/24"), Remote: netip.MustParseAddr("203.0.113.3")},
			{Dst: netip.MustParsePrefix("198.18.2.0/24"), Remote: netip.MustParseAddr("203.0.113.2")},
			{Dst: netip.MustParsePrefix("2001:db8:b::/64"), Remote: netip.MustParseAddr("203.0.113.2")},
			{Dst: netip.MustParsePrefix("198.18.2.0/24"), Remote: netip.MustParseAddr("203.0.113.2")},
		}}
}

func TestOverlayFlows(t *testing.T) {
	golden(t, "overlay.golden", OverlayBundle(sampleOverlay()).String())
	c := OverlayCookie()
	if !c.IsOurs() || c.Kind() != CookieKindOverlay || GroupOf(c) != GroupOverlay {
		t.Errorf("OverlayCookie() = %s: not an overlay cookie of the suite", c)
	}
	pre := "cookie=" + c.String() + ","
	want := []string{
		"table=0,priority=340,in_port=LOCAL,dl_dst=02:0f:c5:00:00:01,actions=goto_table:50",
		"table=0,priority=340,in_port=3,actions=goto_table:51",
		"table=50,priority=100,ip,nw_dst=198.18.2.0/24,actions=load:3405803778->NXM_NX_TUN_IPV4_DST[],load:4037->NXM_NX_TUN_ID[],output:3",
		"table=43,priority=110,ip,ct_state=+trk+rpl,nw_dst=198.18.2.0/24,actions=load:3405803778->NXM_NX_TUN_IPV4_DST[],load:4037->NXM_NX_TUN_ID[],output:3",
		"table=50,priority=100,ip,nw_dst=198.18.3.0/24,actions=load:3405803779->NXM_NX_TUN_IPV4_DST[],load:4037->NXM_NX_TUN_ID[],output:3",
		"table=43,priority=110,ip,ct_state=+trk+rpl,nw_dst=198.18.3.0/24,actions=load:3405803779->NXM_NX_TUN_IPV4_DST[],load:4037->NXM_NX_TUN_ID[],output:3",
		"table=50,priority=100,ipv6,ipv6_dst=2001:db8:b::/64,actions=load:3405803778->NXM_NX_TUN_IPV4_DST[],load:4037->NXM_NX_TUN_ID[],output:3",
		"table=43,priority=110,ipv6,ct_state=+trk+rpl,ipv6_dst=2001:db8:b::/64,actions=load:3405803778->NXM_NX_TUN_IPV4_DST[],load:4037->NXM_NX_TUN_ID[],output:3",
		"table=51,priority=100,ip,tun_src=203.0.113.2,tun_id=0xfc5,nw_dst=198.18.1.0/24,actions=set_field:02:00:00:00:00:0a->eth_dst,output:LOCAL",
		"table=51,priority=100,ipv6,tun_src=203.0.113.2,tun_id=0xfc5,ipv6_dst=2001:db8:a::/64,actions=set_field:02:00:00:00:00:0a->eth_dst,output:LOCAL",
		"table=51,priority=100,ip,tun_src=203.0.113.3,tun_id=0xfc5,nw_dst=198.18.1.0/24,actions=set_field:02:00:00:00:00:0a->eth_dst,output:LOCAL",
		"table=51,priority=100,ipv6,tun_src=203.0.113.3,tun_id=0xfc5,ipv6_dst=2001:db8:a::/64,actions=set_field:02:00:00:00:00:0a->eth_dst,output:LOCAL",
		"table=50,priority=0,actions=drop",
		"table=51,priority=0,actions=drop",
	}
	var got []string
	for _, f := range OverlayFlows(sampleOverlay()) {
		got = append(got, strings.TrimPrefix(f.String(), pre))
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("OverlayFlows: got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range OverlayFlows(sampleOverlay()) {
		switch r := DropReason(f); {
		case f.Table == TableOverlaySend && f.Priority == PriorityOverlayDrop && r != ReasonOverlayNoPeer,
			f.Table == TableOverlayReceive && f.Priority == PriorityOverlayDrop && r != ReasonOverlayRefused:
			t.Errorf("flow %s: reason %q", f, r)
		}
	}
}

// An IPv6 tunnel loads its 128-bit destination in two halves; no tunnel
// port or MAC, no flows; no peers: the classifier and the drops only.
func TestOverlayFlowsEdges(t *testing.T) {
	o := Overlay{TunnelPort: 9, BridgeMAC: openflow.MAC{2, 0, 0, 0, 0, 1},
		Local: []netip.Prefix{netip.MustParsePrefix("2001:db8:a::/64")},
		Peers: []OverlayPeer{{Dst: netip.MustParsePrefix("2001:db8:b::/64"), Remote: netip.MustParseAddr("2001:db8:2::2")}}}
	fl := OverlayFlows(o)
	want := "actions=load:2306139568115679232->NXM_NX_TUN_IPV6_DST[64..127],load:2->NXM_NX_TUN_IPV6_DST[0..63],load:4037->NXM_NX_TUN_ID[],output:9"
	if len(fl) != 7 || !strings.HasSuffix(fl[2].String(), want) || !strings.HasSuffix(fl[3].String(), want) {
		t.Errorf("IPv6 tunnel: got %d flows, the send %s; want its actions %s", len(fl), fl[2], want)
	}
	if !strings.Contains(fl[4].String(), "tun_ipv6_src=2001:db8:2::2,tun_id=0xfc5,ipv6_dst=2001:db8:a::/64") {
		t.Errorf("IPv6 tunnel: receive %s", fl[4])
	}
	for _, bad := range []Overlay{{BridgeMAC: o.BridgeMAC}, {TunnelPort: 9}, {TunnelPort: openflow.PortLocal, BridgeMAC: o.BridgeMAC}} {
		if fl := OverlayFlows(bad); len(fl) != 0 {
			t.Errorf("OverlayFlows(%+v): %d flows, want none", bad, len(fl))
		}
	}
	if fl := OverlayFlows(Overlay{TunnelPort: 9, BridgeMAC: o.BridgeMAC}); len(fl) != 4 {
		t.Errorf("no peers: %d flows, want the two classifiers and the two drops", len(fl))
	}
}
