package e2e

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// TestSchemaOldRecord: an attachment whose rows carry no schema key (as
// the plugins wrote them before the key existed) is read as today's:
// reconcile rebuilds its lost flows from it (the host port answers again),
// CHECK and DEL work. Control: the same rows marked with a newer schema
// are refused with an error that names the port, and reconcile rebuilds
// nothing (the host port stays dark).
func TestSchemaOldRecord(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.PortmapList(t, "1.1.0", "schema", nil)
	c := framework.NewContainer(t)
	capArgs := mappings(pm(31080, 80, "tcp", ""))
	n.MustAdd(t, c, "eth0", capArgs)
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	c.ServeTCP(t, 80)
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 31080), c, outsideV4)
	port := c.HostVeth("eth0")
	get := func(table string) string {
		return strings.Trim(framework.Vsctl(t, "--if-exists", "get", table, port, `external_ids:"`+ovsdb.KeySchema+`"`), `"`)
	}
	for _, table := range []string{"Port", "Interface"} {
		if got := get(table); got != "1" {
			t.Errorf("%s %s: %s=%q, want 1 (written with every record)", table, port, ovsdb.KeySchema, got)
		}
	}
	// Lose the flows (as an ovs-vswitchd restart does) and reconcile.
	lose := func() {
		t.Helper()
		if out, err := run("ovs-ofctl", "-O", "OpenFlow14", "del-flows", h.OFTarget(), flows.SuiteDelete().String()); err != nil {
			t.Fatalf("del-flows: %v: %s", err, out)
		}
		// The datapath's cached flows go with the next revalidation.
		appctl(t, "revalidator/wait")
		if got, err := framework.Dial(h.Outside.NS, "tcp", hp(nodeV4, 31080)); err == nil {
			t.Fatalf("without the flows the host port still answers (%q): the test proves nothing", got)
		}
	}
	reconcile := func() (string, error) {
		return run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr)
	}

	// The old way: no schema key on the rows.
	for _, table := range []string{"Port", "Interface"} {
		framework.Vsctl(t, "remove", table, port, "external_ids", ovsdb.KeySchema)
	}
	lose()
	if out, err := reconcile(); err != nil || !strings.Contains(out, "attachments=1 ") {
		t.Fatalf("reconcile of a record without %s: %v: %s", ovsdb.KeySchema, err, out)
	}
	expect(t, h.Outside.NS, "tcp", hp(nodeV4, 31080), c, outsideV4)
	if err := n.Check(c, "eth0", capArgs); err != nil {
		t.Errorf("CHECK of a record without %s: %v", ovsdb.KeySchema, err)
	}

	// A newer version's record: refused, nothing rebuilt.
	framework.Vsctl(t, "set", "Port", port, "external_ids:"+ovsdb.KeySchema+"=2")
	lose()
	out, err := reconcile()
	if err == nil || !strings.Contains(out, "schema 2") || !strings.Contains(out, port) {
		t.Errorf("reconcile of a newer record: %v: %q; want a failure naming port %s and schema 2", err, out, port)
	}
	if got, err := framework.Dial(h.Outside.NS, "tcp", hp(nodeV4, 31080)); err == nil {
		t.Errorf("reconcile rebuilt flows from a record it cannot read: the host port answers (%q)", got)
	}
	if err := n.Check(c, "eth0", capArgs); err == nil || !strings.Contains(err.Error(), "schema 2") {
		t.Errorf("CHECK of a newer record: %v, want an error naming schema 2", err)
	}

	// Back to a readable record: DEL leaves nothing of the attachment.
	framework.Vsctl(t, "remove", "Port", port, "external_ids", ovsdb.KeySchema)
	if out, err := reconcile(); err != nil {
		t.Fatalf("reconcile: %v: %s", err, out)
	}
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if left := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(left) > 0 {
		t.Errorf("ports left after DEL: %v", left)
	}
}
