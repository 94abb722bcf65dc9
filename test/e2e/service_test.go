package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// A Service address as kube-proxy makes one, without Kubernetes: a DNAT
// rule of the node's (nft, prerouting) from svcV4:80 and [svcV6]:80 to a
// backend container. The client container sends to its gateway, the
// bridge interface; the node DNATs and routes the request back out of the
// bridge to the backend, with the client's source address.
var (
	svcV4 = netip.MustParseAddr("203.0.113.80")
	svcV6 = netip.MustParseAddr("2001:db8:5e::80")
)

// serviceDNAT adds the node's DNAT of svcV4:80 and [svcV6]:80, TCP and UDP,
// to the backend's addresses, and removes it at the end of the test.
func serviceDNAT(t *testing.T, backend *member) {
	t.Helper()
	table := framework.Uniq("ovsflow_svc")
	for _, fam := range []struct {
		family, l3    string
		svc, backend  netip.Addr
		backendFormat string
	}{{"ip", "ip", svcV4, backend.v4, "%s"}, {"ip6", "ip6", svcV6, backend.v6, "[%s]"}} {
		to := fmt.Sprintf(fam.backendFormat, fam.backend)
		rules := fmt.Sprintf(`table %s %s {
	chain prerouting {
		type nat hook prerouting priority -100; policy accept;
		%s daddr %s tcp dport 80 dnat to %s:80
		%s daddr %s udp dport 80 dnat to %s:80
	}
}
`, fam.family, table, fam.l3, fam.svc, to, fam.l3, fam.svc, to)
		file := filepath.Join(t.TempDir(), "rules.nft")
		if err := os.WriteFile(file, []byte(rules), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { run("nft", "delete", "table", fam.family, table) })
		if _, err := run("nft", "-f", file); err != nil {
			t.Fatalf("%v\n%s", err, rules)
		}
	}
}

// TestServiceBackendOnTheSameBridge: a container calls a Service whose
// backend is another container of its subnet on the same bridge. Its
// answer must come back through the node, which un-DNATs it; switched
// straight to the client (as NORMAL does) it comes from the backend's
// address, and the client drops it. TCP and UDP, IPv4 and IPv6. The
// backend also publishes its port (a host port): its replies meet the
// host port reply classifier after the Service reply flows. Direct traffic
// between the two, the node's own, and the host port from outside keep
// working; an ovs-vswitchd restart and reconcile bring the flows back; the
// control without the backend's reply flow shows they are what makes it
// work; after DEL nothing of them is left.
func TestServiceBackendOnTheSameBridge(t *testing.T) {
	l := newLab(t)
	n := l.network("svc", nil, map[string]any{})
	backend := l.join(n, "backend", mappings(pm(8097, 80, "tcp", "")))
	client := l.join(n, "client", nil)
	backend.ServeTCP(t, 80)
	backend.ServeUDP(t, 80)
	serviceDNAT(t, backend)
	l.watch(backend.Container, "backend")
	l.watch(client.Container, "client")
	t.Cleanup(func() {
		if t.Failed() {
			ct, _ := run("ovs-appctl", "-t", vswitchdCtl(t), "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", flows.GatewayZone))
			lo, _ := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", l.OFTarget(), "in_port=LOCAL")
			t.Logf("zone %d:\n%s\nflows from LOCAL:\n%s", flows.GatewayZone, ct, lo)
		}
	})

	services := func(t *testing.T, what string) {
		t.Helper()
		for _, s := range []struct {
			svc, src netip.Addr
		}{{svcV4, client.v4}, {svcV6, client.v6}} {
			for _, network := range []string{"tcp", "udp"} {
				got, err := framework.Dial(client.NS, network, hp(s.svc.String(), 80))
				if err != nil || !strings.HasPrefix(got, "hello from "+backend.ID+" ") {
					t.Errorf("%s: %s %s from the client: got %q, %v; want an answer from the backend", what, network, hp(s.svc.String(), 80), got, err)
					continue
				}
				// No masquerade on the way: the backend saw the client.
				if !strings.Contains(got, s.src.String()) {
					t.Errorf("%s: %s %s: the backend saw %q, want the client's address %s", what, network, hp(s.svc.String(), 80), got, s.src)
				}
			}
		}
	}
	direct := func(t *testing.T, what string) {
		t.Helper()
		for _, p := range []struct{ to, from netip.Addr }{{backend.v4, client.v4}, {backend.v6, client.v6}} {
			expect(t, client.NS, "tcp", hp(p.to.String(), 80), backend.Container, p.from.String())
			expect(t, client.NS, "udp", hp(p.to.String(), 80), backend.Container, p.from.String())
			expect(t, nil, "tcp", hp(p.to.String(), 80), backend.Container, "") // the node's own, from the gateway
			if err := backend.Ping(p.from.String()); err != nil {
				t.Errorf("%s: ping backend -> client %s: %v", what, p.from, err)
			}
		}
		expect(t, l.Outside.NS, "tcp", hp(nodeV4, 8097), backend.Container, outsideV4)
		expect(t, l.Outside.NS, "tcp", hp(nodeV6, 8097), backend.Container, outsideV6)
	}

	services(t, "after ADD")
	direct(t, "after ADD")
	if t.Failed() {
		return
	}
	// The connections were committed in the gateway's zone, marked.
	if ct := appctl(t, "dpctl/dump-conntrack", fmt.Sprintf("zone=%d", flows.GatewayZone)); !strings.Contains(ct, "mark=1") ||
		!strings.Contains(ct, "src="+client.v4.String()) || !strings.Contains(ct, "dst="+backend.v4.String()) {
		t.Errorf("zone %d holds no marked connection from %s to %s:\n%s", flows.GatewayZone, client.v4, backend.v4, ct)
	}

	restartVswitchd(t, nil)
	l.restoreNode(t)
	reconcileOnce(t)
	pollUntil(t, "the client pings the backend after the restart", func() bool { return client.Ping(backend.v4.String()) == nil })
	services(t, "after an ovs-vswitchd restart and reconcile")
	direct(t, "after an ovs-vswitchd restart and reconcile")

	// Control: without the backend's reply flow, its answers go straight
	// to the client, which drops them.
	cookie := flows.AttachmentCookie(backend.ID, "eth0").WithKind(flows.CookieKindPortSecurity)
	reply := fmt.Sprintf("cookie=%s/-1,table=0,priority=%d,in_port=%d,reg1=0x8/0x8,ct_state=+trk+rpl,ct_zone=%d,ct_mark=0x1/0x1",
		cookie, flows.PriorityGatewayReply, ofportOf(t, backend.Container), flows.GatewayZone)
	if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "--strict", "del-flows", l.OFTarget(), reply); err != nil {
		t.Fatal(err)
	}
	if out, _ := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", l.OFTarget(), "cookie="+cookie.String()+"/-1"); strings.Contains(out, fmt.Sprintf("priority=%d,", flows.PriorityGatewayReply)) {
		t.Fatalf("control: the reply flow is still there:\n%s", out)
	}
	// The datapath's cached flows were translated with the reply flow: a
	// revalidator drops them soon after, on its own time (a loaded machine
	// answered the control through them). Purged now.
	appctl(t, "revalidator/purge")
	for _, network := range []string{"tcp", "udp"} {
		if got, err := framework.Dial(client.NS, network, hp(svcV4.String(), 80)); err == nil {
			t.Errorf("control (no reply flow): %s %s answered %q: the test proves nothing", network, hp(svcV4.String(), 80), got)
		}
	}

	// DEL: the port flows go with the ports, and the gateway's with the
	// gateway, which no port needs any more.
	for _, m := range []*member{backend, client} {
		if err := n.Del(m.Container, "eth0", nil); err != nil {
			t.Fatalf("DEL %s: %v", m.role, err)
		}
	}
	for _, g := range []string{"192.0.2.1/24", "2001:db8:c::1/64"} {
		c := flows.GatewayCookie(netip.MustParsePrefix(g))
		if out, _ := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", l.OFTarget(), "cookie="+c.String()+"/-1"); strings.Contains(out, "cookie=") {
			t.Errorf("after DEL: flows of gateway %s left:\n%s", g, out)
		}
	}
}
