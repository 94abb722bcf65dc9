package flows

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test -update): %v", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run go test -update to accept)\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

var (
	node4  = netip.MustParseAddr("198.51.100.1")
	node4b = netip.MustParseAddr("198.51.100.3")
	node6  = netip.MustParseAddr("2001:db8:100::1")
	ctr4   = netip.MustParseAddr("192.0.2.10")
	ctr6   = netip.MustParseAddr("2001:db8:c::10")
	mac    = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0x00, 0x0a}
)

// sample is a typical attachment: tcp 8080→80
// and udp 5353→53 on every node IP, both families.
func sample(t testing.TB) HostPorts {
	t.Helper()
	mappings := []Mapping{
		{Protocol: TCP, HostPort: 8080, ContainerPort: 80},
		{Protocol: UDP, HostPort: 5353, ContainerPort: 53},
	}
	a := HostPorts{
		Cookie:    AttachmentCookie("ctr-a", "eth0"),
		OFPort:    10,
		MAC:       openflow.MAC(mac),
		IPv4:      ctr4,
		IPv6:      ctr6,
		HairpinV4: node4,
		HairpinV6: node6,
		Rules:     Resolve(mappings, []netip.Addr{node4, node6}, ctr4, ctr6),
		SNAT:      true,
	}
	if err := a.Validate(); err != nil {
		t.Fatalf("sample attachment: %v", err)
	}
	return a
}

func TestBundleGolden(t *testing.T) {
	masq := sample(t)
	masq.MasqAll = true
	v4only := sample(t)
	v4only.IPv6, v4only.HairpinV6, v4only.SNAT = netip.Addr{}, netip.Addr{}, false
	v4only.Rules = Resolve([]Mapping{{Protocol: SCTP, HostIP: node4, HostPort: 3868, ContainerPort: 3868}},
		[]netip.Addr{node4, node6}, ctr4, netip.Addr{})
	tests := []struct {
		name string
		a    HostPorts
	}{
		{"bundle_snat.golden", sample(t)},
		{"bundle_masqall.golden", masq},
		{"bundle_v4only_nosnat.golden", v4only},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			golden(t, tt.name, DefaultPipeline().Bundle(tt.a).String())
		})
	}
}

func TestAttachmentFlows(t *testing.T) {
	p := DefaultPipeline()
	a := sample(t)
	flows := p.AttachmentFlows(a)

	if again := p.AttachmentFlows(a); fmt.Sprint(again) != fmt.Sprint(flows) {
		t.Errorf("AttachmentFlows is not deterministic")
	}
	count := map[uint8]int{}
	for _, f := range flows {
		if Cookie(f.Cookie) != a.Cookie {
			t.Errorf("flow %q: got cookie %s, want %s", f, Cookie(f.Cookie), a.Cookie)
		}
		count[f.Table]++
	}
	// 2 mappings × 2 families requests (from outside and from containers)
	// + 2 × 2 replies + a reply fragment flow per family (UDP) + the
	// container's ICMP errors (2 types IPv4, 4 IPv6); hairpin + pass and
	// each mapping's first-datagram fragments (from outside and from
	// containers) per family; output per family; each mapping's first
	// fragment held back per family (table 44).
	want := map[uint8]int{TableClassifier: 20, TablePortmapDNAT: 12, TablePortmapOutput: 2, TablePortmapFragmentMiss: 4}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("flows per table: got %v, want %v", count, want)
	}

	t.Run("no rules, no flows", func(t *testing.T) {
		b := a
		b.Rules = nil
		if got := p.AttachmentFlows(b); len(got) != 0 {
			t.Errorf("got %d flows, want none: %v", len(got), got)
		}
		if got, want := p.Bundle(b).String(), "delete "+a.Cookie.Match()+"\n"; !strings.HasPrefix(got, want) {
			t.Errorf("bundle starts %q, want %q", got, want)
		}
	})
	t.Run("first conflicting rule wins", func(t *testing.T) {
		b := a
		b.Rules = []Rule{
			{TCP, node4, 8080, ctr4, 80},
			{TCP, node4, 8080, ctr4, 81},
		}
		var requests []string
		for _, f := range p.AttachmentFlows(b) {
			if f.Table == TableClassifier && f.Priority == PriorityRequest {
				requests = append(requests, f.Actions.String())
			}
		}
		if len(requests) != 1 || !strings.Contains(requests[0], "nat(dst=192.0.2.10:80)") {
			t.Errorf("got request actions %q, want one to 192.0.2.10:80", requests)
		}
	})
	t.Run("custom zones", func(t *testing.T) {
		q := Pipeline{DNATZone: 7, SNATZone: 8}
		got := q.AttachmentFlows(a)[0].Actions.String()
		if !strings.HasPrefix(got, "ct(commit,zone=7,") {
			t.Errorf("got %q, want zone 7", got)
		}
	})
}

func TestFlowString(t *testing.T) {
	tests := []struct {
		f    Flow
		want string
	}{
		{flow(SharedCookie(), 42, 0, openflow.Match{}, openflow.Normal), "cookie=0x0fc5000000000000,table=42,priority=0,actions=NORMAL"},
		{flow(Cookie(1), 0, 200, openflow.Match{}.Proto(openflow.EthIPv4, openflow.ProtoTCP).TPDst(1)), "cookie=0x0000000000000001,table=0,priority=200,tcp,tp_dst=1,actions=drop"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestCookie(t *testing.T) {
	c := AttachmentCookie("ctr-a", "eth0")
	tests := []struct {
		name      string
		got, want any
	}{
		// FNV-1a 64("ctr-a/eth0") = 0xb9e96a39c16eb78e, computed independently.
		{"attachment", c, Cookie(0x0fc50139c16eb78e)},
		{"attachment 2", AttachmentCookie("0123456789abcdef", "net1"), Cookie(0x0fc5013c25ca26d8)},
		{"string", c.String(), "0x0fc50139c16eb78e"},
		{"match", c.Match(), "cookie=0x0fc50139c16eb78e/-1"},
		{"suite tag", uint64(c) >> 48, uint64(0x0fc5)},
		{"kind", c.Kind(), CookieKindAttachment},
		{"is ours", c.IsOurs(), true},
		{"shared", SharedCookie(), Cookie(0x0fc5000000000000)},
		{"shared kind", SharedCookie().Kind(), CookieKindShared},
		{"shared is ours", SharedCookie().IsOurs(), true},
		{"foreign", Cookie(0x0fc6010000000001).IsOurs(), false},
		{"zero", Cookie(0).IsOurs(), false},
		{"suite match", SuiteMatch(), "cookie=0x0fc5000000000000/0xffff000000000000"},
		{"ifname matters", AttachmentCookie("ctr-a", "eth1") != c, true},
		{"container ID matters", AttachmentCookie("ctr-b", "eth0") != c, true},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestParseProtocol(t *testing.T) {
	tests := []struct {
		in      string
		want    Protocol
		wantErr bool
	}{
		{"", TCP, false},
		{"tcp", TCP, false},
		{"TCP", TCP, false},
		{"Udp", UDP, false},
		{"sctp", SCTP, false},
		{"SCTP", SCTP, false},
		{"icmp", 0, true},
		{" tcp", 0, true},
		{"6", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseProtocol(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseProtocol(%q): got %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && got.String() != strings.ToLower(tt.in) && tt.in != "" {
			t.Errorf("ParseProtocol(%q).String(): got %q", tt.in, got)
		}
	}
	if got, want := Protocol(1).String(), "Protocol(1)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestResolve(t *testing.T) {
	nodes := []netip.Addr{node6, node4b, node4}
	tcp := func(host string) []Mapping {
		var h netip.Addr
		if host != "" {
			h = netip.MustParseAddr(host)
		}
		return []Mapping{{Protocol: TCP, HostIP: h, HostPort: 8080, ContainerPort: 80}}
	}
	tests := []struct {
		name     string
		mappings []Mapping
		nodes    []netip.Addr
		v4, v6   netip.Addr
		want     []string
	}{
		{"zero host IP: every node IP", tcp(""), nodes, ctr4, ctr6, []string{
			"tcp 198.51.100.1:8080->192.0.2.10:80",
			"tcp 198.51.100.3:8080->192.0.2.10:80",
			"tcp [2001:db8:100::1]:8080->[2001:db8:c::10]:80",
		}},
		{"0.0.0.0: IPv4 node IPs", tcp("0.0.0.0"), nodes, ctr4, ctr6, []string{
			"tcp 198.51.100.1:8080->192.0.2.10:80",
			"tcp 198.51.100.3:8080->192.0.2.10:80",
		}},
		{":: : IPv6 node IPs", tcp("::"), nodes, ctr4, ctr6, []string{
			"tcp [2001:db8:100::1]:8080->[2001:db8:c::10]:80",
		}},
		{"specific IPv4", tcp("198.51.100.3"), nodes, ctr4, ctr6, []string{
			"tcp 198.51.100.3:8080->192.0.2.10:80",
		}},
		{"specific IPv6", tcp("2001:db8:100::1"), nodes, ctr4, ctr6, []string{
			"tcp [2001:db8:100::1]:8080->[2001:db8:c::10]:80",
		}},
		{"specific, not checked against node IPs", tcp("198.51.100.9"), nodes, ctr4, ctr6, []string{
			"tcp 198.51.100.9:8080->192.0.2.10:80",
		}},
		{"IPv4-mapped host IP is unmapped", tcp("::ffff:198.51.100.1"), nodes, ctr4, ctr6, []string{
			"tcp 198.51.100.1:8080->192.0.2.10:80",
		}},
		{"IPv4-mapped :: is 0.0.0.0", tcp("::ffff:0.0.0.0"), nodes, ctr4, ctr6, []string{
			"tcp 198.51.100.1:8080->192.0.2.10:80",
			"tcp 198.51.100.3:8080->192.0.2.10:80",
		}},
		{"IPv4-mapped node and container IPs are unmapped", tcp(""),
			[]netip.Addr{netip.MustParseAddr("::ffff:198.51.100.1")}, netip.MustParseAddr("::ffff:192.0.2.10"), netip.Addr{}, []string{
				"tcp 198.51.100.1:8080->192.0.2.10:80",
			}},
		{"zones dropped", tcp("fe80::1%eth0"), nodes, ctr4, ctr6, []string{
			"tcp [fe80::1]:8080->[2001:db8:c::10]:80",
		}},
		{"no IPv6 container address: IPv6 skipped", tcp(""), nodes, ctr4, netip.Addr{}, []string{
			"tcp 198.51.100.1:8080->192.0.2.10:80",
			"tcp 198.51.100.3:8080->192.0.2.10:80",
		}},
		{"no IPv4 container address: IPv4 skipped", tcp("198.51.100.1"), nodes, netip.Addr{}, ctr6, nil},
		{"IPv4 in the IPv6 slot is ignored", tcp(""), nodes, netip.Addr{}, ctr4, nil},
		{"no node IPs", tcp(""), nil, ctr4, ctr6, nil},
		{"unspecified node IPs ignored", tcp(""), []netip.Addr{netip.IPv4Unspecified(), node4}, ctr4, ctr6, []string{
			"tcp 198.51.100.1:8080->192.0.2.10:80",
		}},
		{"invalid protocol skipped", []Mapping{{Protocol: 1, HostPort: 1, ContainerPort: 1}}, nodes, ctr4, ctr6, nil},
		{"sorted, duplicates removed", []Mapping{
			{Protocol: UDP, HostPort: 53, ContainerPort: 53},
			{Protocol: TCP, HostIP: node4, HostPort: 80, ContainerPort: 80},
			{Protocol: TCP, HostPort: 80, ContainerPort: 80},
			{Protocol: UDP, HostPort: 53, ContainerPort: 53},
		}, []netip.Addr{node4, node4}, ctr4, ctr6, []string{
			"tcp 198.51.100.1:80->192.0.2.10:80",
			"udp 198.51.100.1:53->192.0.2.10:53",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, r := range Resolve(tt.mappings, tt.nodes, tt.v4, tt.v6) {
				got = append(got, r.String())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestConntrackFlushes(t *testing.T) {
	a := sample(t)
	rules := append(a.Rules, Rule{SCTP, node4, 3868, ctr4, 3868}, a.Rules[0])
	p := DefaultPipeline()
	var got []string
	for _, f := range ConntrackFlushes(p, rules) {
		got = append(got, f.String())
	}
	var want []string
	for _, tuple := range []string{
		"ct_nw_dst=198.51.100.1,ct_nw_proto=17,ct_tp_dst=5353",
		"ct_ipv6_dst=2001:db8:100::1,ct_nw_proto=17,ct_tp_dst=5353",
		"ct_nw_dst=198.51.100.1,ct_nw_proto=132,ct_tp_dst=3868",
	} {
		for _, z := range p.Zones() {
			want = append(want, fmt.Sprintf("zone=%d %s", z, tuple))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWithdrawFlushes(t *testing.T) {
	a := sample(t)
	rules := append(a.Rules, a.Rules[0])
	p := DefaultPipeline()
	var got []string
	for _, f := range WithdrawFlushes(p, rules) {
		got = append(got, f.String())
	}
	var want []string
	for _, r := range a.Rules { // every protocol, TCP included
		dst := "ct_nw_dst="
		if r.NodeIP.Is6() {
			dst = "ct_ipv6_dst="
		}
		for _, z := range p.Zones() {
			want = append(want, fmt.Sprintf("zone=%d %s%s,ct_nw_proto=%d,ct_tp_dst=%d", z, dst, r.NodeIP, r.Protocol, r.HostPort))
		}
		want = append(want, fmt.Sprintf("zone=%d %s%s,ct_nw_proto=%d,ct_tp_dst=%d", p.SNATZone, dst, r.ContainerIP, r.Protocol, r.ContainerPort))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*HostPorts)
		want   string // substring of the error; "" for none
	}{
		{"valid", func(*HostPorts) {}, ""},
		{"shared cookie", func(a *HostPorts) { a.Cookie = SharedCookie() }, "not an attachment cookie"},
		{"ofport 0", func(a *HostPorts) { a.OFPort = 0 }, "ofport 0"},
		{"ofport LOCAL", func(a *HostPorts) { a.OFPort = 0xfffe }, "ofport 65534"},
		{"no MAC", func(a *HostPorts) { a.MAC = openflow.MAC{} }, "mac"},
		{"IPv6 in IPv4 slot", func(a *HostPorts) { a.IPv4 = ctr6 }, "wrong family"},
		{"rule for another container", func(a *HostPorts) { a.Rules[0].ContainerIP = node4b }, "not the attachment's"},
		{"mixed families", func(a *HostPorts) { a.Rules[0].NodeIP = node6 }, "mixes address families"},
		{"snat without hairpin IP", func(a *HostPorts) { a.HairpinV6 = netip.Addr{} }, "hairpin address"},
		{"invalid protocol", func(a *HostPorts) { a.Rules[0].Protocol = 0 }, "invalid protocol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := sample(t)
			a.Rules = append([]Rule(nil), a.Rules...)
			tt.modify(&a)
			err := a.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestPipelineDeclarations(t *testing.T) {
	p := DefaultPipeline()
	if p.DNATZone == 0 || p.SNATZone == 0 || p.DNATZone == p.SNATZone {
		t.Errorf("zones %d, %d: want two distinct non-zero zones", p.DNATZone, p.SNATZone)
	}
	if PriorityReply <= PriorityRequest {
		t.Errorf("reply priority %d must be above request priority %d", PriorityReply, PriorityRequest)
	}
	tables := []uint8{TablePortmapDNAT, TablePortmapOutput, TablePortmapReplySNAT, TablePortmapReplyRestore}
	for i, tb := range tables {
		if tb <= TableClassifier || i > 0 && tb <= tables[i-1] {
			t.Errorf("table %d: ct(table=N) and goto_table need increasing table numbers", tb)
		}
	}
}

// With NodeMAC, every request classifier matches it as dl_dst, and no other
// flow does.
func TestRequestsMatchNodeMAC(t *testing.T) {
	a := sample(t)
	a.NodeMAC, _ = openflow.ParseMAC("02:00:00:00:00:fe")
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, f := range DefaultPipeline().AttachmentFlows(a) {
		request := f.Table == TableClassifier && (f.Priority == PriorityRequest || f.Priority == PriorityRequestContainer)
		if got := strings.Contains(f.Match.String(), "dl_dst=02:00:00:00:00:fe"); got != request {
			t.Errorf("flow %s: dl_dst=NodeMAC %v, want %v", f, got, request)
		}
	}
	a.NodeMAC, _ = openflow.ParseMAC("ff:ff:ff:ff:ff:ff")
	if err := a.Validate(); err == nil || !strings.Contains(err.Error(), "unicast") {
		t.Errorf("broadcast node MAC: got %v, want an error", err)
	}
}

func TestResolveLoopback(t *testing.T) {
	m := func(proto Protocol, host string, port uint16) Mapping {
		var h netip.Addr
		if host != "" {
			h = netip.MustParseAddr(host)
		}
		return Mapping{Protocol: proto, HostIP: h, HostPort: port, ContainerPort: 80}
	}
	tests := []struct {
		name     string
		mappings []Mapping
		v4       netip.Addr
		want     []string
	}{
		{"no host IP: 127.0.0.1", []Mapping{m(TCP, "", 8080), m(UDP, "", 8080)}, ctr4, []string{
			"tcp 127.0.0.1:8080->192.0.2.10:80", "udp 127.0.0.1:8080->192.0.2.10:80"}},
		{"0.0.0.0: 127.0.0.1", []Mapping{m(TCP, "0.0.0.0", 8080)}, ctr4, []string{"tcp 127.0.0.1:8080->192.0.2.10:80"}},
		{"127.0.0.1 and another loopback address", []Mapping{m(TCP, "127.0.0.1", 8080), m(TCP, "127.0.0.2", 8080)}, ctr4, []string{
			"tcp 127.0.0.1:8080->192.0.2.10:80", "tcp 127.0.0.2:8080->192.0.2.10:80"}},
		{"a node address, ::, ::1: none", []Mapping{m(TCP, "198.51.100.1", 8080), m(TCP, "::", 8080), m(TCP, "::1", 8080)}, ctr4, nil},
		{"no container IPv4: none", []Mapping{m(TCP, "", 8080), m(TCP, "127.0.0.1", 8081)}, netip.Addr{}, nil},
		{"invalid protocol: none", []Mapping{m(Protocol(1), "", 8080)}, ctr4, nil},
		{"duplicates once", []Mapping{m(TCP, "", 8080), m(TCP, "127.0.0.1", 8080)}, ctr4, []string{"tcp 127.0.0.1:8080->192.0.2.10:80"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range ResolveLoopback(tc.mappings, tc.v4) {
				got = append(got, r.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// A cookie in a record is its String, and reads back; anything else is no
// cookie.
func TestCookieText(t *testing.T) {
	c := AttachmentCookie("ctr", "eth0")
	b, err := c.MarshalText()
	if err != nil || string(b) != c.String() {
		t.Fatalf("MarshalText: %q, %v; want %q", b, err, c.String())
	}
	var got Cookie
	if err := got.UnmarshalText(b); err != nil || got != c {
		t.Errorf("UnmarshalText(%q): %s, %v; want %s", b, got, err, c)
	}
	for _, s := range []string{"", "0x", "12", "0xzz", "0x10000000000000000"} {
		if err := got.UnmarshalText([]byte(s)); err == nil {
			t.Errorf("UnmarshalText(%q): no error", s)
		}
	}
}
