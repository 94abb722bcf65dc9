package openflow

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

// corpus returns every bundle pkg/flows can produce in its tests and more:
// the golden bundles, IPv4-only, IPv6-only and dual-stack attachments with
// every protocol, and the port security bundles of every address mix.
func corpus(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	golden, err := filepath.Glob("../flows/testdata/*.golden")
	if err != nil || len(golden) == 0 {
		t.Fatalf("no golden bundles in ../flows/testdata: %v", err)
	}
	for _, g := range golden {
		b, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(g)] = string(b)
	}
	var (
		node4 = netip.MustParseAddr("198.51.100.1")
		node6 = netip.MustParseAddr("2001:db8:100::1")
		ctr4  = netip.MustParseAddr("192.0.2.10")
		ctr6  = netip.MustParseAddr("2001:db8:c::10")
		mac   = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x0a}
	)
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
		a := flows.Attachment{
			Cookie: flows.AttachmentCookie("ctr-"+tt.name, "eth0"), OFPort: 0xfeff, MAC: mac,
			IPv4: tt.v4, IPv6: tt.v6, HairpinV4: node4, HairpinV6: node6,
			Rules: flows.Resolve(mappings, []netip.Addr{node4, node6}, tt.v4, tt.v6),
			SNAT:  tt.snat, MasqAll: tt.masq,
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		out["bundle_"+tt.name] = p.Bundle(a)
	}
	var shared strings.Builder
	for _, f := range flows.DefaultPipeline().SharedFlows() {
		shared.WriteString("add " + f.String() + "\n")
	}
	out["shared"] = shared.String()
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
		ps := flows.PortSecurity{Cookie: flows.AttachmentCookie("ps-"+tt.name, "eth0"), OFPort: 7, MAC: mac, IPs: tt.ips, L2Only: tt.l2,
			LinkLocal: flows.LinkLocalOf(mac), VLAN: tt.vlan, AllowRouter: tt.allow, AllowDHCPServer: tt.allow, Disabled: tt.off}
		var base []flows.Flow
		if tt.secure {
			base = flows.BaseFlows()
		}
		out["portsec_"+tt.name] = flows.PortSecurityBundle(ps, base...)
	}
	out["tombstone"] = flows.TombstoneBundle(7, 0xfeff)
	// Syntax pkg/flows does not emit today but the compiler accepts: each
	// form is checked against ovs-ofctl like the rest.
	out["edge"] = `# edge cases
delete cookie=0xab/0xff

add cookie=171,table=3,priority=0x10,reg1=0x5/0x1,reg15=7,ct_state=-trk,actions=resubmit(,5)
add cookie=0xab,table=3,priority=11,ct_state=+new-est+dnat,ct_mark=0x1/0xff,actions=output:NXM_NX_REG3[16..31]
add cookie=0xab,table=3,priority=12,ip,nw_src=10.1.2.3/8,nw_dst=0.0.0.0/0,actions=ct(commit,zone=0x10,nat(src=0.0.0.0),exec(load:0xff->NXM_NX_CT_MARK[],move:NXM_NX_REG0[5]->NXM_NX_CT_LABEL[127]))
add cookie=0xab,table=3,priority=13,ipv6,ipv6_dst=2001:db8::1/64,actions=ct(commit,nat(dst=[2001:db8::2]),table=4)
add cookie=0xab,table=3,priority=14,icmp,icmp_type=8,icmp_code=0,eth_dst=02:00:00:00:00:01,actions=set_field:02:00:00:00:00:02->eth_src,goto_table:9
add cookie=0xab,table=3,priority=15,arp,arp_tpa=10.0.0.1,arp_tha=02:00:00:00:00:03,arp_spa=10.0.0.0/24,actions=NORMAL
add cookie=0xab,table=3,priority=16,tcp,tp_src=0x50,tp_dst=0,actions=ct(commit,zone=1,nat(dst=10.0.0.1:0),table=5)
add cookie=0xab,table=3,priority=17,udp6,tp_src=1,actions=drop
add cookie=0xab,table=3,priority=18,sctp6,in_port=254,actions=move:NXM_NX_REG0[5]->NXM_NX_REG1[7],load:0->NXM_NX_REG2[0..15],output:0
add table=3,priority=0,ipv6,actions=ct(table=4,zone=2)
`
	return out
}

func TestCompileCorpus(t *testing.T) {
	for name, bundle := range corpus(t) {
		t.Run(name, func(t *testing.T) {
			mods, err := compile(bundle)
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for _, l := range strings.Split(bundle, "\n") {
				if strings.HasPrefix(l, "add ") || strings.HasPrefix(l, "delete ") {
					want++
				}
			}
			if len(mods) != want {
				t.Errorf("got %d flow_mods, want %d", len(mods), want)
			}
		})
	}
}

// TestCompileAsOvsOfctl decodes each compiled flow_mod with `ovs-ofctl
// ofp-print` and compares it with what `ovs-ofctl parse-flow` makes of the
// same text: the same message, field by field, as OVS reads it.
func TestCompileAsOvsOfctl(t *testing.T) {
	if _, err := exec.LookPath("ovs-ofctl"); err != nil {
		t.Skip("SKIPPED: ovs-ofctl is not installed")
	}
	for name, bundle := range corpus(t) {
		t.Run(name, func(t *testing.T) {
			mods, err := compile(bundle)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range mods {
				flow, isAdd := strings.CutPrefix(m.text, "add ")
				if !isAdd {
					continue
				}
				out, err := exec.Command("ovs-ofctl", "-O", "OpenFlow14", "parse-flow", flow).CombinedOutput()
				if err != nil {
					t.Fatalf("parse-flow %s: %v: %s", flow, err, out)
				}
				want := lastLine(string(out))
				msg := append([]byte(nil), m.msg...)
				msg[7] = 1 // xid 1, as parse-flow prints
				got, err := exec.Command("ovs-ofctl", "ofp-print", hex.EncodeToString(msg)).CombinedOutput()
				if err != nil {
					t.Fatalf("ofp-print of line %d: %v: %s", m.line, err, got)
				}
				if g := lastLine(string(got)); g != want {
					t.Errorf("line %d %s:\ngot  %s\nwant %s", m.line, flow, g, want)
				}
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// TestCompileBytes pins two messages, decoded by hand from OpenFlow 1.4.
func TestCompileBytes(t *testing.T) {
	tests := []struct{ line, want string }{
		{"add cookie=0x1,table=2,priority=3,in_port=4,actions=output:5",
			"050e0058 00000000" + // header, xid 0
				"0000000000000001 0000000000000000 02 00 0000 0000 0003 ffffffff ffffffff ffffffff 0000 0000" +
				"0001000c 80000004 00000004 00000000" + // OXM match: in_port=4, padded
				"00040018 00000000 0000 0010 00000005 0000 000000000000"}, // apply_actions(output:5)
		{"delete cookie=0x0fc5000000000000/0xffff000000000000",
			"050e0038 00000000" +
				"0fc5000000000000 ffff000000000000 ff 03 0000 0000 8000 ffffffff ffffffff ffffffff 0000 0000" +
				"00010004 00000000"}, // empty match, no instructions
	}
	for _, tt := range tests {
		mods, err := compile(tt.line)
		if err != nil {
			t.Fatalf("%s: %v", tt.line, err)
		}
		if got, want := hex.EncodeToString(mods[0].msg), strings.ReplaceAll(tt.want, " ", ""); got != want {
			t.Errorf("%s:\ngot  %s\nwant %s", tt.line, got, want)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	const flow = "add cookie=0x1,table=0,priority=1,"
	tests := []struct {
		line        string
		unsupported bool // else: a plain error, ovs-ofctl would reject it too
	}{
		{"modify cookie=0x1,actions=drop", true},
		{"cookie=0x1,actions=drop", true},
		{"delete", true},
		{"delete cookie=0x1", true},
		{"delete table=1,cookie=0x1/-1", true},
		{"delete cookie=0x1/-1,table=1", true},
		{"add  cookie=0x1, actions=drop", true},
		{flow + "tun_id=0x1,actions=drop", true},
		{flow + "ip,tcp,actions=drop", true},
		{flow + "nw_src=10.0.0.1,actions=drop", true},      // no ip
		{flow + "ipv6,nw_src=10.0.0.1,actions=drop", true}, // wrong family keyword
		{flow + "ip,tp_dst=80,actions=drop", true},         // no transport
		{flow + "icmp6,nd_target=::1,actions=drop", true},  // no icmp_type 135/136
		{flow + "ip,nw_src=10.0.0.0/255.0.0.0,actions=drop", true},
		{flow + "in_port=LOCAL,actions=drop", true},
		{flow + "in_port=65534,actions=drop", true},
		{flow + "in_port=0x5,actions=drop", true}, // ovs-ofctl reads ports in decimal
		{flow + "actions=output:0x5", true},
		{flow + "dl_src=02:00:00:00:00:01/ff:ff:ff:00:00:00,actions=drop", true},
		{flow + "ct_state=trk,actions=drop", true},
		{flow + "ct_state=+trk+trk,actions=drop", true},
		{flow + "ct_state=+bogus,actions=drop", true},
		{flow + "ct_label=0x1,actions=drop", true},
		{"add priority=010,actions=drop", true}, // octal in ovs-ofctl
		{flow + "actions=output:LOCAL", true},
		{flow + "actions=output:65535", true},
		{flow + "actions=resubmit(1,2)", true},
		{flow + "actions=goto_table:3,NORMAL", true},
		{flow + "actions=ct(commit,zone=NXM_NX_REG0[0..15])", true},
		{flow + "actions=ct(commit,force)", true},
		{flow + "actions=ct(nat(src=10.0.0.1-10.0.0.9))", true},
		{flow + "actions=ct(exec(NORMAL))", true},
		{flow + "actions=ct(commit,commit)", true},
		{flow + "actions=move:NXM_NX_TUN_ID[]->NXM_NX_REG0[]", true},
		{flow + "actions=load:0x1->NXM_NX_CT_LABEL[]", true},
		{flow + "actions=set_field:1->reg0", true},
		{flow + "actions=mod_dl_src:02:00:00:00:00:01", true},
		{flow + "actions=NORMAL,,drop", true},
		{flow + "actions=ct(commit", true},
		{flow + "ip", true},
		{"add cookie=0x1/0x1,actions=drop", true},
		{"add table=255,actions=drop", true},
		{"delete cookie=0x1/0x", false},
		{"delete cookie=zz/-1", false},
		{"add priority=65536,actions=drop", false},
		{"add table=256,actions=drop", false},
		{"add cookie=0x10000000000000000,actions=drop", false},
		{flow + "in_port=1x,actions=drop", false},
		{flow + "reg1=0/0x100000000,actions=drop", false},
		{flow + "tcp,tp_dst=65536,actions=drop", false},
		{flow + "ip,nw_src=10.0.0.256,actions=drop", false},
		{flow + "ip,nw_src=10.0.0.0/33,actions=drop", false},
		{flow + "ipv6,ipv6_src=2001:db8::1,ipv6_dst=fe80::1%eth0,actions=drop", false},
		{flow + "dl_src=02:00:00:00:00,actions=drop", false},
		{flow + "icmp6,icmp_type=256,actions=drop", false},
		{flow + "actions=goto_table:x", false},
		{flow + "actions=output:1x", false},
		{flow + "actions=load:2->NXM_NX_REG1[0]", false},
		{flow + "actions=load:1->NXM_NX_REG1[5..4]", false},
		{flow + "actions=move:NXM_NX_REG1[0..15]->NXM_NX_REG2[0..7]", false},
		{flow + "actions=move:NXM_NX_REG1[0..32]->NXM_NX_REG2[]", false},
		{flow + "actions=set_field:02:00->eth_dst", false},
		{flow + "ip,actions=ct(zone=65536,nat)", false},
		{flow + "ip,actions=ct(nat(dst=10.0.0.1:70000))", false},
		{flow + "ip,actions=ct(nat(dst=[10.0.0.1]:80))", false},
		{flow + "ip,actions=ct(nat(src=2001:db8::1))", false},
	}
	for _, tt := range tests {
		_, err := compile(tt.line)
		switch {
		case err == nil:
			t.Errorf("%s: got no error", tt.line)
		case errors.Is(err, ErrUnsupported) != tt.unsupported:
			t.Errorf("%s: got %v, want ErrUnsupported %v", tt.line, err, tt.unsupported)
		case !strings.Contains(err.Error(), "line 1 "):
			t.Errorf("%s: error %q does not name the line", tt.line, err)
		}
	}
}

func TestApplyRejectsBeforeConnecting(t *testing.T) {
	err := Apply(context.Background(), "unix:/nonexistent/br0.mgmt", "add actions=drop\nadd actions=bogus\n")
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `line 2 "add actions=bogus"`) {
		t.Errorf("got %v, want ErrUnsupported naming line 2", err)
	}
	for _, target := range []string{"ssl:127.0.0.1:6653", "br0", "punix:/x"} {
		if err := Apply(context.Background(), target, ""); !errors.Is(err, ErrUnsupported) {
			t.Errorf("target %q: got %v, want ErrUnsupported", target, err)
		}
	}
	if err := DeleteCookie(context.Background(), "unix:/nonexistent/br0.mgmt", 1, 1); err == nil || errors.Is(err, ErrTimeout) {
		t.Errorf("got %v, want a connection error", err)
	}
}

func FuzzCompile(f *testing.F) {
	for _, bundle := range corpus(f) {
		for _, l := range strings.Split(bundle, "\n") {
			f.Add(l)
		}
	}
	f.Add("add cookie=0x1,table=0,priority=1,icmp6,icmp_type=135,icmp_code=0,nd_target=fe80::/10,actions=ct(commit,zone=1,nat(src=[::1]:0),exec(load:1->NXM_NX_CT_MARK[3]),table=2)")
	f.Fuzz(func(t *testing.T, s string) {
		mods, err := compile(s)
		if err != nil {
			return
		}
		for _, m := range mods {
			if len(m.msg) < 56 || len(m.msg)%8 != 0 || int(m.msg[2])<<8|int(m.msg[3]) != len(m.msg) {
				t.Fatalf("%q: flow_mod of length %d, header says %d", s, len(m.msg), int(m.msg[2])<<8|int(m.msg[3]))
			}
		}
	})
}
