package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// portSecurity (default on): a container can send only from its own MAC and
// addresses; with it off, the same forgeries pass.
func TestPortSecurity(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", "psec", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), map[string]any{"isGateway": true})), nil)
	a, b := framework.NewContainer(t), framework.NewContainer(t)
	ra := n.MustAdd(t, a, "eth0", nil)
	rb := n.MustAdd(t, b, "eth0", nil)
	t.Cleanup(func() { n.Del(a, "eth0", nil); n.Del(b, "eth0", nil) })
	bV4, bV6 := framework.AddrOf(t, rb, false), framework.AddrOf(t, rb, true)

	if err := a.Ping(bV4); err != nil {
		t.Fatalf("own address: %v", err)
	}
	mustExec := func(c *framework.Container, args ...string) {
		t.Helper()
		if _, err := c.Exec(args...); err != nil {
			t.Fatal(err)
		}
	}
	// A forged IPv4 source (another address of the subnet).
	mustExec(a, "ip", "addr", "add", "192.0.2.200/24", "dev", "eth0")
	if _, err := a.Exec("ping", "-c", "1", "-W", "1", "-I", "192.0.2.200", bV4); err == nil {
		t.Errorf("ping from a forged IPv4 source got through")
	}
	// A forged IPv6 source.
	mustExec(a, "ip", "-6", "addr", "add", "2001:db8:c::200/64", "dev", "eth0", "nodad")
	if _, err := a.Exec("ping", "-6", "-c", "1", "-W", "1", "-I", "2001:db8:c::200", bV6); err == nil {
		t.Errorf("ping from a forged IPv6 source got through")
	}
	mustExec(a, "ip", "-6", "addr", "del", "2001:db8:c::200/64", "dev", "eth0")
	if err := a.Ping(bV6); err != nil {
		t.Errorf("own IPv6 address after the forgery: %v", err)
	}
	// A forged MAC.
	mac := ra.Interfaces[1].Mac
	mustExec(a, "ip", "link", "set", "eth0", "address", "02:00:00:00:99:99")
	mustExec(b, "ip", "neigh", "flush", "all")
	if err := a.Ping(bV4); err == nil {
		t.Errorf("ping from a forged MAC got through")
	}
	mustExec(a, "ip", "link", "set", "eth0", "address", mac)
	if err := a.Ping(bV4); err != nil {
		t.Errorf("own MAC again: %v", err)
	}
	out, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", (&framework.OVSHost{Bridge: br}).OFTarget(),
		flows.AttachmentCookie(a.ID, "eth0").WithKind(flows.CookieKindPortSecurity).Delete().String())
	if err != nil || !strings.Contains(out, "arp_spa="+framework.AddrOf(t, ra, false)) {
		t.Errorf("port security flows of A: %v\n%s", err, out)
	}

	// portSecurity off: the forged source passes, and no such flows exist.
	n2 := framework.NewCNI(t, conflist("1.0.0", "nopsec", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), map[string]any{"portSecurity": false,
		"ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": "192.0.2.100/24"}}}})), nil)

	c := framework.NewContainer(t)
	n2.MustAdd(t, c, "eth0", nil)
	t.Cleanup(func() { n2.Del(c, "eth0", nil) })
	mustExec(c, "ip", "addr", "add", "192.0.2.201/24", "dev", "eth0")
	if _, err := c.Exec("ping", "-c", "1", "-W", "2", "-I", "192.0.2.201", bV4); err != nil {
		t.Errorf("portSecurity false: forged source dropped: %v", err)
	}
	if fl := (&framework.OVSHost{Bridge: br}).FlowsOf(t, flows.AttachmentCookie(c.ID, "eth0").WithKind(flows.CookieKindPortSecurity)); len(fl) != 0 {
		t.Errorf("portSecurity false: flows %v", fl)
	}

	// DEL removes the port security flows with the port.
	if err := n.Del(a, "eth0", nil); err != nil {
		t.Fatal(err)
	}
	if fl := (&framework.OVSHost{Bridge: br}).FlowsOf(t, flows.AttachmentCookie(a.ID, "eth0").WithKind(flows.CookieKindPortSecurity)); len(fl) != 0 {
		t.Errorf("after DEL: port security flows %v", fl)
	}
}

// DEL leaves a tombstone for the port (everything it receives is dropped
// until ovs-vswitchd has removed it), and the tombstone goes by its hard
// timeout.
func TestDelTombstone(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", "tomb", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	c := framework.NewContainer(t)
	n.MustAdd(t, c, "eth0", nil)
	ofport := framework.Vsctl(t, "get", "Interface", c.HostVeth("eth0"), "ofport")
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Fatal(err)
	}
	h := &framework.OVSHost{Bridge: br}
	tomb := flows.CookieSuite | flows.Cookie(flows.CookieKindTombstone)<<flows.CookieKindShift
	got := h.FlowsOf(t, tomb)
	if len(got) != 1 || !strings.Contains(got[0], "in_port="+ofport+" ") || !strings.Contains(got[0], "hard_timeout=10") {
		t.Fatalf("after DEL: tombstone flows %q, want one for in_port=%s with hard_timeout=10", got, ofport)
	}
	if fl := h.FlowsOf(t, flows.AttachmentCookie(c.ID, "eth0").WithKind(flows.CookieKindPortSecurity)); len(fl) != 0 {
		t.Errorf("after DEL: port security flows %v", fl)
	}
	// The tombstone's hard_timeout: OVS expires it in its next round.
	if !framework.Until(flows.TombstoneTimeout*time.Second+3*time.Second, func() bool { return len(h.FlowsOf(t, tomb)) == 0 }) {
		t.Fatalf("tombstone still there %v after DEL", framework.Scaled(flows.TombstoneTimeout*time.Second+3*time.Second))
	}
}

// An ADD within TombstoneTimeout of its attachment's DEL gets the same
// requested ofport back, and its bundle lifts the tombstone on it: the new
// port forwards at once (with port security on, and off: then the bundle
// holds nothing else).
func TestReAddOverTombstone(t *testing.T) {
	requireSandbox(t)
	tomb := flows.CookieSuite | flows.Cookie(flows.CookieKindTombstone)<<flows.CookieKindShift
	for _, tt := range []struct {
		name  string
		extra map[string]any
	}{
		{"portSecurity", map[string]any{"isGateway": true}},
		{"no portSecurity", map[string]any{"isGateway": true, "portSecurity": false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			br := framework.NewBridge(t, "e2ebr")
			h := &framework.OVSHost{Bridge: br}
			n := framework.NewCNI(t, conflist("1.0.0", "retomb", framework.BridgeConf(br, ovsdbAddr, t.TempDir(), tt.extra)), nil)
			a, b := framework.NewContainer(t), framework.NewContainer(t)
			n.MustAdd(t, a, "eth0", nil)
			rb := n.MustAdd(t, b, "eth0", nil)
			t.Cleanup(func() { n.Del(a, "eth0", nil); n.Del(b, "eth0", nil) })
			ofport := framework.Vsctl(t, "get", "Interface", a.HostVeth("eth0"), "ofport")
			if req := framework.Vsctl(t, "get", "Interface", a.HostVeth("eth0"), "ofport_request"); req != ofport {
				t.Fatalf("ofport %s, ofport_request %s: want the requested one", ofport, req)
			}
			if err := n.Del(a, "eth0", nil); err != nil {
				t.Fatal(err)
			}
			if got := h.FlowsOf(t, tomb); len(got) != 1 || !strings.Contains(got[0], "in_port="+ofport+" ") {
				t.Fatalf("after DEL: tombstone flows %q, want one for in_port=%s", got, ofport)
			}
			n.MustAdd(t, a, "eth0", nil)
			if again := framework.Vsctl(t, "get", "Interface", a.HostVeth("eth0"), "ofport"); again != ofport {
				t.Fatalf("ADD again: ofport %s, want %s back", again, ofport)
			}
			if got := h.FlowsOf(t, tomb); len(got) != 0 {
				t.Fatalf("ADD again: tombstone flows %q, want none", got)
			}
			if err := a.Ping(framework.AddrOf(t, rb, false)); err != nil {
				t.Errorf("ADD again, within the tombstone's timeout: %v", err)
			}
		})
	}
}
