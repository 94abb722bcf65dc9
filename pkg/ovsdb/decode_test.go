package ovsdb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// mapperDecode is decode as libovsdb's schema-driven mapper does it (what
// the client did before it loaded no schema): the reference of
// TestDecodeAsLibovsdb.
func mapperDecode[T any](db model.DatabaseModel, table string, rows []ovsdb.Row) ([]T, error) {
	out := make([]T, 0, len(rows))
	for i := range rows {
		uuid := ""
		if u, ok := rows[i]["_uuid"].(ovsdb.UUID); ok {
			uuid = u.GoUUID
		}
		m, err := model.CreateModel(db, table, &rows[i], uuid)
		if err != nil {
			return nil, fmt.Errorf("decoding %s row: %w", table, err)
		}
		out = append(out, *(m.(any).(*T)))
	}
	return out, nil
}

// parseRows reads rows (the JSON of a select's "rows") as the client reads
// a transact answer.
func parseRows(t testing.TB, rows string) []ovsdb.Row {
	t.Helper()
	res, err := parseReply([]byte(`[{"rows":` + rows + `}]`))
	if err != nil {
		t.Fatalf("rows %s: %v", rows, err)
	}
	if len(res) != 1 {
		t.Fatalf("rows %s: got %d results, want 1", rows, len(res))
	}
	return res[0].Rows
}

// sameAsMapper fails t unless decode and libovsdb's mapper give the same
// models (or both fail) on rows (JSON, as a select's answer carries them),
// and returns decode's error.
func sameAsMapper[T any](t *testing.T, db model.DatabaseModel, table string, rows string) error {
	t.Helper()
	return sameAsMapperRows[T](t, db, table, parseRows(t, rows))
}

// sameAsMapperRows is sameAsMapper on rows as the client read them.
func sameAsMapperRows[T any](t *testing.T, db model.DatabaseModel, table string, rows []ovsdb.Row) error {
	t.Helper()
	got, err := decode[T](table, rows)
	want, werr := mapperDecode[T](db, table, rows)
	if (err != nil) != (werr != nil) {
		t.Fatalf("decode: error %v; libovsdb's mapper: error %v", err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Errorf("decode:\n got %#v\nwant %#v (libovsdb's mapper)", got, want)
	}
	return err
}

const (
	uuidA = `["uuid","5a6e1b34-0d2c-4bb6-9b8c-1f0e2d3c4b5a"]`
	uuidB = `["uuid","0f1e2d3c-4b5a-4968-8776-655443322110"]`
)

// Edge cases: empty sets and maps, sets of one as bare atoms and as sets,
// absent optional values, missing columns.
func TestDecodeAsLibovsdb(t *testing.T) {
	db := databaseModel(t)
	for _, tc := range []struct {
		name, table, rows string
		wantErr           bool
	}{
		{name: "root", table: tableRoot, rows: `[{"_uuid":` + uuidA + `,"bridges":["set",[` + uuidA + `,` + uuidB + `]],"next_cfg":7,"cur_cfg":6}]`},
		{name: "root one bridge as an atom", table: tableRoot, rows: `[{"_uuid":` + uuidA + `,"bridges":` + uuidB + `,"next_cfg":0,"cur_cfg":0}]`},
		{name: "root one bridge as a set", table: tableRoot, rows: `[{"bridges":["set",[` + uuidB + `]]}]`},
		{name: "root no bridges", table: tableRoot, rows: `[{"bridges":["set",[]],"next_cfg":1}]`},
		{name: "root counters only", table: tableRoot, rows: `[{"next_cfg":12,"cur_cfg":11}]`},
		{name: "no rows", table: tableRoot, rows: `[]`},
		{name: "empty row", table: tableBridge, rows: `[{}]`},
		{name: "bridge", table: tableBridge, rows: `[{"_uuid":` + uuidA + `,"name":"br0","ports":["set",[` + uuidA + `,` + uuidB + `]],"datapath_type":"netdev","fail_mode":"secure","external_ids":["map",[["ovsflow.io/owner","ovsflow-cni"],["k",""]]]}]`},
		{name: "bridge fail_mode as a set", table: tableBridge, rows: `[{"name":"br0","fail_mode":["set",["standalone"]]}]`},
		{name: "bridge without fail_mode", table: tableBridge, rows: `[{"name":"br0","fail_mode":["set",[]],"ports":["set",[]],"external_ids":["map",[]],"datapath_type":""}]`},
		{name: "bridge, columns as selected", table: tableBridge, rows: `[{"_uuid":` + uuidA + `,"name":"br0","datapath_type":"system","fail_mode":["set",[]],"external_ids":["map",[]]},{"_uuid":` + uuidB + `,"name":"br1","datapath_type":"netdev","fail_mode":"secure","external_ids":["map",[["a","b"]]]}]`},
		{name: "port access", table: tablePort, rows: `[{"_uuid":` + uuidA + `,"name":"veth1","interfaces":` + uuidB + `,"tag":5,"trunks":["set",[]],"external_ids":["map",[["ovsflow.io/container-id","c1"],["ovsflow.io/ifname","eth0"]]]}]`},
		{name: "port trunk", table: tablePort, rows: `[{"name":"veth1","interfaces":["set",[` + uuidA + `,` + uuidB + `]],"tag":["set",[]],"trunks":["set",[10,20,4094]]}]`},
		{name: "port one trunk as an atom", table: tablePort, rows: `[{"name":"veth1","trunks":100,"tag":["set",[0]]}]`},
		{name: "port, _uuid and name only", table: tablePort, rows: `[{"_uuid":` + uuidA + `,"name":"p"}]`},
		{name: "interface up", table: tableInterface, rows: `[{"_uuid":` + uuidA + `,"name":"veth1","type":"","ofport":40000,"error":["set",[]],"mtu":1500,"mac_in_use":"82:56:8d:51:82:06","external_ids":["map",[["ovsflow.io/owner","ovsflow-cni"]]]}]`},
		{name: "interface not yet attached", table: tableInterface, rows: `[{"name":"veth1","type":"","ofport":["set",[]],"error":["set",[]],"mtu":["set",[]],"mac_in_use":["set",[]],"external_ids":["map",[]]}]`},
		{name: "interface in error", table: tableInterface, rows: `[{"name":"veth1","type":"","ofport":-1,"error":"could not open network device veth1 (No such device)","mtu":["set",[]],"mac_in_use":["set",[]]}]`},
		{name: "interface optional values as sets of one", table: tableInterface, rows: `[{"name":"i","type":"internal","ofport":["set",[65534]],"error":["set",["e"]],"mtu":["set",[9000]],"mac_in_use":["set",["02:00:00:00:00:01"]]}]`},
		{name: "columns outside the model", table: tableInterface, rows: `[{"name":"i","ofport_request":33000,"statistics":["map",[["rx_bytes",0]]],"admin_state":"up"}]`},

		{name: "string as a number", table: tableBridge, rows: `[{"name":1}]`, wantErr: true},
		{name: "string as a set", table: tableBridge, rows: `[{"name":["set",["a"]]}]`, wantErr: true},
		{name: "integer as a string", table: tableRoot, rows: `[{"next_cfg":"1"}]`, wantErr: true},
		{name: "optional as a set of two", table: tablePort, rows: `[{"tag":["set",[1,2]]}]`, wantErr: true},
		{name: "optional of the wrong type", table: tableInterface, rows: `[{"ofport":"1"}]`, wantErr: true},
		{name: "set element of the wrong type", table: tablePort, rows: `[{"trunks":["set",[1,"2"]]}]`, wantErr: true},
		{name: "map as a set", table: tableBridge, rows: `[{"external_ids":["set",[]]}]`, wantErr: true},
		{name: "map value of the wrong type", table: tableBridge, rows: `[{"external_ids":["map",[["k",1]]]}]`, wantErr: true},
		{name: "error in a later row", table: tableBridge, rows: `[{"name":"br0"},{"name":false}]`, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := tc.rows
			var err error
			switch tc.table {
			case tableRoot:
				err = sameAsMapper[OpenvSwitch](t, db, tc.table, rows)
			case tableBridge:
				err = sameAsMapper[Bridge](t, db, tc.table, rows)
			case tablePort:
				err = sameAsMapper[Port](t, db, tc.table, rows)
			case tableInterface:
				err = sameAsMapper[Interface](t, db, tc.table, rows)
			}
			if (err != nil) != tc.wantErr {
				t.Errorf("got error %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

// A decode error names the table and the column.
func TestDecodeErrorNamesColumn(t *testing.T) {
	rows := parseRows(t, `[{"name":"p","tag":["set",[1,2]]}]`)
	_, err := decode[Port](tablePort, rows)
	want := "decoding Port row: column tag: got a set of 2 values, want at most one"
	if err == nil || err.Error() != want {
		t.Fatalf("got error %v, want %q", err, want)
	}
}

// Every field of every model has a decoder, and a model with a field of
// another type is refused instead of silently left zero.
func TestDecodePlans(t *testing.T) {
	for _, m := range []any{OpenvSwitch{}, Bridge{}, Port{}, Interface{}} {
		typ := reflect.TypeOf(m)
		plan, err := planOf(typ)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(plan), typ.NumField(); got != want {
			t.Errorf("%s: got %d fields planned, want %d", typ, got, want)
		}
	}
	type odd struct {
		Up bool `ovsdb:"up"`
	}
	if _, err := decode[odd]("T", nil); err == nil {
		t.Error("got no error for a bool field, want one")
	}
}

// FuzzDecodeAsLibovsdb: whatever row the reply decoder reads and libovsdb's
// mapper decodes, decode decodes to the same model. decode is more lenient
// only in taking a string for a UUID and a UUID for a string, and stricter only with a _uuid that is not a UUID
// (the mapper ignores it), with numbers that are not integers in integer
// columns (the mapper truncates 2.5 to 2), and with the empty UUID that
// libovsdb's UUID makes of ["uuid", 1].
func FuzzDecodeAsLibovsdb(f *testing.F) {
	for _, s := range []string{
		`{"_uuid":` + uuidA + `,"name":"veth1","interfaces":` + uuidB + `,"tag":5,"trunks":["set",[]],"external_ids":["map",[["a","b"]]]}`,
		`{"name":"i","type":"internal","ofport":["set",[65534]],"error":["set",["e"]],"mtu":["set",[]],"mac_in_use":"x"}`,
		`{"trunks":["set",[1,2.5]],"tag":["set",[]],"interfaces":["set",[]]}`,
		`{"next_cfg":1e3,"cur_cfg":-4,"bridges":["set",[` + uuidA + `]]}`,
		`{"name":"a\u00e9\"b","external_ids":["map",[["k\n","\ud800"]]]}`,
	} {
		f.Add(s)
	}
	db := databaseModel(f)
	f.Fuzz(func(t *testing.T, s string) {
		res, err := parseReply([]byte(`[{"rows":[` + s + `]}]`))
		if err != nil {
			return // not JSON, or not what libovsdb's Row reads
		}
		if len(res) != 1 || len(res[0].Rows) != 1 {
			return // s held more than one row
		}
		theirs := res[0].Rows
		if u, ok := theirs[0]["_uuid"]; ok {
			if _, ok := u.(ovsdb.UUID); !ok {
				// The mapper leaves UUID empty; decode refuses it.
				return
			}
		}
		mine := theirs
		fuzzSame[OpenvSwitch](t, db, tableRoot, mine, theirs)
		fuzzSame[Bridge](t, db, tableBridge, mine, theirs)
		fuzzSame[Port](t, db, tablePort, mine, theirs)
		fuzzSame[Interface](t, db, tableInterface, mine, theirs)
	})
}

func fuzzSame[T any](t *testing.T, db model.DatabaseModel, table string, mine, theirs []ovsdb.Row) {
	t.Helper()
	want, werr := func() (m []T, err error) {
		// libovsdb's mapper panics on some values (a JSON null for an
		// integer); those rows are not a reference.
		defer func() {
			if recover() != nil {
				err = errPanicked
			}
		}()
		return mapperDecode[T](db, table, theirs)
	}()
	if werr != nil {
		return
	}
	got, err := decode[T](table, mine)
	if errors.Is(err, errNotInteger) || errors.Is(err, errEmptyUUID) {
		return
	}
	if err != nil {
		t.Fatalf("decode %s: %v; libovsdb's mapper decoded %#v", table, err, want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decode %s:\n got %#v\nwant %#v (libovsdb's mapper)", table, got, want)
	}
}

var errPanicked = errors.New("libovsdb's mapper panicked")

// benchRows are rows as ovsdb-server (Open vSwitch 3.1) answers selects:
// a Port and an Interface with all their columns, a Bridge with
// bridgeColumns and the root row's counters, as JSON by table, compact as
// on the wire.
func benchRows(b *testing.B) map[string]json.RawMessage {
	b.Helper()
	raw, err := os.ReadFile("testdata/rows.json")
	if err != nil {
		b.Fatal(err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		b.Fatal(err)
	}
	var rows map[string]json.RawMessage
	if err := json.Unmarshal(compact.Bytes(), &rows); err != nil {
		b.Fatal(err)
	}
	return rows
}

// BenchmarkDecode compares decode with libovsdb's mapper, on the rows of
// benchRows already read from the answer (BenchmarkReply is the whole way).
func BenchmarkDecode(b *testing.B) {
	rows := map[string][]ovsdb.Row{}
	for table, raw := range benchRows(b) {
		rows[table] = parseRows(b, string(raw))
	}
	lrows := rows
	db := databaseModel(b)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, e1 := decode[OpenvSwitch](tableRoot, rows[tableRoot])
			_, e2 := decode[Bridge](tableBridge, rows[tableBridge])
			_, e3 := decode[Port](tablePort, rows[tablePort])
			_, e4 := decode[Interface](tableInterface, rows[tableInterface])
			if err := errors.Join(e1, e2, e3, e4); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("libovsdb-mapper", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, e1 := mapperDecode[OpenvSwitch](db, tableRoot, lrows[tableRoot])
			_, e2 := mapperDecode[Bridge](db, tableBridge, lrows[tableBridge])
			_, e3 := mapperDecode[Port](db, tablePort, lrows[tablePort])
			_, e4 := mapperDecode[Interface](db, tableInterface, lrows[tableInterface])
			if err := errors.Join(e1, e2, e3, e4); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSchemaModel is what Dial did before it connected when it loaded
// the schema: decode the embedded schema subset and build libovsdb's
// database model on it (once per process, that is once per plugin
// invocation).
func BenchmarkSchemaModel(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		var s ovsdb.DatabaseSchema
		if err := json.Unmarshal(embeddedSchema, &s); err != nil {
			b.Fatal(err)
		}
		m, err := clientDBModel()
		if err != nil {
			b.Fatal(err)
		}
		if _, errs := model.NewDatabaseModel(s, m); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
}
