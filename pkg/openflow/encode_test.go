package openflow_test

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	of "github.com/ovsflow/ovs-cni/pkg/openflow"
)

var (
	node4 = netip.MustParseAddr("198.51.100.1")
	node6 = netip.MustParseAddr("2001:db8:100::1")
	ctr4  = netip.MustParseAddr("192.0.2.10")
	ctr6  = netip.MustParseAddr("2001:db8:c::10")
	mac   = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x0a}
)

// goldenAttachments are the attachments of pkg/flows' golden bundles.
func goldenAttachments(t testing.TB) map[string]flows.HostPorts {
	t.Helper()
	sample := flows.HostPorts{
		Cookie: flows.AttachmentCookie("ctr-a", "eth0"), OFPort: 10, MAC: of.MAC(mac), IPv4: ctr4, IPv6: ctr6,
		HairpinV4: node4, HairpinV6: node6, SNAT: true,
		Rules: flows.Resolve([]flows.Mapping{
			{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80},
			{Protocol: flows.UDP, HostPort: 5353, ContainerPort: 53},
		}, []netip.Addr{node4, node6}, ctr4, ctr6),
	}
	masq := sample
	masq.MasqAll = true
	v4only := sample
	v4only.IPv6, v4only.HairpinV6, v4only.SNAT = netip.Addr{}, netip.Addr{}, false
	v4only.Rules = flows.Resolve([]flows.Mapping{{Protocol: flows.SCTP, HostIP: node4, HostPort: 3868, ContainerPort: 3868}},
		[]netip.Addr{node4, node6}, ctr4, netip.Addr{})
	return map[string]flows.HostPorts{"bundle_snat.golden": sample, "bundle_masqall.golden": masq, "bundle_v4only_nosnat.golden": v4only}
}

// corpus returns every flow shape pkg/flows produces and more: the golden
// bundles, IPv4-only, IPv6-only and dual-stack attachments with every
// protocol, the port security bundles of every address mix, tombstones,
// and edge cases of the binding that the pipeline does not use today.
func corpus(t testing.TB) map[string]of.Bundle {
	t.Helper()
	out := map[string]of.Bundle{}
	for name, a := range goldenAttachments(t) {
		out[name] = flows.DefaultPipeline().Bundle(a)
	}
	mappings := []flows.Mapping{
		{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80},
		{Protocol: flows.UDP, HostPort: 5353, ContainerPort: 53},
		{Protocol: flows.SCTP, HostPort: 3868, ContainerPort: 3868},
	}
	p := flows.Pipeline{DNATZone: 7, SNATZone: 65535}
	for _, tt := range []struct {
		name       string
		v4, v6     netip.Addr
		snat, masq bool
	}{
		{"dual_snat", ctr4, ctr6, true, false},
		{"dual_masq", ctr4, ctr6, true, true},
		{"v4_masq", ctr4, netip.Addr{}, false, true},
		{"v6_snat", netip.Addr{}, ctr6, true, false},
		{"v6_plain", netip.Addr{}, ctr6, false, false},
	} {
		a := flows.HostPorts{
			Cookie: flows.AttachmentCookie("ctr-"+tt.name, "eth0"), OFPort: 0xfeff, MAC: of.MAC(mac),
			IPv4: tt.v4, IPv6: tt.v6, HairpinV4: node4, HairpinV6: node6,
			Rules: flows.Resolve(mappings, []netip.Addr{node4, node6}, tt.v4, tt.v6),
			SNAT:  tt.snat, MasqAll: tt.masq,
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		out["bundle_"+tt.name] = p.Bundle(a)
	}
	var shared of.Bundle
	for _, f := range flows.DefaultPipeline().SharedFlows() {
		shared = append(shared, f)
	}
	out["shared"] = shared
	for _, tt := range []struct {
		name   string
		ips    []netip.Addr
		l2     bool
		vlan   flows.PortVLAN
		allow  bool
		off    bool
		secure bool
	}{
		{"dual", []netip.Addr{ctr4, ctr6}, false, flows.Untagged, false, false, false},
		{"v4", []netip.Addr{ctr4}, false, flows.Access, false, false, false},
		{"v6", []netip.Addr{ctr6}, false, flows.Trunk, false, false, true},
		{"none", nil, false, flows.Untagged, true, false, false},
		{"l2only", nil, true, flows.Trunk, false, false, false},
		{"off", nil, false, flows.Access, false, true, false},
	} {
		ps := flows.PortSecurity{Cookie: flows.AttachmentCookie("ps-"+tt.name, "eth0"), OFPort: 7, MAC: of.MAC(mac), IPs: tt.ips, L2Only: tt.l2,
			LinkLocal: flows.LinkLocalOf(mac), VLAN: tt.vlan, AllowRouter: tt.allow, AllowDHCPServer: tt.allow, Disabled: tt.off}
		var base []flows.Flow
		if tt.secure {
			base = flows.BaseFlows()
		}
		out["portsec_"+tt.name] = flows.PortSecurityBundle(ps, base...)
	}
	gws := []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24"), netip.MustParsePrefix("2001:db8:c::1/64")}
	out["portsec_gateway"] = flows.PortSecurityBundle(flows.PortSecurity{Cookie: flows.AttachmentCookie("ps-gw", "eth0"), OFPort: 7,
		MAC: of.MAC(mac), IPs: []netip.Addr{ctr4, ctr6}, LinkLocal: flows.LinkLocalOf(mac), Gateways: gws})
	out["gateway"] = flows.GatewayBundle(gws...)
	out["tombstone"] = append(flows.TombstoneBundle(7, 0xfeff), flows.AttachmentCookie("ps-dual", "eth0").AttachmentDelete())
	out["edge"] = edge()
	// The overlay's, over IPv4 and over IPv6 (tun_src, tun_ipv6_src, the
	// loads of the tunnel's destination and key).
	for name, remote := range map[string]netip.Addr{"overlay_v4": netip.MustParseAddr("203.0.113.2"), "overlay_v6": netip.MustParseAddr("2001:db8:2::2")} {
		out[name] = flows.OverlayBundle(flows.Overlay{TunnelPort: 3, BridgeMAC: of.MAC(mac),
			Local: []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24"), netip.MustParsePrefix("2001:db8:1::/64")},
			Peers: []flows.OverlayPeer{{Dst: netip.MustParsePrefix("198.18.2.0/24"), Remote: remote},
				{Dst: netip.MustParsePrefix("2001:db8:2::/64"), Remote: remote}}})
	}
	return out
}

// edge holds forms pkg/flows does not emit today; each is checked against
// ovs-ofctl like the rest.
func edge() of.Bundle {
	ip, ip6 := of.Match{}.EthType(of.EthIPv4), of.Match{}.EthType(of.EthIPv6)
	pfx := netip.MustParsePrefix
	m := func(s string) of.MAC { hw, _ := net.ParseMAC(s); a, _ := of.MACFrom(hw); return a }
	f := func(prio uint16, match of.Match, as ...of.Action) of.Flow {
		return of.Flow{Cookie: 0xab, Table: 3, Priority: prio, Match: match, Actions: as}
	}
	return of.Bundle{
		of.Delete{Cookie: 0xab, Mask: 0xff},
		of.Flow{Cookie: 171, Table: 3, Priority: 0x10, Match: of.Match{}.Reg(1, 5, 1).Reg(15, 7, ^uint32(0)).CTState(0, of.CTTrk),
			Actions: of.Actions{of.Resubmit{Table: 5}}},
		f(11, of.Match{}.CTState(of.CTNew|of.CTDNAT, of.CTNew|of.CTEst|of.CTDNAT), of.OutputReg{Src: of.Reg(3).Bits(16, 31)}),
		f(12, ip.IPSrc(pfx("10.1.2.3/8")).IPDst(pfx("0.0.0.0/0")), of.CT{Commit: true, Zone: 0x10,
			NAT:  &of.NAT{Src: true, Addr: netip.IPv4Unspecified()},
			Exec: of.Actions{of.Load{Value: 0xff, Dst: of.FieldCTMark.All()}, of.Move{Src: of.Reg(0).Bit(5), Dst: of.FieldCTLabel.Bit(127)}}}),
		f(13, ip6.IPDst(pfx("2001:db8::1/64")), of.CT{Commit: true, NAT: &of.NAT{Dst: true, Addr: netip.MustParseAddr("2001:db8::2")}, Table: of.Table(4)}),
		f(14, of.Match{}.Proto(of.EthIPv4, of.ProtoICMP).ICMPType(8).ICMPCode(0).EthDst(m("02:00:00:00:00:01")),
			of.SetField{Field: of.FieldEthSrc, MAC: m("02:00:00:00:00:02")}, of.GotoTable{Table: 9}),
		f(15, of.Match{}.EthType(of.EthARP).ARPTPA(pfx("10.0.0.1/32")).ARPTHA(m("02:00:00:00:00:03")).ARPSPA(pfx("10.0.0.0/24")), of.Normal),
		f(16, of.Match{}.Proto(of.EthIPv4, of.ProtoTCP).TPSrc(0x50).TPDst(0), of.CT{Commit: true, Zone: 1,
			NAT: &of.NAT{Dst: true, Addr: netip.MustParseAddr("10.0.0.1")}, Table: of.Table(5)}),
		f(17, of.Match{}.Proto(of.EthIPv6, of.ProtoUDP).TPSrc(1)),
		f(18, of.Match{}.Proto(of.EthIPv6, of.ProtoSCTP).InPort(254),
			of.Move{Src: of.Reg(0).Bit(5), Dst: of.Reg(1).Bit(7)}, of.Load{Value: 0, Dst: of.Reg(2).Bits(0, 15)}, of.Output{Port: 0}),
		f(19, of.Match{}.Proto(of.EthIPv6, of.ProtoICMPv6).ICMPType(135).ICMPCode(0).NDTarget(netip.MustParseAddr("fe80::1")).
			NDSLL(m("02:00:00:00:00:04")).VLANTCI(0x1005, 0x1fff)),
		f(20, ip.CTState(of.CTTrk, of.CTTrk|of.CTInv).CTNWProto(of.ProtoUDP).CTTPSrc(67).CTTPDst(68).IPFrag(of.FragAny, of.FragAny)),
		f(21, ip6.CTState(of.CTTrk|of.CTNew, of.CTTrk|of.CTNew).CTNWProto(of.ProtoUDP).CTTPDst(546).IPFrag(of.FragAny|of.FragLater, of.FragAny|of.FragLater)),
		f(22, ip.IPFrag(0, of.FragAny)), f(23, ip6.IPFrag(of.FragAny, of.FragAny|of.FragLater)), f(24, ip.IPFrag(0, of.FragLater)),
		of.Flow{Cookie: 0xac, Table: 3, Priority: 0, HardTimeout: 30, Match: ip6, Actions: of.Actions{of.CT{Zone: 2, Table: of.Table(4)}}},
	}
}

// TestGoldenText checks that the typed bundles render pkg/flows' golden
// files byte for byte.
func TestGoldenText(t *testing.T) {
	for name, a := range goldenAttachments(t) {
		want, err := os.ReadFile(filepath.Join("../flows/testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if got := flows.DefaultPipeline().Bundle(a).String(); got != string(want) {
			t.Errorf("%s:\ngot\n%s\nwant\n%s", name, got, want)
		}
	}
}

// TestEncodeAsOvsOfctl decodes each flow_mod with `ovs-ofctl ofp-print` and
// compares it with what `ovs-ofctl parse-flow` makes of the flow's text:
// the same message, field by field, as OVS reads it.
func TestEncodeAsOvsOfctl(t *testing.T) {
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		t.Skip("SKIPPED: ovs-ofctl is not installed")
	}
	for name, bundle := range corpus(t) {
		t.Run(name, func(t *testing.T) {
			for i, m := range bundle {
				f, isFlow := m.(of.Flow)
				if !isFlow {
					continue
				}
				out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow14", "parse-flow", f.String()).CombinedOutput()
				if err != nil {
					t.Fatalf("parse-flow %s: %v: %s", f, err, out)
				}
				want := lastLine(string(out))
				got, err := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(of.FlowMod(f))).CombinedOutput()
				if err != nil {
					t.Fatalf("ofp-print of entry %d: %v: %s", i, err, got)
				}
				if g := lastLine(string(got)); g != want {
					t.Errorf("entry %d %s:\ngot  %s\nwant %s", i, f, g, want)
				}
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// TestRoundTrip decodes what every flow of the corpus encodes to and gets
// the same value back.
func TestRoundTrip(t *testing.T) {
	for name, bundle := range corpus(t) {
		for _, m := range bundle {
			f, ok := m.(of.Flow)
			if !ok {
				continue
			}
			gm, ga, err := of.RoundTrip(f)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, f, err)
			}
			if gm != f.Match || ga.String() != f.Actions.String() {
				t.Errorf("%s: got %s actions=%s, want %s", name, gm, ga, f)
			}
		}
	}
}

// TestValidate rejects flows OVS would reject for a missing prerequisite or
// that cannot be encoded.
func TestValidate(t *testing.T) {
	ip := of.Match{}.EthType(of.EthIPv4)
	tests := []struct {
		name string
		f    of.Flow
		want error
	}{
		{"nw_src without ip", of.Flow{Match: of.Match{}.IPSrc(of.Host(ctr4))}, of.ErrPrerequisite},
		{"IPv4 address in ipv6", of.Flow{Match: of.Match{}.EthType(of.EthIPv6).IPSrc(of.Host(ctr4))}, of.ErrPrerequisite},
		{"tp_dst without transport", of.Flow{Match: ip.TPDst(80)}, of.ErrPrerequisite},
		{"nd_target without icmp_type", of.Flow{Match: of.Match{}.Proto(of.EthIPv6, of.ProtoICMPv6).NDTarget(ctr6)}, of.ErrPrerequisite},
		{"icmp_type on tcp", of.Flow{Match: of.Match{}.Proto(of.EthIPv4, of.ProtoTCP).ICMPType(1)}, of.ErrPrerequisite},
		{"arp_spa on ip", of.Flow{Match: ip.ARPSPA(of.Host(ctr4))}, of.ErrPrerequisite},
		{"nw_frag without ip", of.Flow{Match: of.Match{}.IPFrag(of.FragAny, of.FragAny)}, of.ErrPrerequisite},
		{"ct_tp_dst without -inv", of.Flow{Match: ip.CTState(of.CTTrk, of.CTTrk).CTNWProto(of.ProtoUDP).CTTPDst(68)}, of.ErrPrerequisite},
		{"ct_tp_dst without ct_nw_proto", of.Flow{Match: ip.CTState(of.CTTrk, of.CTTrk|of.CTInv).CTTPDst(68)}, of.ErrPrerequisite},
		{"move of different widths", of.Flow{Actions: of.Actions{of.Move{Src: of.Reg(1).Bits(0, 15), Dst: of.Reg(2).Bits(0, 7)}}}, of.ErrInvalidAction},
		{"subfield out of the field", of.Flow{Actions: of.Actions{of.Move{Src: of.Reg(1).Bits(0, 32), Dst: of.Reg(2).Bits(0, 32)}}}, of.ErrInvalidAction},
		{"load too wide a value", of.Flow{Actions: of.Actions{of.Load{Value: 2, Dst: of.Reg(1).Bit(0)}}}, of.ErrInvalidAction},
		{"goto_table not last", of.Flow{Actions: of.Actions{of.GotoTable{Table: 3}, of.Normal}}, of.ErrInvalidAction},
		{"output to a reserved port", of.Flow{Actions: of.Actions{of.Output{Port: 0xfffe}}}, of.ErrInvalidAction},
		{"NORMAL inside ct", of.Flow{Match: ip, Actions: of.Actions{of.CT{Exec: of.Actions{of.Normal}}}}, of.ErrInvalidAction},
	}
	for _, tt := range tests {
		if err := tt.f.Validate(); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
	for name, bundle := range corpus(t) {
		for _, m := range bundle {
			if f, ok := m.(of.Flow); ok {
				if err := f.Validate(); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		}
	}
}

// TestCTFlushAsOvsOfctl prints each NXT_CT_FLUSH with `ovs-ofctl ofp-print`
// and checks that OVS reads the zone and the tuple written.
func TestCTFlushAsOvsOfctl(t *testing.T) {
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		t.Skip("SKIPPED: ovs-ofctl is not installed")
	}
	a := goldenAttachments(t)["bundle_snat.golden"]
	fl := flows.ConntrackFlushes(flows.DefaultPipeline(), append(a.Rules, flows.Rule{Protocol: flows.SCTP, NodeIP: node6, HostPort: 9, ContainerIP: ctr6, ContainerPort: 9}))
	if len(fl) != 6 {
		t.Fatalf("got %d flushes, want 6: %v", len(fl), fl)
	}
	for _, c := range fl {
		out, err := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(of.CTFlushMsg(c))).CombinedOutput()
		if err != nil {
			t.Fatalf("ofp-print of %s: %v: %s", c, err, out)
		}
		got := lastLine(string(out))
		dst := "ct_nw_dst=" + c.Dst.String()
		if c.Dst.Is6() {
			dst = "ct_ipv6_dst=" + c.Dst.String()
		}
		for _, want := range []string{"NXT_CT_FLUSH", "zone=" + itoa(int(c.Zone)), dst, "ct_nw_proto=" + itoa(int(c.Proto)), "ct_tp_dst=" + itoa(int(c.DstPort))} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: ofp-print says %q, without %q", c, got, want)
			}
		}
		t.Logf("%s: %s", c, got)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestApplyRejectsBeforeConnecting(t *testing.T) {
	bad := of.Bundle{of.Flow{Priority: 1}, of.Flow{Priority: 2, Match: of.Match{}.TPDst(80)}}
	if err := of.Apply(context.Background(), ep("unix:/nonexistent/br0.mgmt"), bad); !errors.Is(err, of.ErrPrerequisite) {
		t.Errorf("got %v, want ErrPrerequisite", err)
	}
	// An ssl: endpoint parses (OVSDB takes it), and a zero one is none.
	for _, target := range []endpoint.Endpoint{ep("ssl:127.0.0.1:6653"), {}, {Network: "punix", Address: "/x"}} {
		if err := of.Apply(context.Background(), target, nil); !errors.Is(err, of.ErrUnsupported) {
			t.Errorf("target %q: got %v, want ErrUnsupported", target, err)
		}
	}
	if err := of.DeleteFlows(context.Background(), ep("unix:/nonexistent/br0.mgmt"), of.Delete{Cookie: 1, Mask: 1}); err == nil || errors.Is(err, of.ErrTimeout) {
		t.Errorf("got %v, want a connection error", err)
	}
}

// codecBundles are one ADD's bundles: ovs-portmap's for a dual-stack
// attachment with two host ports, ovs-bridge's port security.
func codecBundles(b *testing.B) map[string]of.Bundle {
	c := corpus(b)
	return map[string]of.Bundle{"portmap": c["bundle_snat.golden"], "bridge": c["portsec_dual"]}
}

// BenchmarkEncodeBundle encodes the flow_mods of one ADD's bundle
// (docs/design.md, "OpenFlow codec: why hand-written").
func BenchmarkEncodeBundle(b *testing.B) {
	for name, bundle := range codecBundles(b) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, m := range bundle {
					of.FlowMod(m)
				}
			}
		})
	}
}

// BenchmarkDecodeBundle decodes the match and instructions of the same
// flow_mods back into flows, as Dump does for CHECK and reconcile.
func BenchmarkDecodeBundle(b *testing.B) {
	for name, bundle := range codecBundles(b) {
		var msgs [][]byte
		for _, m := range bundle {
			if _, ok := m.(of.Flow); ok {
				msgs = append(msgs, of.HandFlowMod(m))
			}
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, fm := range msgs {
					if _, _, err := of.DecodeFlowMod(fm); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
