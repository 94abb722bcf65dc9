package e2e

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/orphan"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// A DEL the runtime never ran (the sandbox's netns destroyed behind its
// back) is replayed by the orphan sweep (pkg/orphan, run by the node
// agent): after two passes the orphan's port, flows, host port and
// host-local address are gone, through the plugins' own DEL. An attachment
// whose veth exists is never touched; one whose veth is missing but whose
// ADD (a claim) or DEL (a deleting mark) is in flight is left alone until
// the claim or the mark goes.
func TestOrphanDelReplayed(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	dataDir := t.TempDir()
	const network = "orph"
	list := conflist("1.0.0", network,
		framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true}),
		map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"portMappings": true}})
	n := framework.NewCNI(t, list, nil)
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(t.TempDir(), "10-orph.conflist")
	if err := os.WriteFile(confPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sw := orphan.New(orphan.Config{OVSDB: ovsdbEP, Conflist: confPath, CNIPath: []string{binDir},
		CacheDir: t.TempDir(), Interval: 0, Log: testLog{t}})
	pass := func(what string) orphan.Result {
		t.Helper()
		res, err := sw.Pass(context.Background())
		if err != nil {
			t.Fatalf("%s: orphan pass: %v", what, err)
		}
		t.Logf("%s: suspects %v, deleted %v, failed %v", what, res.Suspects, res.Deleted, res.Failed)
		if len(res.Failed) > 0 {
			t.Fatalf("%s: DEL failed for %v", what, res.Failed)
		}
		return res
	}

	lost, keep, adding, dying := framework.NewContainer(t), framework.NewContainer(t), framework.NewContainer(t), framework.NewContainer(t)
	capLost, capKeep, capAdding := mappings(pm(8191, 80, "tcp", "")), mappings(pm(8192, 80, "tcp", "")), mappings(pm(8193, 80, "tcp", ""))
	rLost := n.MustAdd(t, lost, "eth0", capLost)
	n.MustAdd(t, keep, "eth0", capKeep)
	rAdding := n.MustAdd(t, adding, "eth0", capAdding)
	n.MustAdd(t, dying, "eth0", nil)
	t.Cleanup(func() {
		for _, c := range []*framework.Container{lost, keep, adding, dying} {
			n.Del(c, "eth0", nil)
		}
	})
	for _, c := range []*framework.Container{lost, keep, adding} {
		c.ServeTCP(t, 80)
	}
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8191), lost, outsideV4)
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8192), keep, outsideV4)
	keepCookie := flows.AttachmentCookie(keep.ID, "eth0")
	keepFlows := h.FlowsOf(t, keepCookie)
	if len(keepFlows) == 0 {
		t.Fatal("no flows for the kept attachment")
	}

	// Nothing is orphaned while every veth exists.
	if res := pass("all veths in place"); len(res.Suspects)+len(res.Deleted) != 0 {
		t.Fatalf("suspects %v, deleted %v with every veth in place", res.Suspects, res.Deleted)
	}

	// The sandboxes of lost and adding go without a DEL (the veth deleted
	// here, since the servers' sockets keep the namespaces themselves
	// alive; their netns unmounted); adding's ADD is retried and in flight
	// (its claim), dying's DEL is under way (its deleting mark).
	for _, c := range []*framework.Container{lost, adding, dying} {
		if _, err := run("ip", "link", "del", c.HostVeth("eth0")); err != nil {
			t.Fatal(err)
		}
		dropNetNS(t, c)
	}
	cli, err := ovsdb.Dial(context.Background(), ovsdbEP)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	addingAtt := ovsdb.Attachment{ContainerID: adding.ID, IfName: "eth0"}
	claim, err := cli.Reserve(context.Background(), addingAtt, ovsdb.HomeOFPort(addingAtt), "")
	if err != nil {
		t.Fatal(err)
	}
	dyingAtt := ovsdb.Attachment{ContainerID: dying.ID, IfName: "eth0"}
	mark, err := cli.BeginDelete(context.Background(), dyingAtt)
	if err != nil {
		t.Fatal(err)
	}
	// Control: while it is held, the lost host port is refused to a new
	// sandbox, naming the lost attachment.
	next := framework.NewContainer(t)
	if _, err := n.Add(next, "eth0", capLost); err == nil || !strings.Contains(err.Error(), lost.ID) {
		t.Fatalf("ADD of a new sandbox with the lost host port: got %v, want a conflict naming %s", err, lost.ID)
	}
	n.Del(next, "eth0", nil)

	// A sweeper with a long interval suspects, and deletes nothing until
	// that interval has passed since its first sighting.
	slow := orphan.New(orphan.Config{OVSDB: ovsdbEP, Conflist: confPath, CNIPath: []string{binDir},
		CacheDir: t.TempDir(), Interval: time.Hour, Log: testLog{t}})
	for i := 0; i < 2; i++ {
		if res, err := slow.Pass(context.Background()); err != nil || len(res.Deleted)+len(res.Failed) != 0 || len(res.Suspects) != 1 {
			t.Fatalf("pass %d of the sweeper of 1h: %+v, %v; want one suspect, no DEL", i, res, err)
		}
	}

	// First pass: suspects only.
	if res := pass("first pass"); len(res.Deleted) != 0 || !slices.Equal(res.Suspects, []ovsdb.Attachment{{ContainerID: lost.ID, IfName: "eth0"}}) {
		t.Fatalf("first pass: suspects %v, deleted %v; want only %s/eth0 suspected", res.Suspects, res.Deleted, lost.ID)
	}
	if len(framework.PortsOf(t, ovsdb.KeyContainerID, lost.ID)) != 1 {
		t.Fatal("the first pass removed the orphan's port")
	}
	// Second pass: lost's DEL is replayed; adding's claim keeps it.
	if res := pass("second pass"); !slices.Equal(res.Deleted, []ovsdb.Attachment{{ContainerID: lost.ID, IfName: "eth0"}}) {
		t.Fatalf("second pass: deleted %v, want %s/eth0", res.Deleted, lost.ID)
	}
	lostV4 := framework.AddrOf(t, rLost, false)
	if ps := framework.PortsOf(t, ovsdb.KeyContainerID, lost.ID); len(ps) != 0 {
		t.Errorf("orphan's ports left: %v", ps)
	}
	if fl := h.FlowsOf(t, flows.AttachmentCookie(lost.ID, "eth0")); len(fl) != 0 {
		t.Errorf("orphan's flows left: %v", fl)
	}
	if slices.Contains(allocations(t, dataDir, network), lostV4) {
		t.Errorf("orphan's address %s still allocated: %v", lostV4, allocations(t, dataDir, network))
	}
	if out, _ := run("nft", "list", "map", "ip", "ovsflow_hostport", "hostports"); strings.Contains(out, lostV4) {
		t.Errorf("orphan's node-local nft elements left:\n%s", out)
	}
	// The host port is free again: a new sandbox takes it and answers.
	n.MustAdd(t, next, "eth0", capLost)
	t.Cleanup(func() { n.Del(next, "eth0", nil) })
	next.ServeTCP(t, 80)
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8191), next, outsideV4)

	// The kept attachment is untouched.
	if len(framework.PortsOf(t, ovsdb.KeyContainerID, keep.ID)) != 1 {
		t.Error("the kept attachment's port is gone")
	}
	if got := h.FlowsOf(t, keepCookie); !slices.Equal(got, keepFlows) {
		t.Errorf("the kept attachment's flows changed:\n got %q\nwant %q", got, keepFlows)
	}
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 8192), keep, outsideV4)

	// The attachment with an ADD in flight is untouched, its address kept.
	addingV4 := framework.AddrOf(t, rAdding, false)
	if len(framework.PortsOf(t, ovsdb.KeyContainerID, adding.ID)) != 1 || len(h.FlowsOf(t, flows.AttachmentCookie(adding.ID, "eth0"))) == 0 {
		t.Error("the attachment with an ADD in flight lost its port or flows")
	}
	if !slices.Contains(allocations(t, dataDir, network), addingV4) {
		t.Errorf("the attachment with an ADD in flight lost its address %s", addingV4)
	}
	if len(framework.PortsOf(t, ovsdb.KeyContainerID, dying.ID)) != 1 {
		t.Error("the attachment with a DEL in flight lost its port to the sweep")
	}
	// Once its ADD is over (the claim gone) and the other's DEL given up
	// (the mark gone), each is an orphan like any.
	if err := cli.Release(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	if err := cli.Abandon(context.Background(), mark); err != nil {
		t.Fatal(err)
	}
	pass("claim and mark gone, first pass")
	want := []ovsdb.Attachment{addingAtt, dyingAtt}
	slices.SortFunc(want, func(x, y ovsdb.Attachment) int { return strings.Compare(x.String(), y.String()) })
	if res := pass("claim and mark gone, second pass"); !slices.Equal(res.Deleted, want) {
		t.Fatalf("after the claim and the mark: deleted %v, want %v", res.Deleted, want)
	}
	for _, c := range []*framework.Container{adding, dying} {
		if ps := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ps) != 0 {
			t.Errorf("ports of %s left: %v", c.ID, ps)
		}
	}
	if got := h.FlowsOf(t, keepCookie); !slices.Equal(got, keepFlows) {
		t.Errorf("the kept attachment's flows changed:\n got %q\nwant %q", got, keepFlows)
	}
}

// dropNetNS removes the netns of c as a runtime does when its sandbox goes:
// its bind mount is gone (the namespace itself goes with its last user).
func dropNetNS(t *testing.T, c *framework.Container) {
	t.Helper()
	c.NS.Close()
	if err := testutils.UnmountNS(c.NS); err != nil {
		t.Fatal(err)
	}
}

// A container that deletes its own eth0 (CAP_NET_ADMIN) takes the host
// veth with it while its sandbox runs: the sweep keeps its port and its
// address, and a new container gets another address. The control: a
// container whose netns goes is swept.
func TestOrphanKeepsLiveSandbox(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	dataDir := t.TempDir()
	const network = "orphlive"
	list := conflist("1.0.0", network, framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true}))
	n := framework.NewCNI(t, list, nil)
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(t.TempDir(), "10-orphlive.conflist")
	if err := os.WriteFile(confPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	sw := orphan.New(orphan.Config{OVSDB: ovsdbEP, Conflist: confPath, CNIPath: []string{binDir},
		CacheDir: t.TempDir(), Interval: 0, Log: testLog{t}})

	self, gone := framework.NewContainer(t), framework.NewContainer(t)
	selfV4 := framework.AddrOf(t, n.MustAdd(t, self, "eth0", nil), false)
	goneV4 := framework.AddrOf(t, n.MustAdd(t, gone, "eth0", nil), false)
	t.Cleanup(func() { n.Del(self, "eth0", nil); n.Del(gone, "eth0", nil) })

	if out, err := self.Exec("ip", "link", "del", "eth0"); err != nil {
		t.Fatalf("deleting eth0 inside the container: %v: %s", err, out)
	}
	dropNetNS(t, gone)
	for _, c := range []*framework.Container{self, gone} {
		if !framework.Until(30*time.Second, func() bool { return !link.Exists(c.HostVeth("eth0")) }) {
			t.Fatalf("host veth of %s still there", c.ID)
		}
	}
	selfAtt, goneAtt := ovsdb.Attachment{ContainerID: self.ID, IfName: "eth0"}, ovsdb.Attachment{ContainerID: gone.ID, IfName: "eth0"}
	for i := 1; i <= 3; i++ {
		res, err := sw.Pass(context.Background())
		if err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
		t.Logf("pass %d: %+v", i, res)
		if slices.Contains(res.Deleted, selfAtt) || slices.Contains(res.Suspects, selfAtt) || !slices.Equal(res.Kept, []ovsdb.Attachment{selfAtt}) {
			t.Errorf("pass %d: %+v; want %s kept, neither suspected nor deleted", i, res, selfAtt)
		}
		if i == 2 && !slices.Equal(res.Deleted, []ovsdb.Attachment{goneAtt}) {
			t.Errorf("pass 2: deleted %v, want %s (its netns is gone)", res.Deleted, goneAtt)
		}
	}
	if len(framework.PortsOf(t, ovsdb.KeyContainerID, self.ID)) != 1 {
		t.Error("the running container's port was removed")
	}
	got := allocations(t, dataDir, network)
	if !slices.Contains(got, selfV4) {
		t.Errorf("the running container's address %s was released: %v", selfV4, got)
	}
	if ps := framework.PortsOf(t, ovsdb.KeyContainerID, gone.ID); len(ps) != 0 {
		t.Errorf("ports of the container whose netns went left: %v", ps)
	}
	if slices.Contains(got, goneV4) {
		t.Errorf("address %s of the container whose netns went still allocated: %v", goneV4, got)
	}
	// The next pod does not get the running container's address.
	next := framework.NewContainer(t)
	nextV4 := framework.AddrOf(t, n.MustAdd(t, next, "eth0", nil), false)
	t.Cleanup(func() { n.Del(next, "eth0", nil) })
	if nextV4 == selfV4 {
		t.Errorf("a new container got %s, the address of the running container", nextV4)
	}
}

// The node's conflist changed its IPAM (host-local to static) while an
// attachment allocated by host-local ran; its sandbox then goes without a
// DEL: the sweep's DEL, with the new conflist, releases the address in
// host-local's store all the same (ovs-bridge releases with the "ipam"
// section its ADD recorded on the port).
func TestOrphanIPAMChanged(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	dataDir := t.TempDir()
	const network = "orphipam"
	confPath := filepath.Join(t.TempDir(), "10-orphipam.conflist")
	write := func(list map[string]any) {
		t.Helper()
		b, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(confPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := conflist("1.0.0", network, framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true}))
	write(before)
	n := framework.NewCNI(t, before, nil)
	c := framework.NewContainer(t)
	v4 := framework.AddrOf(t, n.MustAdd(t, c, "eth0", nil), false)
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	if !slices.Contains(allocations(t, dataDir, network), v4) {
		t.Fatalf("address %s not in host-local's store: the test proves nothing", v4)
	}
	write(conflist("1.0.0", network, framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true,
		"ipam": map[string]any{"type": "static", "addresses": []any{map[string]any{"address": "192.0.2.200/24"}}}})))

	if _, err := run("ip", "link", "del", c.HostVeth("eth0")); err != nil {
		t.Fatal(err)
	}
	dropNetNS(t, c)
	sw := orphan.New(orphan.Config{OVSDB: ovsdbEP, Conflist: confPath, CNIPath: []string{binDir},
		CacheDir: t.TempDir(), Interval: 0, Log: testLog{t}})
	att := ovsdb.Attachment{ContainerID: c.ID, IfName: "eth0"}
	var res orphan.Result
	for i := 1; i <= 2; i++ {
		var err error
		if res, err = sw.Pass(context.Background()); err != nil {
			t.Fatalf("pass %d: %v", i, err)
		}
	}
	if !slices.Equal(res.Deleted, []ovsdb.Attachment{att}) {
		t.Fatalf("second pass: %+v, want %s deleted", res, att)
	}
	if ps := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ps) != 0 {
		t.Errorf("ports left: %v", ps)
	}
	if got := allocations(t, dataDir, network); slices.Contains(got, v4) {
		t.Errorf("address %s still allocated in host-local's store after the sweep's DEL: %v", v4, got)
	}
}

// A plugin of the chain that is not ours and cannot DEL without a netns
// (the reference sbr locks the netns path it is given, and the sweep has
// none), or that the sweep's bin dir does not have, fails its DEL: the
// runtime's way, the chain stops there, before ovs-bridge's and
// ovs-portmap's DEL (the chain's DEL runs last plugin first), and the
// attachment stays recorded to fail again every pass. The sweep goes on
// with ours: port, flows, host port, meter and address go; the failure is
// reported once and the attachment is not tried again.
func TestOrphanForeignPluginFails(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	dataDir := t.TempDir()
	const network = "orphsbr"
	list := conflist("1.0.0", network,
		framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true}),
		map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"portMappings": true}},
		map[string]any{"type": "ovs-bandwidth", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"bandwidth": true}},
		map[string]any{"type": "sbr"})
	n := framework.NewCNI(t, list, nil)
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(t.TempDir(), "10-orphsbr.conflist")
	if err := os.WriteFile(confPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The second sweep's bin dir: the suite's plugins but sbr.
	noSBR := t.TempDir()
	entries, err := os.ReadDir(binDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "sbr" {
			if err := os.Symlink(filepath.Join(binDir, e.Name()), filepath.Join(noSBR, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}

	for i, tc := range []struct {
		name    string
		cniPath []string
	}{{"sbr fails without a netns", []string{binDir}}, {"sbr missing", []string{noSBR}}} {
		t.Run(tc.name, func(t *testing.T) {
			c := framework.NewContainer(t)
			hostPort := 8291 + i
			capArgs := mappings(pm(hostPort, 80, "tcp", ""))
			maps.Copy(capArgs, framework.Limits(bwRate, bwBurst, bwRate, bwBurst))
			metersBefore := meterIDs(h, t)
			v4 := framework.AddrOf(t, n.MustAdd(t, c, "eth0", capArgs), false)
			t.Cleanup(func() { n.Del(c, "eth0", capArgs) })
			if got := meterIDs(h, t); len(got) != len(metersBefore)+1 {
				t.Fatalf("meters after ADD: %v, want those before (%v) and the attachment's one (else the test proves nothing)", got, metersBefore)
			}
			if _, err := run("ip", "link", "del", c.HostVeth("eth0")); err != nil {
				t.Fatal(err)
			}
			dropNetNS(t, c)

			var lines strings.Builder
			failed := map[string]int{}
			sw := orphan.New(orphan.Config{OVSDB: ovsdbEP, Conflist: confPath, CNIPath: tc.cniPath,
				CacheDir: t.TempDir(), Interval: 0, Log: io.MultiWriter(testLog{t}, &lines),
				PluginFailed: func(plugin string) { failed[plugin]++ }})
			att := ovsdb.Attachment{ContainerID: c.ID, IfName: "eth0"}
			var res orphan.Result
			for i := 1; i <= 2; i++ {
				if res, err = sw.Pass(context.Background()); err != nil {
					t.Fatalf("pass %d: %v", i, err)
				}
				t.Logf("pass %d: %+v", i, res)
			}
			if !slices.Equal(res.Deleted, []ovsdb.Attachment{att}) || len(res.Failed) != 0 {
				t.Errorf("second pass: deleted %v, failed %v; want %s deleted", res.Deleted, res.Failed, att)
			}
			if len(res.Foreign) != 1 || res.Foreign[0].Plugin != "sbr" || res.Foreign[0].Attachment != att {
				t.Errorf("second pass: foreign failures %v, want sbr's DEL of %s", res.Foreign, att)
			}
			if ps := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ps) != 0 {
				t.Errorf("ports left: %v", ps)
			}
			if fl := h.FlowsOf(t, flows.AttachmentCookie(c.ID, "eth0")); len(fl) != 0 {
				t.Errorf("flows left: %v", fl)
			}
			if got := allocations(t, dataDir, network); slices.Contains(got, v4) {
				t.Errorf("address %s still allocated: %v", v4, got)
			}
			if out, _ := run("nft", "list", "map", "ip", "ovsflow_hostport", "hostports"); strings.Contains(out, v4) {
				t.Errorf("node-local nft elements left:\n%s", out)
			}
			// On the kernel datapath the Interface of a veth gone has
			// ofport -1: the DEL finds the egress meter by the ofport its
			// record names.
			if got := meterIDs(h, t); !slices.Equal(got, metersBefore) {
				t.Errorf("meters left: %v, want those before the ADD %v", got, metersBefore)
			}
			for _, table := range []string{"QoS", "Queue"} {
				if left := ourRows(t, table); len(left) > 0 {
					t.Errorf("%s rows left: %v", table, left)
				}
			}
			// Not tried again: the attachment is no longer recorded.
			for i := 3; i <= 4; i++ {
				if res, err = sw.Pass(context.Background()); err != nil || len(res.Suspects)+len(res.Deleted)+len(res.Failed)+len(res.Foreign) != 0 {
					t.Errorf("pass %d: %+v, %v; want nothing to do", i, res, err)
				}
			}
			if got := strings.Count(lines.String(), `plugin "sbr" failed`); got != 1 || failed["sbr"] != 1 {
				t.Errorf("sbr's failure logged %d times, counted %v; want once", got, failed)
			}
			// The host port is free: a new sandbox takes it.
			next := framework.NewContainer(t)
			n.MustAdd(t, next, "eth0", mappings(pm(hostPort, 80, "tcp", "")))
			t.Cleanup(func() { n.Del(next, "eth0", nil) })
		})
	}
}

// testLog writes the sweeper's lines into the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
