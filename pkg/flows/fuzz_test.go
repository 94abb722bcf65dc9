package flows

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

func FuzzParseProtocol(f *testing.F) {
	for _, s := range []string{"", "tcp", "UDP", "sctp", "icmp", "tcp6", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseProtocol(s)
		if err != nil {
			return
		}
		if !p.IsValid() {
			t.Fatalf("ParseProtocol(%q) = %v, not valid", s, p)
		}
		if back, err := ParseProtocol(p.String()); err != nil || back != p {
			t.Fatalf("round trip of %v: got %v, %v", p, back, err)
		}
	})
}

// FuzzResolve feeds arbitrary addresses, protocols and ports through Resolve
// and AttachmentFlows and checks the invariants the pipeline relies on.
func FuzzResolve(f *testing.F) {
	f.Add("", "198.51.100.1", "2001:db8:100::1", "192.0.2.10", "2001:db8:c::10", uint8(6), uint16(8080), uint16(80))
	f.Add("0.0.0.0", "::ffff:198.51.100.1", "fe80::1%eth0", "::ffff:192.0.2.10", "", uint8(17), uint16(53), uint16(53))
	f.Add("::", "0.0.0.0", "::", "", "192.0.2.1", uint8(132), uint16(0), uint16(65535))
	f.Fuzz(func(t *testing.T, host, n1, n2, c4, c6 string, proto uint8, hp, cp uint16) {
		parse := func(s string) netip.Addr { a, _ := netip.ParseAddr(s); return a }
		m := []Mapping{
			{Protocol(proto), parse(host), hp, cp},
			{TCP, netip.Addr{}, hp, cp},
		}
		v4, v6 := parse(c4), parse(c6)
		rules := Resolve(m, []netip.Addr{parse(n1), parse(n2)}, v4, v6)
		for i, r := range rules {
			if i > 0 && rules[i-1].compare(r) >= 0 {
				t.Fatalf("rules not sorted and unique: %v", rules)
			}
			if !r.Protocol.IsValid() || !r.NodeIP.IsValid() || !r.ContainerIP.IsValid() {
				t.Fatalf("invalid rule %v", r)
			}
			if r.NodeIP.Is4() != r.ContainerIP.Is4() || r.NodeIP.Is4In6() || r.NodeIP.Zone() != "" {
				t.Fatalf("rule %v: node and container addresses not canonical and of one family", r)
			}
		}
		a := HostPorts{Cookie: AttachmentCookie(host, n1), OFPort: 1, MAC: openflow.MAC(mac),
			IPv4: canon(v4), IPv6: canon(v6), HairpinV4: node4, HairpinV6: node6, Rules: rules, SNAT: true}
		_ = a.Validate()
		for _, fl := range DefaultPipeline().AttachmentFlows(a) {
			s := fl.String()
			if strings.ContainsAny(s, " \n%") {
				t.Fatalf("flow %q has a character ovs-ofctl would split on", s)
			}
		}
	})
}
