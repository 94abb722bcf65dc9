package ovsdb

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestCheckSchema(t *testing.T) {
	for _, tc := range []struct {
		ids   map[string]string
		ok    bool
		newer bool
	}{
		{map[string]string{}, true, false}, // written before the key existed: version 1
		{map[string]string{KeySchema: "1"}, true, false},
		{map[string]string{KeySchema: "2"}, false, true},
		{map[string]string{KeySchema: "x"}, false, false},
		{map[string]string{KeySchema: "0"}, false, false},
	} {
		err := CheckSchema(`port "p"`, tc.ids)
		if (err == nil) != tc.ok || errors.Is(err, ErrSchemaNewer) != tc.newer {
			t.Errorf("%v: %v; want ok %v, newer %v", tc.ids, err, tc.ok, tc.newer)
		}
	}
	err := CheckSchema(`port "p"`, map[string]string{KeySchema: "2"})
	if want := `port "p" has records of schema 2 (ovsflow.io/schema=2), this build reads schema 1 and older: upgrade it`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// TestSchemaKey: every row written carries the version, a row without it
// (as written before the key existed) is read, one of a newer version is
// refused with an error naming it, and a writer does not lower the version
// a newer one set.
func TestSchemaKey(t *testing.T) {
	requireOVS(t)
	ctx := context.Background()
	cli := dial(t)
	br := newBridge(t, cli)
	if got := vsctlGet(t, "Bridge", br.Name, KeySchema); got != schemaValue {
		t.Errorf("bridge: %s=%q, want %q", KeySchema, got, schemaValue)
	}
	a := Attachment{ContainerID: newName("ctr-s-"), IfName: "eth0"}
	name := newVeth(t)
	port, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: name, ExternalIDs: attachmentIDs(a, br.Name, "0a:58:0a:f4:02:01")})
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"Port", "Interface"} {
		if got := vsctlGet(t, table, name, KeySchema); got != schemaValue {
			t.Errorf("%s: %s=%q, want %q", table, KeySchema, got, schemaValue)
		}
	}
	// The old way: no key.
	run(t, "ovs-vsctl", "--db="+ovs.DB, "remove", "Port", name, "external_ids", KeySchema)
	if ps, err := cli.FindPorts(ctx, a); err != nil || len(ps) != 1 {
		t.Fatalf("a port without %s: %v, %v; want it read", KeySchema, ps, err)
	}
	if err := cli.Record(ctx, port, nil, map[string]string{"ovsflow.io/portmap": "{}"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := vsctlGet(t, "Port", name, KeySchema); got != schemaValue {
		t.Errorf("after a record: %s=%q, want %q", KeySchema, got, schemaValue)
	}
	// A newer version's port: refused by every reader, not lowered by a writer.
	run(t, "ovs-vsctl", "--db="+ovs.DB, "set", "Port", name, "external_ids:"+KeySchema+"=2")
	if _, err := cli.OwnedPorts(ctx); !errors.Is(err, ErrSchemaNewer) || !strings.Contains(err.Error(), name) {
		t.Errorf("OwnedPorts with a newer port: %v, want ErrSchemaNewer naming %s", err, name)
	}
	if _, err := cli.FindPorts(ctx, a); !errors.Is(err, ErrSchemaNewer) {
		t.Errorf("FindPorts of a newer port: %v, want ErrSchemaNewer", err)
	}
	if err := cli.Record(ctx, port, nil, map[string]string{"ovsflow.io/portmap": "{}"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := vsctlGet(t, "Port", name, KeySchema); got != "2" {
		t.Errorf("a record by this build lowered the version: %s=%q, want 2", KeySchema, got)
	}
	run(t, "ovs-vsctl", "--db="+ovs.DB, "set", "Bridge", br.Name, "external_ids:"+KeySchema+"=3")
	if _, err := cli.Bridge(ctx, br.Name); !errors.Is(err, ErrSchemaNewer) {
		t.Errorf("Bridge of a newer bridge: %v, want ErrSchemaNewer", err)
	}
	if _, err := cli.Bridges(ctx); !errors.Is(err, ErrSchemaNewer) {
		t.Errorf("Bridges with a newer bridge: %v, want ErrSchemaNewer", err)
	}
}

func vsctlGet(t *testing.T, table, record, key string) string {
	t.Helper()
	out, err := runOut("ovs-vsctl", "--db="+ovs.DB, "--if-exists", "get", table, record, "external_ids:\""+key+"\"")
	if err != nil {
		t.Fatalf("ovs-vsctl get %s %s: %v: %s", table, record, err, out)
	}
	return strings.Trim(strings.TrimSpace(out), `"`)
}

func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
