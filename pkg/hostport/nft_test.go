package hostport

import (
	"net/netip"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

func TestNftScript(t *testing.T) {
	rules := []flows.Rule{
		{Protocol: flows.TCP, NodeIP: netip.MustParseAddr("198.51.100.1"), HostPort: 8080, ContainerIP: netip.MustParseAddr("192.0.2.10"), ContainerPort: 80},
		{Protocol: flows.TCP, NodeIP: netip.MustParseAddr("127.0.0.1"), HostPort: 8080, ContainerIP: netip.MustParseAddr("192.0.2.10"), ContainerPort: 80},
		{Protocol: flows.UDP, NodeIP: netip.MustParseAddr("2001:db8:100::1"), HostPort: 53, ContainerIP: netip.MustParseAddr("2001:db8:c::10"), ContainerPort: 5353},
	}
	want := `add table ip ovsflow_hostport
add map ip ovsflow_hostport hostports { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service ; }
add map ip ovsflow_hostport localhost { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service ; }
add chain ip ovsflow_hostport output { type nat hook output priority -100 ; policy accept ; }
flush chain ip ovsflow_hostport output
add rule ip ovsflow_hostport output dnat ip to ip daddr . meta l4proto . th dport map @hostports
add rule ip ovsflow_hostport output dnat ip to ip daddr . meta l4proto . th dport map @localhost
` + nftLocalnet + `add element ip ovsflow_hostport hostports { 198.51.100.1 . tcp . 8080 : 192.0.2.10 . 80 }
delete element ip ovsflow_hostport hostports { 198.51.100.1 . tcp . 8080 }
add element ip ovsflow_hostport localhost { 127.0.0.1 . tcp . 8080 : 192.0.2.10 . 80 }
delete element ip ovsflow_hostport localhost { 127.0.0.1 . tcp . 8080 }
add table ip6 ovsflow_hostport
add map ip6 ovsflow_hostport hostports { type ipv6_addr . inet_proto . inet_service : ipv6_addr . inet_service ; }
add chain ip6 ovsflow_hostport output { type nat hook output priority -100 ; policy accept ; }
flush chain ip6 ovsflow_hostport output
add rule ip6 ovsflow_hostport output dnat ip6 to ip6 daddr . meta l4proto . th dport map @hostports
add element ip6 ovsflow_hostport hostports { 2001:db8:100::1 . udp . 53 : 2001:db8:c::10 . 5353 }
delete element ip6 ovsflow_hostport hostports { 2001:db8:100::1 . udp . 53 }
`
	if got := nftScript(rules, true, false); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := nftScript(nil, false, false); got != "" {
		t.Errorf("no rules: got %q, want nothing", got)
	}
}
