package flows

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// allFlows returns flows of every builder of the package, with the
// options that give each of the pipeline's flows at least once.
func allFlows(t *testing.T) []Flow {
	t.Helper()
	a := sample(t)
	a.MasqAll = true
	pl := DefaultPipeline()
	ps := PortSecurity{Cookie: a.Cookie, OFPort: 10, MAC: openflow.MAC(mac), LinkLocal: LinkLocalOf(mac), IPs: []netip.Addr{ctr4, ctr6},
		Gateways: []netip.Prefix{gw4, gw6}}
	trunk := ps
	trunk.VLAN = Trunk
	trunk.AllowVRRP = true
	var all []Flow
	all = append(all, PortSecurityFlows(ps)...)
	all = append(all, PortSecurityFlows(trunk)...)
	all = append(all, GatewayFlows(gw4)...)
	all = append(all, GatewayFlows(gw6)...)
	all = append(all, pl.SharedFlows()...)
	all = append(all, pl.NodeIPFlows(a)...)
	all = append(all, pl.AttachmentFlows(a)...)
	all = append(all, BaseFlows()...)
	all = append(all, OverlayFlows(sampleOverlay())...)
	all = append(all, BandwidthFlows(Bandwidth{Cookie: a.Cookie, OFPort: 10, RateKbps: 1000, BurstKb: 100})...)
	metered := a
	metered.ConnRate, metered.ConnBurst = 10, 10
	all = append(all, pl.AttachmentFlows(metered)...)
	for _, m := range TombstoneBundle(10) {
		all = append(all, m.(Flow))
	}
	return all
}

// TestNames checks that every flow the pipeline declares has a name of its
// own (not the fallback of its group), that exactly the drop flows have a
// reason, and the reasons of the guards.
func TestNames(t *testing.T) {
	all := allFlows(t)
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
	// Every declared reason, the guard's several included.
	for r := range reasonText {
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

// TestNamesDeclared checks the builders against the declaration: every
// flow they build is declared under its cookie kind, table and priority,
// with its name or one of its drop reasons, and every declared entry is
// built.
func TestNamesDeclared(t *testing.T) {
	built := make(map[flowKey]int)
	for _, f := range allFlows(t) {
		k := flowKey{GroupOf(Cookie(f.Cookie)), f.Table, f.Priority}
		built[k]++
		p := declared[k]
		if p == nil {
			t.Errorf("flow %s: no declaration of priority %d of table %d under %v", f, f.Priority, f.Table, k.group)
			continue
		}
		r := DropReason(f)
		if len(p.Drops) == 0 {
			if got := Name(f); got != p.Name {
				t.Errorf("flow %s: got name %q, want %q (%s)", f, got, p.Name, p.Const)
			}
			continue
		}
		i := slices.IndexFunc(p.Drops, func(d dropDecl) bool { return d.Reason == r })
		if i < 0 {
			t.Errorf("flow %s: got reason %q, not one of %s's", f, r, p.Const)
			continue
		}
		if got := Name(f); got != p.Drops[i].Name {
			t.Errorf("flow %s: got name %q, want %q", f, got, p.Drops[i].Name)
		}
	}
	for k, p := range declared {
		if built[k] == 0 {
			t.Errorf("%s (table %d, %v): declared, but no builder makes it", p.Const, k.table, k.group)
		}
	}
}
