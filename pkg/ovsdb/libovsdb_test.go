package ovsdb

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// libovsdb is the tests' reference: its wire types are what the package
// sent and read until it had its own (wire.go, reply.go), and its schema
// types check the operations. This file converts between the two and keeps
// the old path callable for the benchmarks.

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
			col, _ := json.Marshal(string(c.column))
			b = append(b, col...)
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

// The old path, for the benchmarks: a transact answer decoded by
// encoding/json into libovsdb's OperationResult (its Row.UnmarshalJSON),
// and rows into models from libovsdb's Row values by decode as it was
// (oldDecode and the rest of this file, unchanged but for the names).

func libovsdbReply(b []byte) ([]ovsdb.OperationResult, error) {
	var res []ovsdb.OperationResult
	err := json.Unmarshal(b, &res)
	return res, err
}

func oldDecode[T any](table string, rows []ovsdb.Row) ([]T, error) {
	plan, err := oldPlanOf(reflect.TypeFor[T]())
	if err != nil {
		return nil, err
	}
	out := make([]T, len(rows))
	for i, row := range rows {
		v := reflect.ValueOf(&out[i]).Elem()
		for _, f := range plan {
			val, ok := row[f.column]
			if !ok {
				continue
			}
			if err := f.set(v.Field(f.index), val); err != nil {
				return nil, fmt.Errorf("decoding %s row: column %s: %w", table, f.column, err)
			}
		}
	}
	return out, nil
}

// A oldFieldPlan says which field of a model a column goes to, and how.
type oldFieldPlan struct {
	column string
	index  int
	set    func(field reflect.Value, val any) error
}

// oldPlans caches the plan of each model type.
var oldPlans sync.Map

func oldPlanOf(t reflect.Type) ([]oldFieldPlan, error) {
	if p, ok := oldPlans.Load(t); ok {
		return p.([]oldFieldPlan), nil
	}
	var plan []oldFieldPlan
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		col := f.Tag.Get("ovsdb")
		if col == "" {
			continue
		}
		set := oldSetterFor(f.Type)
		if set == nil {
			return nil, fmt.Errorf("model %s: field %s (column %s): no decoder for %s", t, f.Name, col, f.Type)
		}
		plan = append(plan, oldFieldPlan{column: col, index: i, set: set})
	}
	oldPlans.Store(t, plan)
	return plan, nil
}

// setterFor returns how to set a field of type t: the Go types of the
// models (model.go), in libovsdb's mapping of OVSDB types (a column of
// exactly one value is the value, an optional one a pointer, a set a slice).
func oldSetterFor(t reflect.Type) func(reflect.Value, any) error {
	switch t {
	case reflect.TypeFor[string]():
		return oldSetter(oldString)
	case reflect.TypeFor[*string]():
		return oldSetter(oldOptional(oldString))
	case reflect.TypeFor[int]():
		return oldSetter(oldInt)
	case reflect.TypeFor[*int]():
		return oldSetter(oldOptional(oldInt))
	case reflect.TypeFor[[]string]():
		return oldSetter(oldSetOf(oldString))
	case reflect.TypeFor[[]int]():
		return oldSetter(oldSetOf(oldInt))
	case reflect.TypeFor[map[string]string]():
		return oldSetter(oldStringMap)
	}
	return nil
}

func oldSetter[E any](conv func(any) (E, error)) func(reflect.Value, any) error {
	return func(field reflect.Value, val any) error {
		e, err := conv(val)
		if err == nil {
			*field.Addr().Interface().(*E) = e
		}
		return err
	}
}

// oldString is a string or a UUID (a reference, or a row's _uuid).
func oldString(v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case ovsdb.UUID:
		return s.GoUUID, nil
	}
	return "", fmt.Errorf("got %T, want a string or a UUID", v)
}

// oldInt is an integer, which JSON decodes as float64.
func oldInt(v any) (int, error) {
	switch n := v.(type) {
	case float64:
		return int(n), nil
	case int:
		return n, nil
	}
	return 0, fmt.Errorf("got %T, want an integer", v)
}

// optional decodes a column of at most one value: the bare atom, or a set
// of zero or one.
func oldOptional[E any](atom func(any) (E, error)) func(any) (*E, error) {
	return func(v any) (*E, error) {
		if s, ok := v.(ovsdb.OvsSet); ok {
			switch len(s.GoSet) {
			case 0:
				return nil, nil
			case 1:
				v = s.GoSet[0]
			default:
				return nil, fmt.Errorf("got a set of %d values, want at most one", len(s.GoSet))
			}
		}
		e, err := atom(v)
		if err != nil {
			return nil, err
		}
		return &e, nil
	}
}

// setOf decodes a set, which arrives as a bare atom when it holds one value
// (RFC 7047 section 5.1). An empty set is an empty slice, not nil.
func oldSetOf[E any](atom func(any) (E, error)) func(any) ([]E, error) {
	return func(v any) ([]E, error) {
		vals := []any{v}
		if s, ok := v.(ovsdb.OvsSet); ok {
			vals = s.GoSet
		}
		out := make([]E, 0, len(vals))
		for _, v := range vals {
			e, err := atom(v)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
}

func oldStringMap(v any) (map[string]string, error) {
	m, ok := v.(ovsdb.OvsMap)
	if !ok {
		return nil, fmt.Errorf("got %T, want a map", v)
	}
	out := make(map[string]string, len(m.GoMap))
	for k, v := range m.GoMap {
		ks, err := oldString(k)
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		vs, err := oldString(v)
		if err != nil {
			return nil, fmt.Errorf("value of %q: %w", ks, err)
		}
		out[ks] = vs
	}
	return out, nil
}
