package ovsdb

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// checkWire fails unless the JSON of ops has every member RFC 7047 requires
// of its operations (section 5.2), which libovsdb's types leave to their
// user: "where" in every operation but an insert, "timeout" (without it
// ovsdb-server waits for ever), "until" and "rows" in a wait.
func checkWire(ops []operation) error {
	b, err := json.Marshal(transactParams(ops))
	if err != nil {
		return err
	}
	var params []any
	if err := json.Unmarshal(b, &params); err != nil {
		return fmt.Errorf("%s: %w", b, err)
	}
	if len(params) != 1+len(ops) || params[0] != dbName {
		return fmt.Errorf("got params %s, want the database and %d operations", b, len(ops))
	}
	for i, p := range params[1:] {
		o, ok := p.(map[string]any)
		if !ok || o["op"] != ops[i].Op || o["table"] != ops[i].Table {
			return fmt.Errorf("operation %d: got %v, want a %s on %s", i+1, p, ops[i].Op, ops[i].Table)
		}
		required := []string{"where"}
		switch ops[i].Op {
		case ovsdb.OperationInsert:
			required = []string{"row"}
		case ovsdb.OperationWait:
			required = append(required, "timeout", "until", "rows", "columns")
		case ovsdb.OperationMutate:
			required = append(required, "mutations")
		case ovsdb.OperationUpdate:
			required = append(required, "row")
		}
		for _, m := range required {
			if _, ok := o[m]; !ok {
				return fmt.Errorf("operation %d (%s on %s): no %q in %s", i+1, ops[i].Op, ops[i].Table, m, b)
			}
		}
	}
	return nil
}

// benchRecord is the transaction of an ovs-portmap ADD that replaces an
// earlier record: its keys out, the new record and two claims in, and the
// bridge read back.
func benchRecord() []operation {
	rec := `{"v":1,"openflow":"unix:/var/run/openvswitch/brx.mgmt","dnatZone":64000,"snatZone":64001,` +
		`"cookie":"0x5f0c3a9e12345678","ofport":40000,"mac":"0a:58:0a:f4:00:0a","ipv4":"10.244.0.10","snat":true,` +
		`"masqAll":false,"rules":[{"protocol":"tcp","nodeIP":"198.51.100.1","hostPort":8080,"containerPort":80},` +
		`{"protocol":"udp","nodeIP":"198.51.100.1","hostPort":5353,"containerPort":53}]}`
	return recordOps(portU, []string{"ovsflow.io/portmap", "ovsflow.io/claim/tcp/198.51.100.1:8080"},
		map[string]string{"ovsflow.io/portmap": rec},
		[]string{"ovsflow.io/claim/tcp/198.51.100.1:8080", "ovsflow.io/claim/udp/198.51.100.1:5353"}, nil, "brx", nil)
}

// benchAttach is the transaction of an ovs-bridge ADD: an access port with
// a requested ofport.
func benchAttach() []operation {
	return attachOpsOf(bridgeU, PortSpec{Name: "veth5f0c3a9e", OFPort: 40000, ExternalIDs: map[string]string{
		KeyOwner: OwnerValue, KeyContainerID: "5f0c3a9e1234567890abcdef5f0c3a9e1234567890abcdef5f0c3a9e12345678",
		KeyIfName: "eth0", KeyNetNS: "/var/run/netns/cni-5f0c3a9e-1234-5678-90ab-cdef5f0c3a9e",
		KeyNetwork: "abnet", KeyBridge: "brx", KeyMAC: "0a:58:0a:f4:00:0a"}})
}

// The operations the package builds have every member RFC 7047 requires,
// and a hostile string stays one string, without a server;
// TestOperationsFitSchema checks every transaction that the exported
// methods send to a real one, and the end-to-end suites that ovsdb-server
// takes them.
func TestEncodeFitsRFC(t *testing.T) {
	ids := map[string]string{KeyOwner: OwnerValue, KeyContainerID: "c1", KeyIfName: "eth0", KeyMAC: "0a:58:0a:f4:00:0a"}
	hostile := hostileStrings()
	for _, tc := range []struct {
		name string
		ops  []operation
	}{
		{"record (portmap ADD)", benchRecord()},
		{"record, claims only", recordOps(portU, nil, nil, []string{"ovsflow.io/claim/tcp/198.51.100.1:80"}, nil, "", nil)},
		{"record, unset only", recordOps(portU, []string{"ovsflow.io/portmap"}, nil, nil, nil, "", nil)},
		{"record, bridge only", recordOps(portU, nil, nil, nil, nil, "brx", nil)},
		{"attach (bridge ADD)", benchAttach()},
		{"attach access with a tag and a MAC", attachOpsOf(bridgeU, PortSpec{Name: "v1", Tag: 5, ExternalIDs: ids, UniqueMAC: "0a:58:0a:f4:00:0a"})},
		{"attach trunk of one", attachOpsOf(bridgeU, PortSpec{Name: "v1", Trunks: []int{7}, ExternalIDs: ids})},
		{"attach trunk", attachOpsOf(bridgeU, PortSpec{Name: "v1", Trunks: []int{10, 20, 4094}, ExternalIDs: ids, OFPort: 32768})},
		{"attach without external_ids", attachOpsOf(bridgeU, PortSpec{Name: "v1"})},
		{"detach and sync", append(detachOps([]string{portU, bridgeU}), bumpCfg, selectRoot("next_cfg"))},
		{"select all", []operation{selectOp(tableBridge), selectModel[Interface](tableInterface, Attachment{"c1", "eth0"}.where()...)}},
		{"wait for an ofport", []operation{waitOp(tableInterface, []ovsdb.Condition{cond("name", fnEqual, "v1")},
			[]string{"ofport"}, untilNotEqual, 10000, ovsdb.Row{"ofport": intSet()})}},
		{"waits for no row", reserveOps(Reservation{Attachment: Attachment{"c1", "eth0"}, OFPort: 40000, Identity: "5f0c", value: "c1/eth0 1"}, nil)},
		{"empty sets and maps", []operation{mutateOp(tablePort, byUUID(portU),
			mut("external_ids", mutDelete, strSet()), mut("external_ids", mutInsert, strMap{}.ovs()), mut("trunks", mutInsert, intSet()))}},
		{"hostile strings", recordOps(portU, hostile, map[string]string{hostile[0]: hostile[1], hostile[2]: hostile[3]}, hostile[4:], nil, hostile[5], nil)},
		{"hostile names", attachOpsOf(bridgeU, PortSpec{Name: strings.Join(hostile, ""), ExternalIDs: map[string]string{hostile[6]: hostile[7]}, UniqueMAC: hostile[8]})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkWire(tc.ops); err != nil {
				t.Error(err)
			}
		})
	}
}

// hostileStrings need escaping, or are not UTF-8.
func hostileStrings() []string {
	return []string{`x"},{"op":"delete","table":"Bridge","where":[]}]`, `back\slash`, "nl\ncr\rtab\t",
		"nul\x00bell\x07esc\x1b", "bad \xff\xfe utf-8", "truncated \xe2\x82", "\u2028\u2029 separators",
		"<html> & 'quotes'", "émoji 🙂", "\x7f del", ""}
}

// FuzzEncodeString: a string in a port's name and external_ids, however
// hostile, is one string in the JSON sent: the operations stay as they were
// built, and each value reads back as encoding/json reads its own encoding
// of the string (invalid UTF-8 as U+FFFD).
func FuzzEncodeString(f *testing.F) {
	for _, s := range hostileStrings() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ops := attachOpsOf(bridgeU, PortSpec{Name: s, ExternalIDs: map[string]string{s: s}, UniqueMAC: s})
		if err := checkWire(ops); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(transactParams(ops))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		if err := json.Unmarshal(want, &wantBack); err != nil {
			t.Fatal(err)
		}
		var params []any
		if err := json.Unmarshal(b, &params); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		for _, p := range params[1:3] { // the two inserts, the Interface and the Port
			op, _ := p.(map[string]any)
			row, _ := op["row"].(map[string]any)
			ids, _ := row["external_ids"].([]any)
			pairs := []any{}
			if len(ids) == 2 {
				pairs, _ = ids[1].([]any)
			}
			var pair []any
			for _, pr := range pairs {
				if pr, _ := pr.([]any); len(pr) == 2 && pr[0] == wantBack {
					pair = pr
				}
			}
			if op["op"] != "insert" || row["name"] != wantBack || pair == nil || pair[1] != wantBack {
				t.Fatalf("%q: sent %s, want the name and an external_ids pair %q", s, b, wantBack)
			}
		}
	})
}

// BenchmarkEncode is writing the params of the transactions of an
// ovs-portmap ADD's record and an ovs-bridge ADD's attach (building the
// operations is left out).
func BenchmarkEncode(b *testing.B) {
	for _, tc := range []struct {
		name string
		ops  []operation
	}{{"record", benchRecord()}, {"attach", benchAttach()}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(transactParams(tc.ops)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// attachOpsOf is attachOps without the indexes.
func attachOpsOf(bridgeUUID string, spec PortSpec) []operation {
	ops, _ := attachOps(bridgeUUID, spec)
	return ops
}
