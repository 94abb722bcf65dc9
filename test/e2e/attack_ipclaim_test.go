package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// staticIPAM is an ipam entry of static IPAM giving addrs (CIDRs), with the
// lab's gateways.
func staticIPAM(addrs ...string) map[string]any {
	var list []any
	for _, a := range addrs {
		gw := "192.0.2.1"
		if strings.Contains(a, ":") {
			gw = "2001:db8:c::1"
		}
		list = append(list, map[string]any{"address": a, "gateway": gw})
	}
	return map[string]any{"type": "static", "addresses": list}
}

// Addresses another attachment, the bridge's gateway or the node holds on
// the bridge: an ADD that would give a container one of them, or allow it
// to send from one (allowedAddresses), is refused with code 7 naming the
// holder, and leaves nothing behind. Given by static IPAM, by a second
// network with a host-local store of its own and an overlapping range (as
// two Multus networks on one bridge), or in allowedAddresses (a single
// address or a range). The same networks with free addresses (the
// controls) are accepted.
func TestAttackAddressClaim(t *testing.T) {
	l := newLab(t)
	v := l.join(l.network("claim-victim", nil, nil), "victim", nil)
	holder := "attachment " + v.ID + "/eth0"
	gateway := `bridge "` + l.Bridge + `"`
	overlap := func(a netip.Addr) map[string]any {
		return map[string]any{"type": "host-local", "dataDir": t.TempDir(),
			"ranges": []any{[]any{map[string]any{"subnet": "192.0.2.0/24", "gateway": "192.0.2.1",
				"rangeStart": a.String(), "rangeEnd": a.String()}}}}
	}
	for i, tc := range []struct {
		name  string
		extra map[string]any
		want  string // "": accepted
	}{
		{"static-neighbours-IPv4", map[string]any{"ipam": staticIPAM(v.v4.String() + "/24")}, holder},
		{"static-neighbours-IPv6", map[string]any{"ipam": staticIPAM(v.v6.String() + "/64")}, holder},
		{"overlapping-host-local-range", map[string]any{"ipam": overlap(v.v4)}, holder},
		{"static-gateway", map[string]any{"ipam": staticIPAM("192.0.2.1/24")}, gateway},
		{"static-IPv6-gateway", map[string]any{"ipam": staticIPAM("2001:db8:c::1/64")}, gateway},
		{"static-node-address", map[string]any{"ipam": staticIPAM(nodeV4 + "/24")}, gateway},
		{"allowed-gateway", map[string]any{"allowedAddresses": []any{"192.0.2.1/32"}}, gateway},
		{"allowed-range-covering-gateway", map[string]any{"allowedAddresses": []any{"192.0.2.0/30"}}, gateway},
		{"allowed-node-address", map[string]any{"allowedAddresses": []any{nodeV4}}, gateway},
		{"allowed-neighbours-link-local", map[string]any{"allowedAddresses": []any{v.ll.String()}}, holder},
		{"allowed-neighbours-address", map[string]any{"allowedAddresses": []any{v.v6.String()}}, holder},
		{"control-static-free-address", map[string]any{"ipam": staticIPAM("192.0.2.200/24", "2001:db8:c::200/64")}, ""},
		{"control-allowed-free-addresses", map[string]any{"allowedAddresses": []any{"192.0.2.232/30", "192.0.2.240/32", "2001:db8:c::232"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Static IPAM with a free address unless the case says (the
			// lab has host-local ranges for a few networks only).
			entry := map[string]any{"type": "ovs-bridge", "bridge": l.Bridge, "ovsdb": ovsdbAddr, "isGateway": true,
				"ipam": staticIPAM(fmt.Sprintf("192.0.2.%d/24", 200+i))}
			for k, v := range tc.extra {
				entry[k] = v
			}
			n := framework.NewCNI(t, conflist("1.1.0", "claim-"+tc.name, entry), nil)
			m := framework.NewContainer(t)
			_, err := n.Add(m, "eth0", nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ADD: %v, want it accepted", err)
				}
				if err := n.Check(m, "eth0", nil); err != nil {
					t.Errorf("CHECK: %v", err)
				}
				if err := n.Del(m, "eth0", nil); err != nil {
					t.Errorf("DEL: %v", err)
				}
				return
			}
			if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tc.want) {
				n.Del(m, "eth0", nil)
				t.Fatalf("ADD: got %v (code %d), want code 7 naming %s", err, cniCode(err), tc.want)
			}
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, m.ID); len(ports) != 0 {
				t.Errorf("ports %v left", ports)
			}
			sel := flows.AttachmentCookie(m.ID, "eth0").AttachmentDelete().String()
			if fl, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows", l.OFTarget(), sel); err != nil || strings.Contains(fl, "cookie=") {
				t.Errorf("flows of %s left: %s %v", sel, fl, err)
			}
			if ipam, _ := tc.extra["ipam"].(map[string]any); ipam != nil && ipam["type"] == "host-local" {
				if got := allocations(t, ipam["dataDir"].(string), "claim-"+tc.name); len(got) != 0 {
					t.Errorf("allocations %v left", got)
				}
			}
		})
	}
	// The victim's address is still its own.
	if got := neighMAC(t, nil, l.Bridge, v.v4); got != "" && got != v.mac.String() {
		t.Errorf("the node's neighbour entry for %s is %s, want the victim's %s", v.v4, got, v.mac)
	}
	l.normal(t)
}

// N ADDs race for one address (static IPAM, N containers): exactly one
// wins, every other is refused with code 7 and leaves no port. Once the
// winner is deleted, its claim is gone with its port: the address can be
// taken again.
func TestAddressClaimConcurrent(t *testing.T) {
	const n = 8
	l := newLab(t)
	nw := l.network("claim-race", map[string]any{"ipam": staticIPAM("192.0.2.241/24")}, nil)
	for round := 0; round < 3; round++ {
		cs := make([]*framework.Container, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range cs {
			cs[i] = framework.NewContainer(t)
		}
		for i := range cs {
			wg.Add(1)
			go func() { defer wg.Done(); _, errs[i] = nw.Add(cs[i], "eth0", nil) }()
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case cniCode(err) != types.ErrInvalidNetworkConfig:
				t.Errorf("round %d: ADD %d: got %v (code %d), want code 7", round, i, err, cniCode(err))
			default:
				if ports := framework.PortsOf(t, ovsdb.KeyContainerID, cs[i].ID); len(ports) != 0 {
					t.Errorf("round %d: the refused ADD %d left ports %v", round, i, ports)
				}
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d ADDs of 192.0.2.241 won, want exactly 1", round, won)
		}
		for _, c := range cs {
			if err := nw.Del(c, "eth0", nil); err != nil {
				t.Errorf("round %d: DEL: %v", round, err)
			}
		}
	}
}

// The poisoning the claim prevents. A client knows the victim's IPv4 and
// IPv6 addresses; a second container is given the same addresses (static
// IPAM). Protected: its ADD is refused, the client's neighbour entries
// stay the victim's. Control: the victim's Port row without its address
// claims, as an attachment recorded before they existed has it; the ADD
// passes and the newcomer's gratuitous ARP and unsolicited NA (which port
// security lets through: they are for its own addresses) take the
// client's entries over.
func TestAttackAddressClaimPoisoning(t *testing.T) {
	for _, tc := range []struct {
		name    string
		claimed bool
	}{{"protected", true}, {"control-unclaimed-record", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			v := l.join(l.network("poison-victim", nil, nil), "victim", nil)
			c := l.join(l.network("poison-client", nil, nil), "client", nil)
			for _, ip := range []netip.Addr{v.v4, v.v6} {
				if _, err := c.Exec("ping", "-c", "1", "-W", "2", ip.String()); err != nil {
					t.Fatalf("ping %s: %v", ip, err)
				}
			}
			if !tc.claimed {
				port := v.Container.HostVeth("eth0")
				for _, ip := range []netip.Addr{v.v4, v.v6, v.ll} {
					framework.Vsctl(t, "remove", "Port", port, "external_ids", fmt.Sprintf("%q", "ovsflow.io/ip/"+l.Bridge+"/"+ip.String()))
				}
				// A record without the claims is still whole: reconcile
				// and CHECK accept it.
				if out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr); err != nil {
					t.Fatalf("reconcile: %v: %s", err, out)
				}
				if err := v.n.Check(v.Container, "eth0", nil); err != nil {
					t.Errorf("CHECK of the victim without its claims: %v", err)
				}
			}
			n := l.network("poison-attacker", map[string]any{"ipam": staticIPAM(v.v4.String()+"/24", v.v6.String()+"/64")}, nil)
			a := framework.NewContainer(t)
			r, err := n.Add(a, "eth0", nil)
			t.Cleanup(func() { n.Del(a, "eth0", nil) })
			if tc.claimed {
				if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), v.ID) {
					t.Fatalf("ADD of the victim's addresses: got %v (code %d), want code 7 naming %s", err, cniCode(err), v.ID)
				}
				// The refused container never had a port: nothing it
				// sends can reach the client.
				for _, ip := range []netip.Addr{v.v4, v.v6} {
					if got := neighMAC(t, c.Container, "eth0", ip); got != v.mac.String() {
						t.Errorf("client's neighbour entry for %s: %s, want the victim's %s", ip, got, v.mac)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("control: ADD of the victim's addresses with its claims gone: %v, want it accepted", err)
			}
			am, err := net.ParseMAC(r.Interfaces[1].Mac)
			if err != nil {
				t.Fatal(err)
			}
			// What the newcomer's kernel announces when its addresses come
			// up, sent again until the client follows (its neighbour
			// entries ignore an override within locktime of their update).
			s := sender(t, a.NS, "eth0")
			allNodes := netip.MustParseAddr("ff02::1")
			poisoned := func() bool {
				return neighMAC(t, c.Container, "eth0", v.v4) == am.String() && neighMAC(t, c.Container, "eth0", v.v6) == am.String()
			}
			for deadline := time.Now().Add(10 * time.Second); !poisoned() && time.Now().Before(deadline); {
				mustSend(t, s, ethFrame(broadcastMAC, am, etherARP, arpPacket(1, am, v.v4, make([]byte, 6), v.v4)),
					ethFrame(multicastMAC(allNodes), am, etherIPv6, icmp6Packet(v.v6, allNodes, icmp6NA, 0, naBody(v.v6, am))))
				time.Sleep(200 * time.Millisecond) // the pace of the announcements, not a wait for a result
			}
			for _, ip := range []netip.Addr{v.v4, v.v6} {
				if got := neighMAC(t, c.Container, "eth0", ip); got != am.String() {
					t.Errorf("control: client's neighbour entry for %s: %s, want the newcomer's %s (poisoned)", ip, got, am)
				}
			}
		})
	}
}
