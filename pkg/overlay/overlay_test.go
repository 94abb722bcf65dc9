package overlay

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/podroutes"
)

var (
	pfx  = netip.MustParsePrefix
	addr = netip.MustParseAddr
)

// Two peers on this node's subnet (192.0.2.0/24), one on another; one
// of them dual-stack.
func samplePeers() ([]podroutes.Route, []podroutes.Peer) {
	peers := []podroutes.Peer{
		{Name: "near", PodCIDRs: []netip.Prefix{pfx("198.18.2.0/24"), pfx("2001:db8:2::/64")}, Addrs: []netip.Addr{addr("192.0.2.3"), addr("2001:db8:f::3")}},
		{Name: "far", PodCIDRs: []netip.Prefix{pfx("198.18.3.0/24"), pfx("2001:db8:3::/64")}, Addrs: []netip.Addr{addr("203.0.113.2"), addr("2001:db8:e::2")}},
		{Name: "v6only", PodCIDRs: []netip.Prefix{pfx("2001:db8:4::/64")}, Addrs: []netip.Addr{addr("2001:db8:e::4")}},
	}
	self := podroutes.Peer{Name: "self", PodCIDRs: []netip.Prefix{pfx("198.18.1.0/24")}, Addrs: []netip.Addr{addr("192.0.2.2"), addr("2001:db8:f::2")}}
	routes, _ := podroutes.Plan(self, nil, peers)
	return routes, peers
}

func render(rs []podroutes.Route) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%s(%s,link %d)", r, r.Node, r.Link))
	}
	return strings.Join(s, "; ")
}

func TestSplit(t *testing.T) {
	routes, peers := samplePeers()
	facts := Facts{Local: pfx("192.0.2.2/24"), Bridge: "br0", BridgeLink: 7, MTU: 1500}
	hostgw := render(routes)
	for _, tc := range []struct {
		name           string
		mode           Mode
		facts          func(Facts) Facts
		hostgw, tunnel string
		peers          string
		active         bool
		mtu            int
	}{
		{name: "none", mode: None, hostgw: hostgw},
		{name: "hybrid", mode: Hybrid,
			hostgw: "198.18.2.0/24 via 192.0.2.3(near,link 0); 2001:db8:2::/64 via 2001:db8:f::3(near,link 0); 2001:db8:4::/64 via 2001:db8:e::4(v6only,link 0)",
			tunnel: "198.18.3.0/24 via 169.254.253.1 mtu 1450(far,link 7); 2001:db8:3::/64 via fe80::fc5:1 mtu 1450(far,link 7)",
			peers:  "198.18.3.0/24>203.0.113.2 2001:db8:3::/64>203.0.113.2", active: true, mtu: 1450},
		{name: "geneve: every peer with an IPv4 InternalIP", mode: Geneve,
			hostgw: "2001:db8:4::/64 via 2001:db8:e::4(v6only,link 0)",
			tunnel: "198.18.2.0/24 via 169.254.253.1 mtu 1450(near,link 7); 198.18.3.0/24 via 169.254.253.1 mtu 1450(far,link 7); " +
				"2001:db8:2::/64 via fe80::fc5:1 mtu 1450(near,link 7); 2001:db8:3::/64 via fe80::fc5:1 mtu 1450(far,link 7)",
			peers:  "198.18.2.0/24>192.0.2.3 198.18.3.0/24>203.0.113.2 2001:db8:2::/64>192.0.2.3 2001:db8:3::/64>203.0.113.2",
			active: true, mtu: 1450},
		{name: "hybrid, every peer on this subnet", mode: Hybrid, facts: func(f Facts) Facts { f.Local = pfx("192.0.2.2/1"); return f },
			hostgw: hostgw},
		{name: "hybrid, cannot tell: no subnet", mode: Hybrid, facts: func(f Facts) Facts { f.Local = pfx("192.0.2.2/32"); return f },
			hostgw: hostgw},
		{name: "hybrid, cannot tell: not a bridge", mode: Hybrid, facts: func(f Facts) Facts { f.Bridge = ""; return f },
			hostgw: hostgw},
		{name: "vxlan over IPv6", mode: VXLAN, facts: func(f Facts) Facts { f.Local = pfx("2001:db8:f::2/64"); return f },
			tunnel: "198.18.2.0/24 via 169.254.253.1 mtu 1430(near,link 7); 198.18.3.0/24 via 169.254.253.1 mtu 1430(far,link 7); " +
				"2001:db8:2::/64 via fe80::fc5:1 mtu 1430(near,link 7); 2001:db8:3::/64 via fe80::fc5:1 mtu 1430(far,link 7); " +
				"2001:db8:4::/64 via fe80::fc5:1 mtu 1430(v6only,link 7)",
			peers: "198.18.2.0/24>2001:db8:f::3 198.18.3.0/24>2001:db8:e::2 2001:db8:2::/64>2001:db8:f::3 2001:db8:3::/64>2001:db8:e::2 " +
				"2001:db8:4::/64>2001:db8:e::4",
			active: true, mtu: 1430},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := facts
			f.Mode = tc.mode
			if tc.facts != nil {
				f = tc.facts(f)
			}
			p := Split(f, routes, peers)
			if got := render(p.HostGW); got != tc.hostgw {
				t.Errorf("host-gw: got %s, want %s", got, tc.hostgw)
			}
			if got := render(p.Tunnel); got != tc.tunnel {
				t.Errorf("tunnel: got %s, want %s", got, tc.tunnel)
			}
			var ps []string
			for _, peer := range p.Peers {
				ps = append(ps, peer.Dst.String()+">"+peer.Remote.String())
			}
			if got := strings.Join(ps, " "); got != tc.peers {
				t.Errorf("peers: got %s, want %s", got, tc.peers)
			}
			if got := f.Active(p); got != tc.active {
				t.Errorf("active: got %v, want %v", got, tc.active)
			}
			if got := ConflistMTU(f, p); got != tc.mtu {
				t.Errorf("conflist MTU: got %d, want %d", got, tc.mtu)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Hybrid, "hybrid": Hybrid, "none": None, "geneve": Geneve, "vxlan": VXLAN} {
		if got, err := ParseMode(in); got != want || err != nil {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseMode("gre"); err == nil || !strings.Contains(err.Error(), `overlay "gre"`) {
		t.Errorf("ParseMode(gre): %v", err)
	}
	if VXLAN.TunnelType() != "vxlan" || Hybrid.TunnelType() != "geneve" || Geneve.TunnelType() != "geneve" {
		t.Error("tunnel types")
	}
}

// The record reads back as written, sorted, whatever the plan's order.
func TestRecord(t *testing.T) {
	routes, peers := samplePeers()
	f := Facts{Mode: Geneve, Local: pfx("192.0.2.2/24"), Bridge: "br0", BridgeLink: 7, MTU: 1500}
	p := Split(f, routes, peers)
	slices.Reverse(p.Peers)
	rec := RecordOf([]netip.Prefix{pfx("2001:db8:1::/64"), pfx("198.18.1.0/24")}, p)
	want := `{"local":["198.18.1.0/24","2001:db8:1::/64"],"peers":[{"dst":"198.18.2.0/24","remote":"192.0.2.3"},` +
		`{"dst":"198.18.3.0/24","remote":"203.0.113.2"},{"dst":"2001:db8:2::/64","remote":"192.0.2.3"},{"dst":"2001:db8:3::/64","remote":"203.0.113.2"}]}`
	if got := rec.Encode(); got != want {
		t.Errorf("record: got %s, want %s", got, want)
	}
	back, err := ParseRecord(want)
	if err != nil || back.Encode() != want {
		t.Errorf("ParseRecord: %v, %s", err, back.Encode())
	}
	if _, err := ParseRecord("{"); err == nil {
		t.Error("ParseRecord({): no error")
	}
	o := back.Overlay(3, [6]byte{2, 0, 0, 0, 0, 1})
	if o.TunnelPort != 3 || len(o.Peers) != 4 || len(o.Local) != 2 {
		t.Errorf("Overlay: %+v", o)
	}
}
