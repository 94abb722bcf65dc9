package resilience

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// The plugins never modify or delete a port, flow or nft object they did not
// create: foreign ports (no owner key, another owner, or every key of ours
// but the owner), flows with other cookies in tables 0 and 40-43 (one of
// them with our attachment's hash bits but not our suite tag) and foreign
// nft tables (one named like ours in another family) survive ADD, a retried
// ADD, CHECK, STATUS, GC and DEL of both plugins; GC of one network leaves
// another network's attachment on the same bridge alone.
func TestOwnership(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	ctx := context.Background()
	a, b := framework.NewContainer(t), framework.NewContainer(t)
	capsA, capsB := mappings(pm(8480, 80, "tcp", ""), pm(8481, 81, "udp", "")), mappings(pm(8482, 80, "tcp", ""))
	x := &pluginExec{}
	dirA, dirB := t.TempDir(), t.TempDir()
	own := newCNI(t, conflist("1.1.0", "own", framework.BridgeConf(h.Bridge, ovsdbAddr, dirA, map[string]any{"isGateway": true}), framework.PortmapConf(ovsdbAddr, nil)), x)
	own2 := newCNI(t, conflist("1.1.0", "own2", framework.BridgeConf(h.Bridge, ovsdbAddr, dirB, map[string]any{"isGateway": true}), framework.PortmapConf(ovsdbAddr, nil)), x)
	t.Cleanup(func() { own.DelContext(ctx, a, "eth0", capsA); own2.DelContext(ctx, b, "eth0", capsB) })

	// Foreign ports.
	cookieA := flows.AttachmentCookie(a.ID, "eth0")
	foreignPorts := map[string]string{
		"rsforeign0": "",
		"rsforeign1": "external_ids:ovsflow.io/owner=someone-else external_ids:ovsflow.io/container-id=" + a.ID + " external_ids:ovsflow.io/ifname=eth0",
		"rsforeign2": fmt.Sprintf("external_ids:ovsflow.io/container-id=%s external_ids:ovsflow.io/ifname=eth0 external_ids:ovsflow.io/network=own external_ids:ovsflow.io/bridge=%s external_ids:ovsflow.io/portmap={}", a.ID, h.Bridge),
	}
	for name, ids := range foreignPorts {
		args := []string{"add-port", h.Bridge, name, "--", "set", "Interface", name, "type=internal"}
		if ids != "" {
			args = append(args, "--", "set", "Port", name)
			args = append(args, strings.Fields(ids)...)
		}
		framework.Vsctl(t, args...)
		t.Cleanup(func() { run("ovs-vsctl", "--db="+ovsdbAddr, "--if-exists", "del-port", name) })
	}
	// Foreign flows (TEST-NET-3 addresses: they never match our traffic).
	foreignCookies := []flows.Cookie{0, 0x1234, flows.CookieSuite + 1<<48, cookieA &^ flows.SuiteMask, 0xdead00000000beef}
	var flowLines []string
	for i, c := range foreignCookies {
		for j, table := range []int{0, 40, 41, 42, 43} {
			flowLines = append(flowLines, fmt.Sprintf("table=%d,cookie=%s,priority=%d,ip,nw_dst=203.0.113.%d,actions=drop", table, c, 100+100*(j%3), 10*i+j))
		}
	}
	if out, err := run("sh", "-c", fmt.Sprintf("printf '%%s\\n' %s | ovs-ofctl -O OpenFlow14 add-flows %s -", shellQuote(flowLines), h.OFTarget())); err != nil {
		t.Fatalf("foreign flows: %v: %s", err, out)
	}
	// Foreign nft tables.
	nftForeign := `table ip rsforeign {
	map hostports {
		type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service
		elements = { 198.51.100.1 . tcp . 8480 : 203.0.113.5 . 80 }
	}
	chain output {
		type nat hook output priority 100; policy accept;
	}
}
table inet ovsflow_hostport {
	set keep {
		type ipv4_addr
		elements = { 203.0.113.7 }
	}
}
`
	nft := exec.Command("nft", "-f", "-")
	nft.Stdin = strings.NewReader(nftForeign)
	if out, err := nft.CombinedOutput(); err != nil {
		t.Fatalf("foreign nft: %v: %s", err, out)
	}
	t.Cleanup(func() {
		run("nft", "delete", "table", "ip", "rsforeign")
		run("nft", "delete", "table", "inet", "ovsflow_hostport")
	})

	snapshot := func() string {
		var b strings.Builder
		var rows []string
		for _, r := range (node{db: ovsdbAddr}).rows(t, "Port") {
			if _, ok := foreignPorts[r.Name]; ok {
				rows = append(rows, fmt.Sprintf("port %s %v", r.Name, r.ExternalIDs))
			}
		}
		sort.Strings(rows)
		b.WriteString(strings.Join(rows, "\n") + "\n")
		for _, c := range foreignCookies {
			// (a dump by cookie=0/-1 finds nothing: list all, keep cookie c)
			out, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows", h.OFTarget())
			if err != nil {
				t.Fatal(err)
			}
			var fl []string
			for _, l := range strings.Split(out, "\n") {
				// --no-stats leaves cookie 0 out
				if strings.Contains(l, fmt.Sprintf("cookie=%#x,", uint64(c))) || (c == 0 && !strings.Contains(l, "cookie=") && strings.Contains(l, "actions=")) {
					fl = append(fl, strings.TrimSpace(l))
				}
			}
			sort.Strings(fl)
			fmt.Fprintf(&b, "flows %s:\n%s\n", c, strings.Join(fl, "\n"))
		}
		for _, tbl := range [][]string{{"ip", "rsforeign"}, {"inet", "ovsflow_hostport"}} {
			out, err := run("nft", "list", "table", tbl[0], tbl[1])
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString(out)
		}
		return b.String()
	}
	before := snapshot()
	// every foreign cookie in 5 tables, and table 0's NORMAL flow (cookie 0)
	if n := strings.Count(before, "actions="); n != len(foreignCookies)*5+1 {
		t.Fatalf("foreign flows installed: %d, want %d:\n%s", n, len(foreignCookies)*5+1, before)
	}
	commands := 0
	step := func(what string, f func() error, wantErr bool) {
		t.Helper()
		commands++
		err := f()
		if (err != nil) != wantErr {
			t.Errorf("%s: got %v, want error: %v", what, err, wantErr)
		}
		if after := snapshot(); after != before {
			t.Errorf("%s changed foreign objects:\nbefore:\n%s\nafter:\n%s", what, before, after)
		}
	}
	portsOf := func(id string) int {
		k := 0
		for _, r := range (node{db: ovsdbAddr}).rows(t, "Port") {
			if r.ExternalIDs["ovsflow.io/container-id"] == id && r.ExternalIDs["ovsflow.io/owner"] == "ovsflow-cni" {
				k++
			}
		}
		return k
	}
	step("ADD", func() error { _, err := own.AddContext(ctx, a, "eth0", capsA); return err }, false)
	step("ADD retried", func() error { _, err := own.AddContext(ctx, a, "eth0", capsA); return err }, false)
	step("CHECK", func() error { return own.CheckContext(ctx, a, "eth0", capsA) }, false)
	step("ADD of another network", func() error { _, err := own2.AddContext(ctx, b, "eth0", capsB); return err }, false)
	step("STATUS", func() error { return own.Status(ctx) }, false)
	step("GC keeping A", func() error { return own.GC(ctx, t, []types.GCAttachment{{ContainerID: a.ID, IfName: "eth0"}}) }, false)
	if portsOf(a.ID) != 1 || portsOf(b.ID) != 1 {
		t.Errorf("GC keeping A: ports of A %d, of B %d, want 1 and 1", portsOf(a.ID), portsOf(b.ID))
	}
	step("GC of network own with no valid attachment", func() error { return own.GC(ctx, t, nil) }, false)
	if portsOf(a.ID) != 0 || portsOf(b.ID) != 1 {
		t.Errorf("GC of own: ports of A %d (want 0), of B (network own2) %d (want 1)", portsOf(a.ID), portsOf(b.ID))
	}
	step("DEL after GC", func() error { return own.DelContext(ctx, a, "eth0", capsA) }, false)
	step("CHECK of the other network", func() error { return own2.CheckContext(ctx, b, "eth0", capsB) }, false)
	step("DEL", func() error { return own2.DelContext(ctx, b, "eth0", capsB) }, false)
	step("DEL again", func() error { return own2.DelContext(ctx, b, "eth0", capsB) }, false)
	step("GC of network own2", func() error { return own2.GC(ctx, t, nil) }, false)
	step("STATUS of network own2", func() error { return own2.Status(ctx) }, false)
	framework.Figure(t, "ownership", "commands", commands, "foreign_ports", len(foreignPorts), "foreign_flows", len(foreignCookies)*5+1,
		"foreign_nft_tables", 2, "foreign_changed", boolInt(t.Failed()))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func shellQuote(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
