package e2e

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// A host-port reply takes its source MAC from the request's destination MAC
// (LabelOrigEthDst). A client outside sends UDP requests to the node's
// address and host port, one to the bridge interface's MAC (the control:
// answered, from that MAC) and one to a forged MAC: protected, the forged
// one is not translated, so no reply leaves with the forged MAC as its
// source (which would teach the switches outside that the node's port holds
// it).
func TestAttackHostPortReplyMAC(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.0.0", "pmmac", nil)
	a := framework.NewContainer(t)
	n.MustAdd(t, a, "eth0", mappings(pm(5395, 53, "udp", "")))
	t.Cleanup(func() { n.Del(a, "eth0", nil) })
	a.ServeUDP(t, 53)
	expect(t, h.Outside.NS, "udp", hp(nodeV4, 5395), a, outsideV4)

	ifi, err := net.InterfaceByName(h.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	nodeMAC := ifi.HardwareAddr
	var outMAC net.HardwareAddr
	if err := h.Outside.NS.Do(func(ns.NetNS) error {
		i, err := net.InterfaceByName("eth0")
		if err == nil {
			outMAC = i.HardwareAddr
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	forged, _ := net.ParseMAC("02:00:00:00:0b:ad")
	src, dst := netip.MustParseAddr(outsideV4), netip.MustParseAddr(nodeV4)
	sn := sniff(t, h.Outside.NS, "eth0", "outside")
	s := sender(t, h.Outside.NS, "eth0")
	reply := func(sport uint16) func(frame) bool {
		return func(f frame) bool {
			_, d, _, _, ok := f.ip()
			sp, dp, data, uok := f.udp()
			return ok && uok && d == src && sp == 5395 && dp == sport && bytes.HasPrefix(data, []byte("hello from "+a.ID))
		}
	}
	for _, tc := range []struct {
		name   string
		dstMAC net.HardwareAddr
		sport  uint16
	}{{"control-node-mac", nodeMAC, 41001}, {"forged-mac", forged, 41002}} {
		mustSend(t, s, ethFrame(tc.dstMAC, outMAC, etherIPv4, udp4(src, dst, tc.sport, 5395, []byte("ping"))))
		answered := sn.waitFor(time.Second, reply(tc.sport))
		if tc.dstMAC.String() == nodeMAC.String() {
			if !answered {
				t.Errorf("%s: no reply to a request sent to the node's MAC %s", tc.name, nodeMAC)
			}
			if got := sn.first(5, func(f frame) bool { return reply(tc.sport)(f) && f.src.String() != nodeMAC.String() }); len(got) > 0 {
				t.Errorf("%s: reply from another MAC than the node's %s: %v", tc.name, nodeMAC, got)
			}
			continue
		}
		if got := sn.first(5, func(f frame) bool { return reply(tc.sport)(f) && f.src.String() == forged.String() }); len(got) > 0 {
			t.Errorf("%s: reply left with the forged source MAC %s: %v", tc.name, forged, got)
		}
	}
	expect(t, h.Outside.NS, "udp", hp(nodeV4, 5395), a, outsideV4)
}

// Host ports on a port off VLAN 0: a network on VLAN 20 (or a trunk) whose
// range overlaps a VLAN-0 network's on the same bridge gives its container
// the same address as the VLAN-0 publisher. Its host ports would replace the
// publisher's flows of tables 40 and 41 (keyed by container address) and
// open a DNAT path from VLAN 0 into VLAN 20; ADD refuses them with code 7
// naming ovs-bridge's key, installs nothing, and the publisher keeps
// answering, also after the refused attachment's DEL. The control: the same
// mappings on VLAN 0 are accepted.
func TestAttackHostPortVLANOverlap(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	pub := h.PortmapList(t, "1.0.0", "pmv0", nil)
	a := framework.NewContainer(t)
	pub.MustAdd(t, a, "eth0", mappings(pm(8098, 80, "tcp", "")))
	t.Cleanup(func() { pub.Del(a, "eth0", nil) })
	a.ServeTCP(t, 80)
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8098), a, outsideV4)
	pmEntry := framework.PortmapConf(ovsdbAddr, nil)
	for _, tc := range []struct {
		name  string
		extra map[string]any
		field string // "" for the control
	}{
		{"vlan-20", map[string]any{"isGateway": true, "vlan": 20}, `"vlan"`},
		{"trunk", map[string]any{"isGateway": true, "trunk": []any{map[string]any{"id": 20}}}, `"trunk"`},
		{"control-vlan-0", map[string]any{"isGateway": true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A network of its own on the same bridge: its addresses start
			// past the first network's (an address has one holder per bridge).
			conf := framework.BridgeConf(h.Bridge, ovsdbAddr, t.TempDir(), tc.extra)
			conf["ipam"].(map[string]any)["ranges"] = []any{
				[]any{map[string]any{"subnet": "192.0.2.0/24", "gateway": "192.0.2.1", "rangeStart": "192.0.2.100"}},
				[]any{map[string]any{"subnet": "2001:db8:c::/64", "gateway": "2001:db8:c::1", "rangeStart": "2001:db8:c::100"}},
			}
			n := framework.NewCNI(t, conflist("1.0.0", "pm"+tc.name, conf, pmEntry), nil)
			b := framework.NewContainer(t)
			caps := mappings(pm(8099, 80, "tcp", ""))
			_, err := n.Add(b, "eth0", caps)
			t.Cleanup(func() { n.Del(b, "eth0", nil) })
			if tc.field == "" {
				if err != nil {
					t.Fatalf("ADD on VLAN 0: %v", err)
				}
				b.ServeTCP(t, 80)
				expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8099), b, outsideV4)
				return
			}
			if err == nil || cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("ADD with host ports on %s: got %v (code %d), want code 7 naming %s", tc.name, err, cniCode(err), tc.field)
			}
			if fl := h.FlowsOf(t, flows.AttachmentCookie(b.ID, "eth0")); slicesContainSubstring(fl, "table=4") || slicesContainSubstring(fl, "priority=200") {
				t.Errorf("refused ADD left host-port flows: %v", fl)
			}
			if err := n.Del(b, "eth0", nil); err != nil {
				t.Errorf("DEL: %v", err)
			}
			expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8098), a, outsideV4)
		})
	}
}
