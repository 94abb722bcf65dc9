package ovsdb

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// libovsdb is the tests' reference: its wire types are what the package
// sent and read until it had its own (wire.go, reply.go), and its schema
// types check the operations. This file converts between the two.

// toLibovsdb converts operations to libovsdb's.
func toLibovsdb(ops []operation) []ovsdb.Operation {
	out := make([]ovsdb.Operation, len(ops))
	for i, o := range ops {
		l := ovsdb.Operation{Op: string(o.op), Table: o.table, Columns: o.columns, UUIDName: o.uuidName, Until: string(o.until)}
		for _, c := range o.where {
			l.Where = append(l.Where, ovsdb.NewCondition(c.column, ovsdb.ConditionFunction(c.function), libovsdbValue(c.value)))
		}
		for _, m := range o.mutations {
			l.Mutations = append(l.Mutations, *ovsdb.NewMutation(m.column, ovsdb.Mutator(m.mutator), libovsdbValue(m.value)))
		}
		if o.op == opInsert {
			l.Row = libovsdbRow(o.row)
		}
		if o.op == opWait {
			timeout := o.timeout
			l.Timeout = &timeout
			for _, r := range o.rows {
				l.Rows = append(l.Rows, libovsdbRow(r))
			}
		}
		out[i] = l
	}
	return out
}

func libovsdbRow(r row) ovsdb.Row {
	out := ovsdb.Row{}
	for _, c := range r {
		out[c.column] = libovsdbValue(c.value)
	}
	return out
}

// libovsdbValue is v as libovsdb's types hold it (what the package built
// before: strings and ints as themselves, UUIDs, OvsSet, OvsMap).
func libovsdbValue(v value) any {
	switch v := v.(type) {
	case str:
		return string(v)
	case integer:
		return int(v)
	case uuid:
		return ovsdb.UUID{GoUUID: string(v)}
	case named:
		return ovsdb.UUID{GoUUID: string(v)}
	case strSet:
		return ovsdb.OvsSet{GoSet: anys(v)}
	case intSet:
		return ovsdb.OvsSet{GoSet: anys(v)}
	case strMap:
		m := make(map[any]any, len(v))
		for k, val := range v {
			m[k] = val
		}
		return ovsdb.OvsMap{GoMap: m}
	}
	panic(fmt.Sprintf("no libovsdb value for %T", v))
}

func anys[T any](vals []T) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		out[i] = v
	}
	return out
}

// libovsdbParams is what the package sent for ops before: libovsdb's
// transact arguments, through encoding/json.
func libovsdbParams(ops []ovsdb.Operation) ([]byte, error) {
	return json.Marshal(ovsdb.NewTransactArgs(dbName, ops...))
}

// sameJSON reports whether a and b hold the same JSON value, but for the
// order of the pairs of OVSDB maps (libovsdb writes a Go map's order).
func sameJSON(a, b []byte) (bool, error) {
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		return false, fmt.Errorf("%s: %w", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		return false, fmt.Errorf("%s: %w", b, err)
	}
	return reflect.DeepEqual(sortMaps(va), sortMaps(vb)), nil
}

// sortMaps puts the pairs of every ["map", [...]] in v in order.
func sortMaps(v any) any {
	switch v := v.(type) {
	case []any:
		for i := range v {
			v[i] = sortMaps(v[i])
		}
		if len(v) == 2 && v[0] == "map" {
			if pairs, ok := v[1].([]any); ok {
				slices.SortFunc(pairs, func(x, y any) int {
					kx, _ := json.Marshal(x)
					ky, _ := json.Marshal(y)
					return slices.Compare(kx, ky)
				})
			}
		}
		return v
	case map[string]any:
		for k := range v {
			v[k] = sortMaps(v[k])
		}
	}
	return v
}

// rowsJSON is the JSON of rows, as the answer carried them.
func rowsJSON(rows []resultRow) []byte {
	b := []byte{'['}
	for i, r := range rows {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		for j, c := range r {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendString(b, string(c.column))
			b = append(append(b, ':'), c.datum...)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// parseRows reads rows (the JSON of a select's "rows") both ways: as the
// package does, and as libovsdb's Row does (nil when it fails or panics).
func parseRows(t testing.TB, rows string) ([]resultRow, []ovsdb.Row) {
	t.Helper()
	res, err := parseTransactReply([]byte(`[{"rows":` + rows + `}]`))
	if err != nil {
		t.Fatalf("rows %s: %v", rows, err)
	}
	if len(res) != 1 {
		t.Fatalf("rows %s: got %d results, want 1", rows, len(res))
	}
	return res[0].rows, libovsdbRows(rows)
}

// libovsdbRows decodes rows with libovsdb's Row, which panics on some
// malformed rows (an empty array, as in {"x":[]}).
func libovsdbRows(rows string) (out []ovsdb.Row) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	if json.Unmarshal([]byte(rows), &out) != nil {
		return nil
	}
	return out
}
