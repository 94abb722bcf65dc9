package flows

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// TestNames checks that every flow the pipeline declares has a name of its
// own (not the fallback of its group), that exactly the drop flows have a
// reason, and the reasons of the guards.
func TestNames(t *testing.T) {
	a := sample(t)
	a.MasqAll = true
	pl := DefaultPipeline()
	ps := PortSecurity{Cookie: a.Cookie, OFPort: 10, MAC: openflow.MAC(mac), LinkLocal: LinkLocalOf(mac), IPs: []netip.Addr{ctr4, ctr6}}
	trunk := ps
	trunk.VLAN = Trunk
	trunk.AllowVRRP = true
	var all []Flow
	all = append(all, PortSecurityFlows(ps)...)
	all = append(all, PortSecurityFlows(trunk)...)
	all = append(all, pl.SharedFlows()...)
	all = append(all, pl.NodeIPFlows(a)...)
	all = append(all, pl.AttachmentFlows(a)...)
	all = append(all, BaseFlows()...)
	all = append(all, BandwidthFlows(Bandwidth{Cookie: a.Cookie, OFPort: 10, RateKbps: 1000, BurstKb: 100})...)
	metered := a
	metered.ConnRate, metered.ConnBurst = 10, 10
	all = append(all, pl.AttachmentFlows(metered)...)
	for _, m := range TombstoneBundle(10) {
		all = append(all, m.(Flow))
	}
	reasons := map[string]int{}
	for _, f := range all {
		n := Name(f)
		if strings.HasPrefix(n, "a flow of") {
			t.Errorf("flow %s: got the fallback name %q", f, n)
		}
		r := DropReason(f)
		if (r != "") != (len(f.Actions) == 0) {
			t.Errorf("flow %s: got reason %q for %d actions", f, r, len(f.Actions))
		}
		reasons[r]++
	}
	for _, r := range []string{ReasonRouterAdvertisement, ReasonRedirect, ReasonDHCPServer, ReasonDoubleTag,
		ReasonFragment, ReasonNeighbourDiscovery, ReasonSpoofed, ReasonTombstone, ReasonVRRP} {
		if reasons[r] == 0 {
			t.Errorf("no flow has reason %q", r)
		}
	}
	// One of each, by what it matches.
	for _, tc := range []struct {
		match, reason string
	}{
		{"icmp_type=134", ReasonRouterAdvertisement},
		{"icmp,in_port=10,reg1=0/0x1,icmp_type=5", ReasonRedirect},
		{"udp,in_port=10,reg1=0/0x1,tp_src=67", ReasonDHCPServer},
		{"ct_nw_proto=17,ct_tp_dst=546", ReasonDHCPServer},
		{"ct_state=+trk+inv", ReasonFragment},
		{"dl_type=0x88a8", ReasonDoubleTag},
		{"dl_type=0x0800,nw_proto=112", ReasonVRRP},
	} {
		found := false
		for _, f := range all {
			if strings.Contains(f.String(), tc.match) && len(f.Actions) == 0 {
				found = true
				if got := DropReason(f); got != tc.reason {
					t.Errorf("flow %s: got reason %q, want %q", f, got, tc.reason)
				}
			}
		}
		if !found {
			t.Errorf("no drop flow matches %q", tc.match)
		}
	}
	if got, want := GroupOf(SharedCookie()), GroupShared; got != want {
		t.Errorf("GroupOf(shared): got %v, want %v", got, want)
	}
	if got := Name(Flow{Cookie: 0x1234}); got != "a flow of someone else" {
		t.Errorf("Name of a foreign flow: got %q", got)
	}
}
