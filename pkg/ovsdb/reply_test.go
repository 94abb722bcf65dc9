package ovsdb

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// UUIDs of a port and a bridge.
const (
	portU   = "5a6e1b34-0d2c-4bb6-9b8c-1f0e2d3c4b5a"
	bridgeU = "0f1e2d3c-4b5a-4968-8776-655443322110"
)

// A broken or hostile answer is an error, never a crash; libovsdb's Row
// panicked on the first of these.
func TestMalformedReply(t *testing.T) {
	deep := strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2)
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
		`[{"syntax":` + deep + `}]`,
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
		res, err := parseTransactReply([]byte(reply))
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
	res, err := parseTransactReply([]byte(reply))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 9 {
		t.Fatalf("got %d results, want 9", len(res))
	}
	if res[0].count != 1 || res[1].uuid != portU || res[2].rows == nil || len(res[2].rows) != 0 {
		t.Errorf("got %+v, want a count of 1, a UUID and no rows", res[:3])
	}
	if got := string(rowsJSON(res[3].rows)); got != `[{"name":"a","n":["set",[1,2]]},{}]` {
		t.Errorf("got rows %s", got)
	}
	for i, want := range []error{&TimedOut{Details: `"wait" timed out`}, nil, &ServerError{Tag: "syntax error", Details: "d"},
		&ConstraintViolation{}, nil} {
		if got := res[4+i].err; !reflect.DeepEqual(got, want) {
			t.Errorf("result %d: got error %#v, want %#v", 5+i, got, want)
		}
	}
}

// checkResults names the failed operation and its table, keeps each
// error's type, and tells a failed commit and a short answer.
func TestCheckResults(t *testing.T) {
	ops := recordOps(portU, nil, nil, []string{"ovsflow.io/claim/tcp/198.51.100.1:80"}, "brx")
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
			res, err := parseTransactReply([]byte(tc.reply))
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
	res, err := parseTransactReply([]byte(`[{"count":1},{},{"rows":[]},{"extra":1}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := checkResults(ops, res); err != nil || len(got) != len(ops) {
		t.Errorf("got %d results and error %v, want %d and none", len(got), err, len(ops))
	}
}

// The reply decoder never panics; what it reads is JSON, and its rows'
// values are OVSDB values that decode takes without panicking either.
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
		res, err := parseTransactReply(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("%q is not JSON, but read as %+v", b, res)
		}
		for _, r := range res {
			if !json.Valid(rowsJSON(r.rows)) {
				t.Fatalf("rows %s are not JSON", rowsJSON(r.rows))
			}
			_, _ = decode[OpenvSwitch](tableRoot, r.rows)
			_, _ = decode[Bridge](tableBridge, r.rows)
			_, _ = decode[Port](tablePort, r.rows)
			_, _ = decode[Interface](tableInterface, r.rows)
			_, _ = decode[ofports](tableInterface, r.rows)
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

// BenchmarkReply compares reading benchReply into the models: with the
// package's reply decoder and decode, and as before, with encoding/json
// into libovsdb's OperationResult and decode as it was of libovsdb's rows.
func BenchmarkReply(b *testing.B) {
	reply := benchReply(b)
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var res transactReply // as pkg/jsonrpc hands it the result
			if err := res.UnmarshalJSON(reply); err != nil {
				b.Fatal(err)
			}
			_, e1 := decode[OpenvSwitch](tableRoot, res[0].rows)
			_, e2 := decode[Bridge](tableBridge, res[1].rows)
			_, e3 := decode[Port](tablePort, res[2].rows)
			_, e4 := decode[Interface](tableInterface, res[3].rows)
			if err := errors.Join(e1, e2, e3, e4); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("libovsdb", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			res, err := libovsdbReply(reply)
			if err != nil {
				b.Fatal(err)
			}
			_, e1 := oldDecode[OpenvSwitch](tableRoot, res[0].Rows)
			_, e2 := oldDecode[Bridge](tableBridge, res[1].Rows)
			_, e3 := oldDecode[Port](tablePort, res[2].Rows)
			_, e4 := oldDecode[Interface](tableInterface, res[3].Rows)
			if err := errors.Join(e1, e2, e3, e4); err != nil {
				b.Fatal(err)
			}
		}
	})
}
