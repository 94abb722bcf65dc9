package resilience

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// The oracles below read the node with the tools an operator would use
// (ovs-vsctl, ovs-ofctl, nft, ip, the IPAM files), never through the
// plugins' own code, so that a bug there cannot hide a leak.

// node is where attachments live: an OVSDB, a bridge, and the netns in which
// the plugins run (veths, nft).
type node struct {
	db     string // OVSDB endpoint
	netns  string // "" = this process's netns (the sandbox "node")
	bridge string
}

func (n node) cmd(name string, args ...string) (string, error) {
	if n.netns != "" {
		return run("ip", append([]string{"netns", "exec", n.netns, name}, args...)...)
	}
	return run(name, args...)
}

func (n node) ofTarget() string { return framework.OFTarget(n.db, n.bridge) }

// ovsRow is a Port or Interface row.
type ovsRow struct {
	UUID, Name  string
	ExternalIDs map[string]string
}

// rows lists every row of table (Port or Interface) with its external_ids.
func (n node) rows(t testing.TB, table string) []ovsRow {
	t.Helper()
	out := framework.VsctlAt(t, n.db, "-f", "json", "--columns=_uuid,name,external_ids", "list", table)
	var doc struct {
		Data [][]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("ovs-vsctl list %s: %v\n%s", table, err, out)
	}
	var rows []ovsRow
	for _, d := range doc.Data {
		var uuid [2]string
		var name string
		var ids [2]json.RawMessage
		if len(d) != 3 || json.Unmarshal(d[0], &uuid) != nil || json.Unmarshal(d[1], &name) != nil || json.Unmarshal(d[2], &ids) != nil {
			t.Fatalf("ovs-vsctl list %s: unexpected row %s", table, d)
		}
		var pairs [][2]string
		if err := json.Unmarshal(ids[1], &pairs); err != nil {
			t.Fatalf("ovs-vsctl list %s: external_ids %s: %v", table, ids[1], err)
		}
		r := ovsRow{UUID: uuid[1], Name: name, ExternalIDs: map[string]string{}}
		for _, p := range pairs {
			r.ExternalIDs[p[0]] = p[1]
		}
		rows = append(rows, r)
	}
	return rows
}

// links lists the interface names of the netns.
func (n node) links(t testing.TB) []string {
	t.Helper()
	args := []string{"-o", "link", "show"}
	if n.netns != "" {
		args = append([]string{"-n", n.netns}, args...)
	}
	out, err := run("ip", args...)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.SplitN(l, ": ", 3)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(f[1], "@")
		names = append(names, name)
	}
	return names
}

// veths lists the links named like the plugin names host veths.
func (n node) veths(t testing.TB) []string {
	var out []string
	for _, l := range n.links(t) {
		if strings.HasPrefix(l, "ovf") {
			out = append(out, l)
		}
	}
	return out
}

// nftElem is one element of a hostports map.
type nftElem struct {
	Text        string
	ContainerIP netip.Addr
}

// nftElements lists the elements of both families' hostports maps.
func (n node) nftElements(t testing.TB) []nftElem {
	t.Helper()
	var elems []nftElem
	for _, fam := range []string{"ip", "ip6"} {
		out, err := n.cmd("nft", "-j", "list", "map", fam, "ovsflow_hostport", "hostports")
		if err != nil {
			if strings.Contains(out, "No such file or directory") {
				continue // no table yet (or none left)
			}
			t.Fatal(err)
		}
		var doc struct {
			Nftables []struct {
				Map *struct {
					Elem [][2]struct {
						Concat []any `json:"concat"`
					} `json:"elem"`
				} `json:"map"`
			} `json:"nftables"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("nft -j: %v\n%s", err, out)
		}
		for _, o := range doc.Nftables {
			if o.Map == nil {
				continue
			}
			for _, e := range o.Map.Elem {
				text := fmt.Sprintf("%s %v : %v", fam, e[0].Concat, e[1].Concat)
				var ip netip.Addr
				if len(e[1].Concat) > 0 {
					s, _ := e[1].Concat[0].(string)
					ip, _ = netip.ParseAddr(s)
				}
				elems = append(elems, nftElem{Text: text, ContainerIP: ip})
			}
		}
	}
	return elems
}

// attachmentFlows returns every flow of the bridge that belongs to an
// attachment (suite tag, any kind but shared: host ports, port security),
// by attachment cookie with the kind cleared (attachment.cookie).
func (n node) attachmentFlows(t testing.TB) map[flows.Cookie][]string {
	t.Helper()
	out, err := run("ovs-ofctl", "--timeout=10", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows", n.ofTarget(), flows.SuiteDelete().String())
	if err != nil {
		if strings.Contains(out, "No such file or directory") {
			return nil // ovs-vswitchd is not running: it holds no flow
		}
		t.Fatal(err)
	}
	byCookie := map[flows.Cookie][]string{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		rest, ok := strings.CutPrefix(l, "cookie=")
		if !ok {
			continue
		}
		hex, _, _ := strings.Cut(rest, ",")
		var v uint64
		if _, err := fmt.Sscanf(hex, "0x%x", &v); err != nil {
			t.Fatalf("flow %q: cookie: %v", l, err)
		}
		c := flows.Cookie(v)
		if c.Kind() == flows.CookieKindShared || c.Kind() == flows.CookieKindTombstone {
			continue // shared by design; tombstones go by their hard timeout (test/e2e checks)
		}
		if c.Kind() == flows.CookieKindGateway {
			byCookie[c] = append(byCookie[c], l) // a gateway's, whole (audit.run)
			continue
		}
		byCookie[c&flows.AttachmentMask] = append(byCookie[c&flows.AttachmentMask], l)
	}
	return byCookie
}

// allocations maps each IP host-local holds in dataDir/network to the
// container ID that holds it.
func allocations(t testing.TB, dataDir, network string) map[string]string {
	t.Helper()
	dir := filepath.Join(dataDir, network)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			t.Fatal(err)
		}
		id, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		out[e.Name()] = strings.TrimSpace(id)
	}
	return out
}

// attachment is one container interface the test knows about.
type attachment struct {
	id, ifname string
	ips        []netip.Addr // its addresses, when known
}

func (a attachment) veth() string { return link.HostVethName(a.id, a.ifname) }
func (a attachment) cookie() flows.Cookie {
	return flows.AttachmentCookie(a.id, a.ifname) & flows.AttachmentMask // every kind
}
func (a attachment) key() string              { return a.id + "/" + a.ifname }
func (a attachment) hasIP(ip netip.Addr) bool { return slices.Contains(a.ips, ip.Unmap()) }

// audit compares the node with what should be there: every object of an
// attachment in used but not in live is a leak; an object of a live
// attachment that is missing is reported too (missing). Node-wide objects
// that belong to no live attachment (nft elements of the test's subnets,
// ovf* veths, attachment flows on the bridge, allocations in dataDir) count
// as leaks as well.
type audit struct {
	n               node
	dataDir, netw   string
	subnets         []netip.Prefix
	wantMappings    bool // live attachments have host ports (flows, nft elements)
	allVethsAreOurs bool // every ovf* veth of the netns belongs to this test
}

type auditResult struct {
	leaked, missing []string
	// torn are host-local reservation files without an owner: host-local
	// was killed between creating the file and writing the container ID
	// into it (upstream host-local, not ovsflow; only a kill of the whole
	// process group reaches host-local).
	torn []string
}

func (r auditResult) String() string {
	return fmt.Sprintf("leaked %d: %s\nmissing %d: %s", len(r.leaked), strings.Join(r.leaked, "\n  "),
		len(r.missing), strings.Join(r.missing, "\n  "))
}

func (au audit) run(t testing.TB, used map[string]attachment, live map[string]attachment) auditResult {
	t.Helper()
	var r auditResult
	leak := func(f string, a ...any) { r.leaked = append(r.leaked, fmt.Sprintf(f, a...)) }
	miss := func(f string, a ...any) { r.missing = append(r.missing, fmt.Sprintf(f, a...)) }
	usedByID := map[string]bool{}
	for _, a := range used {
		usedByID[a.id] = true
	}
	liveByID := map[string]attachment{}
	for _, a := range live {
		liveByID[a.id] = a
	}

	// OVSDB rows: by container ID, owner key or not.
	for _, table := range []string{"Port", "Interface"} {
		seen := map[string]int{}
		for _, row := range au.n.rows(t, table) {
			id, ok := row.ExternalIDs[ovsdb.KeyContainerID]
			if !ok || !usedByID[id] {
				continue
			}
			if _, isLive := liveByID[id]; !isLive {
				leak("%s %s of %s (external_ids %v)", table, row.Name, id, row.ExternalIDs)
				continue
			}
			seen[id]++
		}
		for id := range liveByID {
			if seen[id] != 1 {
				miss("%s of %s: %d rows, want 1", table, id, seen[id])
			}
		}
	}
	// veths
	liveVeths := map[string]bool{}
	for _, a := range live {
		liveVeths[a.veth()] = true
	}
	usedVeths := map[string]string{}
	for _, a := range used {
		usedVeths[a.veth()] = a.key()
	}
	present := map[string]bool{}
	for _, v := range au.n.veths(t) {
		present[v] = true
		if liveVeths[v] {
			continue
		}
		if owner, ok := usedVeths[v]; ok {
			leak("veth %s of %s", v, owner)
		} else if au.allVethsAreOurs {
			leak("veth %s of no known attachment", v)
		}
	}
	for v := range liveVeths {
		if !present[v] {
			miss("veth %s", v)
		}
	}
	// flows
	liveCookies := map[flows.Cookie]string{}
	for _, a := range live {
		liveCookies[a.cookie()] = a.key()
	}
	fl := au.n.attachmentFlows(t)
	// A gateway's flows belong to the gateways the bridges record
	// (pkg/gateway): those of one no longer recorded are a leak.
	for _, row := range au.n.rows(t, "Bridge") {
		for _, g := range record.Gateways(row.ExternalIDs) {
			liveCookies[flows.GatewayCookie(g)] = "gateway " + g.String() + " of bridge " + row.Name
		}
	}
	for c, lines := range fl {
		if _, ok := liveCookies[c]; !ok {
			leak("%d flow(s) with cookie %s, e.g. %s", len(lines), c, lines[0])
		}
	}
	if au.wantMappings {
		for c, k := range liveCookies {
			if len(fl[c]) == 0 && c.Kind() != flows.CookieKindGateway {
				miss("flows of %s (cookie %s)", k, c)
			}
		}
	}
	// nft elements
	liveIPs := map[netip.Addr]string{}
	for _, a := range live {
		for _, ip := range a.ips {
			liveIPs[ip] = a.key()
		}
	}
	inSubnets := func(ip netip.Addr) bool {
		for _, p := range au.subnets {
			if p.Contains(ip) {
				return true
			}
		}
		return false
	}
	withElem := map[string]bool{}
	for _, e := range au.n.nftElements(t) {
		if k, ok := liveIPs[e.ContainerIP]; ok {
			withElem[k] = true
			continue
		}
		if inSubnets(e.ContainerIP) {
			leak("nft element %s", e.Text)
		}
	}
	if au.wantMappings {
		for _, a := range live {
			if !withElem[a.key()] {
				miss("nft elements of %s (%v)", a.key(), a.ips)
			}
		}
	}
	// IPAM
	held := map[string]int{}
	for ip, id := range allocations(t, au.dataDir, au.netw) {
		if id == "" {
			r.torn = append(r.torn, filepath.Join(au.dataDir, au.netw, ip))
			continue
		}
		if _, ok := liveByID[id]; ok {
			held[id]++
			continue
		}
		leak("IP allocation %s of %s", ip, id)
	}
	for id := range liveByID {
		if held[id] == 0 {
			miss("IP allocations of %s", id)
		}
	}
	sort.Strings(r.leaked)
	sort.Strings(r.missing)
	return r
}
