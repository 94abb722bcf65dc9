package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/internal/ovstest"
)

// The tests against a real Open vSwitch share one private sandbox
// (hack/ovs-sandbox.sh: ovsdb-server and ovs-vswitchd with the netdev
// datapath in a netns of their own), started by the first test that needs
// it and stopped by TestMain.
var ovs struct {
	*ovstest.Sandbox
	seq atomic.Int64
}

func TestMain(m *testing.M) {
	code := m.Run()
	ovstest.Stop()
	os.Exit(code)
}

// requireOVS skips, loudly, without root or Open vSwitch (and fails in CI),
// and otherwise starts the sandbox once.
func requireOVS(t *testing.T) {
	t.Helper()
	ovs.Sandbox = ovstest.Require(t, "ovsflow-ovsdb", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl")
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// dial connects to the sandbox's ovsdb-server; the client is closed at the
// end of the test.
func dial(t *testing.T) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := Dial(ctx, endpoint.MustParse(ovs.DB))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cli.Close)
	return cli
}

// newName is a fresh bridge or device name.
func newName(prefix string) string { return fmt.Sprintf("%s%d", prefix, ovs.seq.Add(1)) }

// newBridge creates a netdev bridge with EnsureBridge, removed at the end
// of the test.
func newBridge(t *testing.T, cli *Client) *Bridge {
	t.Helper()
	name := newName("ovsdbt")
	t.Cleanup(func() { exec.Command("ovs-vsctl", "--db="+ovs.DB, "--timeout=10", "--if-exists", "del-br", name).Run() })
	br, err := cli.EnsureBridge(context.Background(), name, "netdev")
	if err != nil {
		t.Fatal(err)
	}
	return br
}

// newVeth creates a veth in the sandbox's netns (where ovs-vswitchd opens
// the devices of a netdev bridge) and returns the end to attach.
func newVeth(t *testing.T) string {
	t.Helper()
	name := newName("ovsdbv")
	run(t, "ip", "-n", ovs.NetNS, "link", "add", name, "type", "veth", "peer", "name", name+"p")
	t.Cleanup(func() { exec.Command("ip", "-n", ovs.NetNS, "link", "del", name).Run() })
	run(t, "ip", "-n", ovs.NetNS, "link", "set", name, "up")
	return name
}

func attachmentIDs(a Attachment, br, mac string) map[string]string {
	return map[string]string{KeyOwner: OwnerValue, KeyContainerID: a.ContainerID, KeyIfName: a.IfName,
		KeyNetNS: "/var/run/netns/" + a.ContainerID, KeyNetwork: "ovsdb-test", KeyBridge: br, KeyMAC: mac}
}

// TestOperationsFitSchema drives every exported method of the client,
// through its failure paths too (an ofport or a MAC taken, a claim held),
// against the real ovsdb-server, and checks every operation the client sent
// against the schema: libovsdb's ValidateOperations, and checkOperation,
// which also looks at conditions, mutations, waits, the types of values,
// enums and integer ranges. The server checks the same at run time; this
// keeps a mismatch from reaching a node. Every transaction's JSON is also
// the JSON libovsdb's types write for the same operations.
func TestOperationsFitSchema(t *testing.T) {
	requireOVS(t)
	ctx := context.Background()
	cli := dial(t)
	type step struct {
		name string
		txns [][]operation
	}
	var steps []*step
	cli.observe = func(ops []operation) {
		s := steps[len(steps)-1]
		s.txns = append(s.txns, slices.Clone(ops))
	}
	do := func(name string, f func() error) {
		t.Helper()
		steps = append(steps, &step{name: name})
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	want := func(got error, target any) error {
		if !errors.As(got, target) {
			return fmt.Errorf("got error %v, want a %T", got, target)
		}
		return nil
	}

	var br *Bridge
	do("EnsureBridge (new)", func() (err error) { br = newBridge(t, cli); return nil })
	do("EnsureBridge (existing)", func() error { _, err := cli.EnsureBridge(ctx, br.Name, "netdev"); return err })
	do("Bridge", func() error { _, err := cli.Bridge(ctx, br.Name); return err })
	do("Bridges", func() error { _, err := cli.Bridges(ctx); return err })
	do("SetBridgeExternalIDs", func() error {
		return cli.SetBridgeExternalIDs(ctx, br.UUID, map[string]string{"ovsflow.io/test": "1"})
	})

	a := Attachment{ContainerID: newName("ctr-a-"), IfName: "eth0"}
	b := Attachment{ContainerID: newName("ctr-b-"), IfName: "eth0"}
	const macA, macB = "0a:58:0a:f4:00:0a", "0a:58:0a:f4:00:0b"
	vethA, vethB := newVeth(t), newVeth(t)
	var ofA int
	do("ChooseOFPort", func() (err error) { ofA, err = cli.ChooseOFPort(ctx, HomeOFPort(a)); return err })
	do("MACHolder (free)", func() error { return cli.MACHolder(ctx, macA, a) })
	var portA, portB string
	do("AttachPort (access, ofport and MAC)", func() (err error) {
		portA, err = cli.AttachPort(ctx, br.UUID, PortSpec{Name: vethA, Tag: 5,
			ExternalIDs: attachmentIDs(a, br.Name, macA), UniqueMAC: macA, OFPort: ofA})
		return err
	})
	do("WaitOFPort", func() error {
		of, err := cli.WaitOFPort(ctx, vethA)
		if err == nil && of != ofA {
			err = fmt.Errorf("got ofport %d, want %d", of, ofA)
		}
		return err
	})
	do("AttachPort (ofport taken)", func() error {
		_, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: vethB, ExternalIDs: attachmentIDs(b, br.Name, macB), OFPort: ofA})
		return want(err, new(*OFPortTakenError))
	})
	do("AttachPort (MAC taken)", func() error {
		_, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: vethB, ExternalIDs: attachmentIDs(b, br.Name, macA), UniqueMAC: macA})
		return want(err, new(*MACInUseError))
	})
	do("MACHolder (held)", func() error { return want(cli.MACHolder(ctx, macA, b), new(*MACInUseError)) })
	do("AttachPort (trunk)", func() (err error) {
		portB, err = cli.AttachPort(ctx, br.UUID, PortSpec{Name: vethB, Trunks: []int{10, 20},
			ExternalIDs: attachmentIDs(b, br.Name, macB), UniqueMAC: macB})
		return err
	})
	do("BridgeHasPort", func() error {
		has, err := cli.BridgeHasPort(ctx, br.Name, portA)
		if err == nil && !has {
			err = errors.New("got false, want true")
		}
		return err
	})
	do("FindPorts", func() error {
		ps, err := cli.FindPorts(ctx, a)
		if err == nil && (len(ps) != 1 || ps[0].Port.UUID != portA || ps[0].Interface.Name != vethA) {
			err = fmt.Errorf("got %+v, want port %s with interface %s", ps, portA, vethA)
		}
		return err
	})
	do("OwnedPorts", func() error { _, err := cli.OwnedPorts(ctx); return err })
	do("AnyOwnedPortWith", func() error {
		got, err := cli.AnyOwnedPortWith(ctx,
			map[string]string{KeyBridge: br.Name, KeyContainerID: a.ContainerID},
			map[string]string{KeyBridge: br.Name, KeyContainerID: "no-such-container"},
			map[string]string{KeyBridge: br.Name, KeyContainerID: b.ContainerID})
		if err == nil && !slices.Equal(got, []bool{true, false, true}) {
			err = fmt.Errorf("got %v for port a's ids, none's and port b's, want [true false true]", got)
		}
		return err
	})
	if n := len(steps[len(steps)-1].txns); n != 1 {
		t.Errorf("AnyOwnedPortWith of 3 id sets: %d transactions, want 1", n)
	}
	do("Record (claim)", func() error {
		return cli.Record(ctx, portA, nil, map[string]string{"ovsflow.io/k": "v"}, []string{"ovsflow.io/claim-x"})
	})
	do("Record (claim held)", func() error {
		err := cli.Record(ctx, portB, []string{"ovsflow.io/k"}, nil, []string{"ovsflow.io/claim-x"})
		var ce *ClaimedError
		if err := want(err, &ce); err != nil {
			return err
		}
		if ce.Holder != a {
			return fmt.Errorf("got holder %s, want %s", ce.Holder, a)
		}
		return nil
	})
	// Address claims ride on the insert: one transaction, no round trip
	// more; a held claim, or an excluded key another port holds, is a
	// *ClaimedError naming the holder.
	e := Attachment{ContainerID: newName("ctr-e-"), IfName: "eth0"}
	d := Attachment{ContainerID: newName("ctr-d-"), IfName: "eth0"}
	vethE, vethD := newVeth(t), newVeth(t)
	const ipKey = "ovsflow.io/ip/brx/192.0.2.9"
	heldBy := func(err error, holder Attachment) error {
		var ce *ClaimedError
		if err := want(err, &ce); err != nil {
			return err
		}
		if ce.Holder != holder || ce.Key != ipKey || ce.Port != vethE {
			return fmt.Errorf("got %s held by %s (port %q), want %s held by %s (port %q)", ce.Key, ce.Holder, ce.Port, ipKey, holder, vethE)
		}
		return nil
	}
	do("AttachPort (address claims)", func() error {
		_, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: vethE, ExternalIDs: attachmentIDs(e, br.Name, "0a:58:0a:f4:00:0c"),
			Claims: []string{ipKey}, Excludes: []string{"ovsflow.io/allowed-ip/brx/192.0.2.9"}})
		return err
	})
	if n := len(steps[len(steps)-1].txns); n != 1 {
		t.Errorf("AttachPort with address claims: %d transactions, want 1", n)
	}
	do("AttachPort (address claim held)", func() error {
		_, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: vethD, ExternalIDs: attachmentIDs(d, br.Name, "0a:58:0a:f4:00:0d"),
			Claims: []string{ipKey}})
		return heldBy(err, e)
	})
	do("AttachPort (address excluded)", func() error {
		_, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: vethD, ExternalIDs: attachmentIDs(d, br.Name, "0a:58:0a:f4:00:0d"),
			Excludes: []string{ipKey}})
		return heldBy(err, e)
	})
	do("Claim (excluded)", func() error {
		return heldBy(cli.Claim(ctx, portB, nil, map[string]string{"ovsflow.io/k4": "v"}, nil, []string{ipKey}), e)
	})
	do("Claim (held)", func() error {
		return heldBy(cli.Claim(ctx, portB, nil, nil, []string{ipKey}, nil), e)
	})
	do("RecordOnBridge", func() error {
		got, err := cli.RecordOnBridge(ctx, portA, []string{"ovsflow.io/k"}, map[string]string{"ovsflow.io/k2": "v"}, nil, br.Name, nil)
		if err == nil && (got == nil || got.UUID != br.UUID) {
			err = fmt.Errorf("got bridge %+v, want %s", got, br.UUID)
		}
		return err
	})
	do("SetPortExternalIDs", func() error {
		return cli.SetPortExternalIDs(ctx, portA, map[string]string{"ovsflow.io/k3": "v"}, "ovsflow.io/k2")
	})
	spec := QoSSpec{Type: "linux-htb", OtherConfig: map[string]string{"max-rate": "20000000"},
		QueueConfig: map[string]string{"max-rate": "20000000", "burst": "10000000"},
		ExternalIDs: map[string]string{KeyNetwork: "ovsdb-test"}}
	for _, n := range []string{"SetPortQoS", "SetPortQoS (again)"} {
		do(n, func() error {
			return cli.SetPortQoS(ctx, a, &spec, map[string]string{"ovsflow.io/q": "1"}, []string{"ovsflow.io/q0"})
		})
	}
	do("PortQoS", func() error {
		q, err := cli.PortQoS(ctx, a)
		if err == nil && (len(q.QoS) != 1 || len(q.Queues) != 1 || q.PortQoS == nil || *q.PortQoS != q.QoS[0].UUID ||
			q.QoS[0].OtherConfig["max-rate"] != "20000000" || q.Queues[0].OtherConfig["burst"] != "10000000") {
			err = fmt.Errorf("got %+v, want one QoS the port uses and its queue", q)
		}
		return err
	})
	do("SetPortQoS (no port)", func() error {
		none := Attachment{ContainerID: "none", IfName: "eth0"}
		if err := cli.SetPortQoS(ctx, none, &spec, nil, nil); !errors.Is(err, ErrNoPort) {
			return fmt.Errorf("got %v, want ErrNoPort", err)
		}
		if q, err := cli.PortQoS(ctx, none); err != nil || len(q.QoS)+len(q.Queues) != 0 {
			return fmt.Errorf("rows left: %+v (%v)", q, err)
		}
		return nil
	})
	do("OwnedQoSAttachments", func() error {
		got, err := cli.OwnedQoSAttachments(ctx)
		if n, ok := got[a]; err == nil && (!ok || n != "ovsdb-test") {
			err = fmt.Errorf("got %v, want %s of network ovsdb-test", got, a)
		}
		return err
	})
	do("SetPortQoS (none)", func() error { return cli.SetPortQoS(ctx, b, nil, nil, []string{"ovsflow.io/q"}) })
	do("ClearPortQoS", func() error { return cli.ClearPortQoS(ctx, []string{"ovsflow.io/q"}, a, b) })
	do("PortQoS (cleared)", func() error {
		q, err := cli.PortQoS(ctx, a)
		if err == nil && (len(q.QoS) != 0 || len(q.Queues) != 0 || q.PortQoS != nil) {
			err = fmt.Errorf("got %+v, want nothing", q)
		}
		return err
	})
	c := Attachment{ContainerID: newName("ctr-c-"), IfName: "eth0"}
	vethC := newVeth(t)
	var res Reservation
	do("Reserve", func() (err error) { res, err = cli.Reserve(ctx, c, HomeOFPort(c), "0x0fc5010000000c01"); return err })
	do("Reserve (identity taken)", func() error {
		_, err := cli.Reserve(ctx, b, HomeOFPort(b), "0x0fc5010000000c01")
		return want(err, new(*IdentityTakenError))
	})
	var sweep *Sweep
	do("BeginSweep", func() (err error) { sweep, err = cli.BeginSweep(ctx); return err })
	do("EndSweep", func() error { return cli.EndSweep(ctx, sweep) })
	do("AttachPort (after a sweep)", func() error {
		_, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: vethC, ExternalIDs: attachmentIDs(c, br.Name, ""), OFPort: res.OFPort, Reservation: &res})
		if !errors.Is(err, ErrSweeping) {
			return fmt.Errorf("got %v, want ErrSweeping", err)
		}
		return nil
	})
	do("AfterSweep", func() error { return cli.AfterSweep(ctx, res) })
	do("AttachPort (reserved)", func() error {
		_, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: vethC, ExternalIDs: attachmentIDs(c, br.Name, ""), OFPort: res.OFPort, Reservation: &res})
		return err
	})
	do("Release", func() error { return cli.Release(ctx, res) })
	var del *Deletion
	do("BeginDelete", func() (err error) {
		if del, err = cli.BeginDelete(ctx, c); err == nil && len(del.Ports) != 1 {
			err = fmt.Errorf("got %d ports, want 1", len(del.Ports))
		}
		return err
	})
	do("Finish", func() error { return cli.Finish(ctx, del) })
	do("Abandon", func() error {
		d, err := cli.BeginDelete(ctx, c)
		if err != nil {
			return err
		}
		if err := cli.Abandon(ctx, d); err != nil {
			return err
		}
		ids, err := cli.rootIDs(ctx)
		if v, ok := ids[keyDeleting+c.String()]; err == nil && ok {
			err = fmt.Errorf("the deleting mark is still there (%q)", v)
		}
		return err
	})
	do("SyncPending", func() error { return cli.SyncPending(ctx) })
	do("DetachPortsAndSync", func() error { return cli.DetachPortsAndSync(ctx, portB) })
	do("DetachPorts", func() error { return cli.DetachPorts(ctx, portA) })
	tun := TunnelSpec{Bridge: br.Name, Name: newName("ovsdbtun"), Type: "geneve", LocalIP: netip.MustParseAddr("192.0.2.99"),
		Record: map[string]string{"ovsflow.io/overlay": "{}"}}
	do("EnsureTunnel (new)", func() error { _, err := cli.EnsureTunnel(ctx, tun); return err })
	do("EnsureTunnel (as it is)", func() error { _, err := cli.EnsureTunnel(ctx, tun); return err })
	tun.Type, tun.Record = "vxlan", map[string]string{"ovsflow.io/overlay": `{"local":[]}`}
	do("EnsureTunnel (changed)", func() error { _, err := cli.EnsureTunnel(ctx, tun); return err })
	do("Tunnels", func() error {
		ts, err := cli.Tunnels(ctx)
		if err == nil && (len(ts) != 1 || ts[0].Interface.Type != "vxlan" || ts[0].Options["remote_ip"] != "flow" ||
			ts[0].Options["local_ip"] != "192.0.2.99" || ts[0].Bridge() != br.Name || ts[0].OFPort() <= 0 ||
			ts[0].Port.ExternalIDs["ovsflow.io/overlay"] != `{"local":[]}`) {
			err = fmt.Errorf("got %+v, want the one vxlan tunnel on %s", ts, br.Name)
		}
		return err
	})
	do("RemoveTunnels", func() error {
		if n, err := cli.RemoveTunnels(ctx); n != 1 || err != nil {
			return fmt.Errorf("removed %d, %v; want 1", n, err)
		}
		return nil
	})

	schema, err := schemaOnce()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range steps {
		if len(s.txns) == 0 {
			t.Errorf("%s: sent no transaction", s.name)
		}
		for _, ops := range s.txns {
			lops := ops
			if !schema.ValidateOperations(lops...) {
				t.Errorf("%s: libovsdb's ValidateOperations refuses %v", s.name, lops)
			}
			for i, op := range lops {
				n++
				if err := checkOperation(schema, op); err != nil {
					t.Errorf("%s: operation %d (%s on %s): %v", s.name, i+1, op.Op, op.Table, err)
				}
			}
			if err := checkWire(ops); err != nil {
				t.Errorf("%s: %v", s.name, err)
			}
		}
	}
	t.Logf("%d operations in %d steps fit the schema", n, len(steps))
}

// TestDecodeRealRows: decode gives what libovsdb's mapper gives on rows as
// ovsdb-server returns them, whole and as the client selects them: ports
// with a tag, with trunks, with one trunk (a set of one is a bare atom on
// the wire), interfaces attached, attached with an error, not yet
// attached.
func TestDecodeRealRows(t *testing.T) {
	requireOVS(t)
	ctx := context.Background()
	cli := dial(t)
	db := databaseModel(t)
	br := newBridge(t, cli)
	for i, spec := range []PortSpec{
		{Name: newVeth(t), Tag: 5, OFPort: RequestedOFPortMin + 100},
		{Name: newVeth(t), Trunks: []int{10, 20, 30}},
		{Name: newVeth(t), Trunks: []int{7}},
		{Name: newName("ovsdbmissing")}, // no such device: ofport -1 and an error
	} {
		a := Attachment{ContainerID: newName("ctr-r-"), IfName: "eth0"}
		spec.ExternalIDs = attachmentIDs(a, br.Name, fmt.Sprintf("0a:58:0a:f4:01:%02x", i))
		if _, err := cli.AttachPort(ctx, br.UUID, spec); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.WaitOFPort(ctx, spec.Name); err != nil && i != 3 {
			t.Fatal(err)
		}
	}
	for _, sel := range []struct {
		name, table string
		columns     []string
	}{
		{"root, all columns", tableRoot, nil},
		{"root, counters", tableRoot, []string{"next_cfg", "cur_cfg"}},
		{"bridges, all columns", tableBridge, nil},
		{"bridges, bridgeColumns", tableBridge, bridgeColumns},
		{"ports, all columns", tablePort, nil},
		{"interfaces, all columns", tableInterface, nil},
		{"interfaces, as WaitOFPort selects", tableInterface, []string{"_uuid", "name", "ofport", "error"}},
		{"interface not yet seen by ovs-vswitchd", tableInterface, nil},
	} {
		t.Run(sel.name, func(t *testing.T) {
			op := selectOp(sel.table)
			op.Columns = sel.columns
			ops := []operation{op}
			if sel.name == "interface not yet seen by ovs-vswitchd" {
				// Selected in the transaction that inserts it: every
				// column at its default (the row is not referenced, so
				// the commit drops it again).
				name := newName("ovsdbnew")
				ops = []operation{insertOp(tableInterface, "", ovsdb.Row{"name": name}),
					selectOp(tableInterface, cond("name", fnEqual, name))}
			}
			res, err := cli.transact(ctx, ops...)
			if err != nil {
				t.Fatal(err)
			}
			rows := res[len(res)-1].Rows
			if len(rows) == 0 {
				t.Fatal("no rows")
			}
			switch sel.table {
			case tableRoot:
				err = sameAsMapperRows[OpenvSwitch](t, db, sel.table, rows)
			case tableBridge:
				err = sameAsMapperRows[Bridge](t, db, sel.table, rows)
			case tablePort:
				err = sameAsMapperRows[Port](t, db, sel.table, rows)
			case tableInterface:
				err = sameAsMapperRows[Interface](t, db, sel.table, rows)
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An operation that does not fit the server's schema fails with the
// server's own words, on one line, under the caller's wrapping; so does a
// value out of a column's range through the exported API.
func TestServerErrorSurfaces(t *testing.T) {
	requireOVS(t)
	ctx := context.Background()
	cli := dial(t)
	br := newBridge(t, cli)
	for _, tc := range []struct {
		name   string
		op     func() error
		want   string
		target any
	}{
		{
			name: "unknown column",
			op: func() error {
				_, err := cli.transact(ctx, selectOp(tableBridge), insertOp(tablePort, "", ovsdb.Row{"name": "p", "nosuch": 1}))
				return err
			},
			want:   "ovsdb insert on Port: unknown column: No column nosuch in table Port.",
			target: new(*OpError),
		},
		{
			name: "value of the wrong type",
			op: func() error {
				_, err := cli.transact(ctx, selectOp(tableBridge, cond("name", fnEqual, 1)))
				return err
			},
			want:   "ovsdb select on Bridge: syntax error: ",
			target: new(*ServerError),
		},
		{
			name: "commit refused",
			op: func() error {
				// A second bridge of the same name (name is an index).
				_, err := cli.transact(ctx, insertOp(tableBridge, "dup", ovsdb.Row{"name": br.Name}),
					mutateOp(tableRoot, allRows, mut("bridges", mutInsert, named("dup"))))
				return err
			},
			want:   "ovsdb transaction: constraint violation: ",
			target: new(*ConstraintViolation),
		},
		{
			name: "through AttachPort",
			op: func() error {
				_, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: "ovsdbtrunk", Trunks: []int{5000}})
				return err
			},
			want:   `attaching port "ovsdbtrunk": ovsdb insert on Port: constraint violation: 5000 is not in the valid range 0 to 4095 (inclusive)`,
			target: new(*ConstraintViolation),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			if err == nil {
				t.Fatal("got no error")
			}
			t.Logf("error: %v", err)
			if msg := err.Error(); !strings.HasPrefix(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("got error %q, want one line beginning %q", msg, tc.want)
			}
			if !errors.As(err, tc.target) {
				t.Errorf("got error %v, want a %T", err, tc.target)
			}
		})
	}
}

// The waits on ovs-vswitchd last as long as their context: with
// ovs-vswitchd stopped (SIGSTOP, a busy one), a change it must apply is
// waited for until the context is about to end, then said to be a timeout
// of ovs-vswitchd (CNI code 11, "unresponsive"), not a lost OVSDB
// connection; so is a sweep that outlasts the context. Control: the same
// wait, ovs-vswitchd going on meanwhile, succeeds.
func TestWaitsLastTheirContext(t *testing.T) {
	requireOVS(t)
	cli := dial(t)
	pidFile := filepath.Join(ovs.RunDir, "ovs-vswitchd.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", pidFile, err)
	}
	cont := func() { syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(cont)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name string
		wait func(context.Context) error
	}{
		{"DetachPortsAndSync", func(ctx context.Context) error { return cli.DetachPortsAndSync(ctx) }},
		{"SyncPending", cli.SyncPending},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := w.wait(ctx)
		cancel()
		if !errors.Is(err, endpoint.ErrTimeout) || errors.Is(err, ErrUnreachable) {
			t.Errorf("%s with ovs-vswitchd stopped: got %v, want endpoint.ErrTimeout", w.name, err)
		}
	}
	// Control: ovs-vswitchd goes on while the wait waits.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	time.AfterFunc(time.Second, cont) // the stop lasts past the wait's start: time is the subject
	if err := cli.SyncPending(ctx); err != nil {
		t.Errorf("SyncPending, ovs-vswitchd going on: %v", err)
	}

	sweep, err := cli.BeginSweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.EndSweep(ctx, sweep)
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	if err := cli.WaitSweep(wctx); !errors.Is(err, ErrSweeping) {
		t.Errorf("WaitSweep past its context: got %v, want ErrSweeping", err)
	}
}
