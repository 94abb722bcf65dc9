package ovsdb

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// UUIDs of a port and a bridge.
const (
	portU   = "5a6e1b34-0d2c-4bb6-9b8c-1f0e2d3c4b5a"
	bridgeU = "0f1e2d3c-4b5a-4968-8776-655443322110"
)

// parseReply reads a transact answer as pkg/jsonrpc hands it over.
func parseReply(b []byte) (transactReply, error) {
	var res transactReply
	err := res.UnmarshalJSON(b)
	return res, err
}

// probe is a model with one string column, x.
type probe struct {
	X string `ovsdb:"x"`
}

// A broken or hostile answer is an error, never a crash: of the reply
// decoder (libovsdb's Row panics on the first of these, which the decoder
// turns into an error), of checkResults, or at the latest of decode, for a
// value of a form the model's column does not take.
func TestMalformedReply(t *testing.T) {
	for _, reply := range []string{
		`[{"rows":[{"x":[]}]}]`,
		`[{"rows":[{"x":["set"]}]}]`,
		`[{"rows":[{"x":["set",1]}]}]`,
		`[{"rows":[{"x":["set",[["set",[]]]]}]}]`,
		`[{"rows":[{"x":["map",[["a"]]]}]}]`,
		`[{"rows":[{"x":["map",[["a","b","c"]]]}]}]`,
		`[{"rows":[{"x":["map",["a","b"]]}]}]`,
		`[{"rows":[{"x":["uuid"]}]}]`,
		`[{"rows":[{"x":["uuid",1]}]}]`,
		`[{"rows":[{"x":["other",[]]}]}]`,
		`[{"rows":[{"x":{"a":1}}]}]`,
		`[{"rows":[{"x":null}]}]`,
		`[{"rows":[{"x":01}]}]`,
		`[{"rows":[{"x":1.}]}]`,
		`[{"rows":[{"x":-}]}]`,
		`[{"rows":[{"x":"a` + "\x01" + `"}]}]`,
		`[{"rows":[{"x":"\q"}]}]`,
		`[{"rows":[{"x":"\u12"}]}]`,
		`[{"rows":[{"x":"unterminated}]}]`,
		`[{"rows":[{"x":tru}]}]`,
		`[{"rows":[{"x":1,}]}]`,
		`[{"rows":[{"x" 1}]}]`,
		`[{"rows":[{1:1}]}]`,
		`[{"rows":{}}]`,
		`[{"rows":[[]]}]`,
		`[{"count":"1"}]`,
		`[{"count":1.5}]`,
		`[{"uuid":"5a6e1b34-0d2c-4bb6-9b8c-1f0e2d3c4b5a"}]`,
		`[{"error":1}]`,
		`[{"details":["x"]}]`,
		`[1]`,
		`["x"]`,
		`[nul]`,
		`[{}`,
		`[{},]`,
		`[] x`,
		`{}`,
		`null`,
		``,
	} {
		res, err := parseReply([]byte(reply))
		if err == nil {
			ops := []operation{selectOp(tableBridge)}
			if strings.HasPrefix(reply, `[{"uuid"`) {
				ops = []operation{insertOp(tableBridge, "b", ovsdb.Row{})}
			}
			_, err = checkResults(ops, res)
		}
		if err == nil {
			_, err = decode[probe]("T", res[0].Rows)
		}
		if err == nil {
			t.Errorf("%s: got %+v, want an error", reply, res)
			continue
		}
		t.Logf("%s: %v", reply, err)
	}
}

// The answer's parts: counts, UUIDs, rows, errors, results not run (null)
// and members outside RFC 7047's.
func TestParseTransactReply(t *testing.T) {
	reply := `[{"count":1}, {"uuid":["uuid","` + portU + `"]}, {"rows":[]}, {"rows":[{"name":"a","n":["set",[1,2]]},{}]},
		{"error":"timed out","details":"\"wait\" timed out"}, null,
		{"error":"syntax error","details":"d","syntax":{"op":["x",[1,{"y":null}]]}},
		{"error":"constraint violation"}, {"future":true}]`
	res, err := parseReply([]byte(reply))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 9 {
		t.Fatalf("got %d results, want 9", len(res))
	}
	if res[0].Count != 1 || res[1].UUID.GoUUID != portU || len(res[2].Rows) != 0 {
		t.Errorf("got %+v, want a count of 1, a UUID and no rows", res[:3])
	}
	wantRows := []ovsdb.Row{{"name": "a", "n": ovsdb.OvsSet{GoSet: []any{1.0, 2.0}}}, {}}
	if got := res[3].Rows; !reflect.DeepEqual(got, wantRows) {
		t.Errorf("got rows %#v, want %#v", got, wantRows)
	}
	for i, want := range []error{&TimedOut{Details: `"wait" timed out`}, nil, &ServerError{Tag: "syntax error", Details: "d"},
		&ConstraintViolation{}, nil} {
		if got := resultErr(res[4+i]); !reflect.DeepEqual(got, want) {
			t.Errorf("result %d: got error %#v, want %#v", 5+i, got, want)
		}
	}
}

// checkResults names the failed operation and its table, keeps each
// error's type, and tells a failed commit and a short answer.
func TestCheckResults(t *testing.T) {
	ops := recordOps(portU, nil, nil, []string{"ovsflow.io/claim/tcp/198.51.100.1:80"}, nil, "brx", nil)
	for _, tc := range []struct {
		name, reply, want string
		target            any
	}{
		{"wait timed out", `[{"count":1},{"error":"timed out","details":"\"wait\" timed out after 0 ms"},null]`,
			`ovsdb wait on Port: timed out: "wait" timed out after 0 ms`, new(*TimedOut)},
		{"constraint violation", `[{"error":"constraint violation","details":"no"},null,null]`,
			`ovsdb mutate on Port: constraint violation: no`, new(*ConstraintViolation)},
		{"other error", `[{"error":"referential integrity violation"},null,null]`,
			`ovsdb mutate on Port: referential integrity violation`, new(*ServerError)},
		{"commit", `[{"count":1},{},{"rows":[]},{"error":"constraint violation","details":"dup"}]`,
			`ovsdb transaction: constraint violation: dup`, new(*ConstraintViolation)},
		{"short", `[{"count":1}]`, `ovsdb transaction: 1 results for 3 operations`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := parseReply([]byte(tc.reply))
			if err != nil {
				t.Fatal(err)
			}
			_, err = checkResults(ops, res)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got error %v, want %q", err, tc.want)
			}
			if tc.target != nil && !errors.As(err, tc.target) {
				t.Errorf("got error %v, want a %T", err, tc.target)
			}
			if w := timedOutWait(err); (w != nil) != (tc.name == "wait timed out") || w != nil && w.Table != tablePort {
				t.Errorf("timedOutWait: got %v", w)
			}
		})
	}
	res, err := parseReply([]byte(`[{"count":1},{},{"rows":[]},{"extra":1}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := checkResults(ops, res); err != nil || len(got) != len(ops) {
		t.Errorf("got %d results and error %v, want %d and none", len(got), err, len(ops))
	}
}

// The reply decoder never panics; what it reads is JSON, and decode takes
// its rows' values without panicking either.
func FuzzTransactReply(f *testing.F) {
	for _, s := range []string{
		`[{"rows":[{"x":[]}]}]`,
		`[{"count":1},{"uuid":["uuid","` + portU + `"]},{"error":"timed out","details":"d"},null]`,
		`[{"rows":[{"_uuid":["uuid","` + portU + `"],"name":"br0","ports":["set",[["uuid","a"],["uuid","b"]]],` +
			`"fail_mode":["set",[]],"external_ids":["map",[["k","v"]]],"ofport":["set",[1]],"trunks":[1,2]}]}]`,
		`[{"rows":[{"tag":["set",[1,2]],"mtu":1e3,"x":"\u00e9\ud800"}]}]`,
		`[{"error":"e","syntax":[[[{"a":[true,false,null,-1.5e-3]}]]]}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := parseReply(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("%q is not JSON, but read as %+v", b, res)
		}
		for _, r := range res {
			_, _ = decode[OpenvSwitch](tableRoot, r.Rows)
			_, _ = decode[Bridge](tableBridge, r.Rows)
			_, _ = decode[Port](tablePort, r.Rows)
			_, _ = decode[Interface](tableInterface, r.Rows)
			_, _ = decode[ofports](tableInterface, r.Rows)
		}
	})
}

// benchReply is the answer to the reads of an ADD, as ovsdb-server
// (Open vSwitch 3.1) gives it: the root row's counters, the bridge, and
// the Port and Interface with the columns of their models (as FindPorts
// selects them), from testdata/rows.json.
func benchReply(b *testing.B) []byte {
	b.Helper()
	rows := benchRows(b)
	var out []string
	for _, table := range []string{tableRoot, tableBridge, tablePort, tableInterface} {
		var rs []map[string]json.RawMessage
		if err := json.Unmarshal(rows[table], &rs); err != nil {
			b.Fatal(err)
		}
		var cols []string
		switch table {
		case tablePort:
			cols = selectModel[Port](table).Columns
		case tableInterface:
			cols = selectModel[Interface](table).Columns
		}
		if cols != nil {
			for i, r := range rs {
				kept := map[string]json.RawMessage{}
				for _, c := range cols {
					kept[c] = r[c]
				}
				rs[i] = kept
			}
		}
		raw, err := json.Marshal(map[string]any{"rows": rs})
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, string(raw))
	}
	return []byte("[" + strings.Join(out, ",") + "]")
}

// BenchmarkReply is reading benchReply into the models: encoding/json into
// libovsdb's OperationResult, then decode.
func BenchmarkReply(b *testing.B) {
	reply := benchReply(b)
	b.Run("libovsdb", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			res, err := parseReply(reply) // as pkg/jsonrpc hands it the result
			if err != nil {
				b.Fatal(err)
			}
			_, e1 := decode[OpenvSwitch](tableRoot, res[0].Rows)
			_, e2 := decode[Bridge](tableBridge, res[1].Rows)
			_, e3 := decode[Port](tablePort, res[2].Rows)
			_, e4 := decode[Interface](tableInterface, res[3].Rows)
			if err := errors.Join(e1, e2, e3, e4); err != nil {
				b.Fatal(err)
			}
		}
	})
}
