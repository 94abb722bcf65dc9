package ovsdb

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// sameAsLibovsdb fails unless ops write the JSON that libovsdb's types
// write for the same operations (as ovsdb-server reads them: the pairs of
// a map in any order).
func sameAsLibovsdb(ops []operation) error {
	got := transactParams(ops)
	want, err := libovsdbParams(toLibovsdb(ops))
	if err != nil {
		return fmt.Errorf("libovsdb: %v", err)
	}
	if want, err = withWaitRows(want); err != nil {
		return err
	}
	same, err := sameJSON(got, want)
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("got JSON\n%s\nwant (libovsdb's)\n%s", got, want)
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
		[]string{"ovsflow.io/claim/tcp/198.51.100.1:8080", "ovsflow.io/claim/udp/198.51.100.1:5353"}, "brx")
}

// benchAttach is the transaction of an ovs-bridge ADD: an access port with
// a requested ofport.
func benchAttach() []operation {
	return attachOpsOf(bridgeU, PortSpec{Name: "veth5f0c3a9e", OFPort: 40000, ExternalIDs: map[string]string{
		KeyOwner: OwnerValue, KeyContainerID: "5f0c3a9e1234567890abcdef5f0c3a9e1234567890abcdef5f0c3a9e12345678",
		KeyIfName: "eth0", KeyNetNS: "/var/run/netns/cni-5f0c3a9e-1234-5678-90ab-cdef5f0c3a9e",
		KeyNetwork: "abnet", KeyBridge: "brx", KeyMAC: "0a:58:0a:f4:00:0a"}})
}

// The operations the package builds write the JSON libovsdb's types wrote,
// without a server; TestOperationsFitSchema checks every transaction that
// the exported methods send to a real one.
func TestEncodeAsLibovsdb(t *testing.T) {
	ids := map[string]string{KeyOwner: OwnerValue, KeyContainerID: "c1", KeyIfName: "eth0", KeyMAC: "0a:58:0a:f4:00:0a"}
	hostile := hostileStrings()
	for _, tc := range []struct {
		name string
		ops  []operation
	}{
		{"record (portmap ADD)", benchRecord()},
		{"record, claims only", recordOps(portU, nil, nil, []string{"ovsflow.io/claim/tcp/198.51.100.1:80"}, "")},
		{"record, unset only", recordOps(portU, []string{"ovsflow.io/portmap"}, nil, nil, "")},
		{"record, bridge only", recordOps(portU, nil, nil, nil, "brx")},
		{"attach (bridge ADD)", benchAttach()},
		{"attach access with a tag and a MAC", attachOpsOf(bridgeU, PortSpec{Name: "v1", Tag: 5, ExternalIDs: ids, UniqueMAC: "0a:58:0a:f4:00:0a"})},
		{"attach trunk of one", attachOpsOf(bridgeU, PortSpec{Name: "v1", Trunks: []int{7}, ExternalIDs: ids})},
		{"attach trunk", attachOpsOf(bridgeU, PortSpec{Name: "v1", Trunks: []int{10, 20, 4094}, ExternalIDs: ids, OFPort: 32768})},
		{"attach without external_ids", attachOpsOf(bridgeU, PortSpec{Name: "v1"})},
		{"detach and sync", append(detachOps([]string{portU, bridgeU}), bumpCfg,
			operation{op: opSelect, table: tableRoot, where: allRows, columns: []string{"next_cfg"}})},
		{"select all", []operation{selectOp(tableBridge), selectModel[Interface](tableInterface, Attachment{"c1", "eth0"}.where()...)}},
		{"wait for an ofport", []operation{{op: opWait, table: tableInterface, timeout: 10000, where: []condition{{"name", fnEqual, str("v1")}},
			columns: []string{"ofport"}, until: fnNotEqual, rows: []row{{{"ofport", intSet{}}}}}}},
		{"empty sets and maps", []operation{{op: opMutate, table: tablePort, where: byUUID(portU),
			mutations: []mutation{{"external_ids", mutDelete, strSet{}}, {"external_ids", mutInsert, strMap{}}, {"trunks", mutInsert, intSet{}}}}}},
		{"hostile strings", recordOps(portU, hostile, map[string]string{hostile[0]: hostile[1], hostile[2]: hostile[3]}, hostile[4:], hostile[5])},
		{"hostile names", attachOpsOf(bridgeU, PortSpec{Name: strings.Join(hostile, ""), ExternalIDs: map[string]string{hostile[6]: hostile[7]}, UniqueMAC: hostile[8]})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := sameAsLibovsdb(tc.ops); err != nil {
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

// appendString writes what encoding/json reads back as encoding/json's own
// encoding would be read (invalid UTF-8 as U+FFFD).
func FuzzAppendString(f *testing.F) {
	for _, s := range hostileStrings() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := appendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("appendString(%q) = %s: %v", s, got, err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		if err := json.Unmarshal(want, &wantBack); err != nil {
			t.Fatal(err)
		}
		if back != wantBack {
			t.Fatalf("appendString(%q) = %s reads as %q, want %q (encoding/json: %s)", s, got, back, wantBack, want)
		}
	})
}

// BenchmarkEncode compares writing the params of the transactions of an
// ovs-portmap ADD's record and an ovs-bridge ADD's attach: with the
// package's types (which pkg/jsonrpc sends as they are), and with
// libovsdb's through encoding/json, as before (building the operations is
// left out).
func BenchmarkEncode(b *testing.B) {
	for _, tc := range []struct {
		name string
		ops  []operation
	}{{"record", benchRecord()}, {"attach", benchAttach()}} {
		lops := toLibovsdb(tc.ops)
		b.Run(tc.name+"/wire", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				transactParams(tc.ops)
			}
		})
		b.Run(tc.name+"/libovsdb", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := libovsdbParams(lops); err != nil {
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

// withWaitRows gives every wait of libovsdb's transaction its "rows":
// libovsdb drops an empty one (omitempty), though RFC 7047 requires the
// member, and a wait for no matching row is one with rows [].
func withWaitRows(params []byte) ([]byte, error) {
	var v []any
	if err := json.Unmarshal(params, &v); err != nil {
		return nil, err
	}
	for _, op := range v[1:] {
		if m, ok := op.(map[string]any); ok && m["op"] == "wait" {
			if _, ok := m["rows"]; !ok {
				m["rows"] = []any{}
			}
		}
	}
	return json.Marshal(v)
}
