package ovsdb

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// decode turns the rows of a select result, as libovsdb's Row holds them
// (strings, float64s, booleans, ovsdb.UUID, ovsdb.OvsSet, ovsdb.OvsMap),
// into models of table. It fills each field tagged `ovsdb:"column"` by the
// field's Go type alone, without the schema: the rows come from
// ovsdb-server's own schema, and the models' types follow it
// (TestModelsMatchVswitchSchema), so only the forms in which a value may
// arrive are left to handle. TestDecodeAsLibovsdb and TestDecodeRealRows
// keep the result equal to libovsdb's schema-driven mapper, which would
// need the schema loaded and libovsdb's model package. A column missing
// from a row leaves its field zero.
func decode[T any](table string, rows []ovsdb.Row) ([]T, error) {
	plan, err := planOf(reflect.TypeFor[T]())
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

// A fieldPlan says which field of a model a column goes to, and how.
type fieldPlan struct {
	column string
	index  int
	set    func(field reflect.Value, val any) error
}

type modelPlan []fieldPlan

// plans caches the plan of each model type (reflect.Type → modelPlan).
var plans sync.Map

func planOf(t reflect.Type) (modelPlan, error) {
	if p, ok := plans.Load(t); ok {
		return p.(modelPlan), nil
	}
	var plan modelPlan
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		col := f.Tag.Get("ovsdb")
		if col == "" {
			continue
		}
		set := setterFor(f.Type)
		if set == nil {
			return nil, fmt.Errorf("model %s: field %s (column %s): no decoder for %s", t, f.Name, col, f.Type)
		}
		plan = append(plan, fieldPlan{column: col, index: i, set: set})
	}
	plans.Store(t, plan)
	return plan, nil
}

// setterFor returns how to set a field of type t: the Go types of the
// models (model.go), in libovsdb's mapping of OVSDB types (a column of
// exactly one value is the value, an optional one a pointer, a set a slice).
func setterFor(t reflect.Type) func(reflect.Value, any) error {
	switch t {
	case reflect.TypeFor[string]():
		return setter(atomString)
	case reflect.TypeFor[*string]():
		return setter(optional(atomString))
	case reflect.TypeFor[int]():
		return setter(atomInt)
	case reflect.TypeFor[*int]():
		return setter(optional(atomInt))
	case reflect.TypeFor[[]string]():
		return setter(setOf(atomString))
	case reflect.TypeFor[[]int]():
		return setter(setOf(atomInt))
	case reflect.TypeFor[map[string]string]():
		return setter(stringMap)
	}
	return nil
}

func setter[E any](conv func(any) (E, error)) func(reflect.Value, any) error {
	return func(field reflect.Value, val any) error {
		e, err := conv(val)
		if err == nil {
			*field.Addr().Interface().(*E) = e
		}
		return err
	}
}

// kind names the OVSDB form of a value as libovsdb's Row holds it.
func kind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case ovsdb.UUID:
		return "a UUID"
	case ovsdb.OvsSet:
		return "a set"
	case ovsdb.OvsMap:
		return "a map"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// atomString is a string or a UUID (a reference, or a row's _uuid).
func atomString(v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case ovsdb.UUID:
		// libovsdb's UUID reads ["uuid", 1] as the empty UUID, without
		// an error: ovsdb-server never sends one.
		if s.GoUUID == "" {
			return "", errEmptyUUID
		}
		return s.GoUUID, nil
	}
	return "", fmt.Errorf("got %s, want a string or a UUID", kind(v))
}

var errEmptyUUID = errors.New("got an empty UUID")

// errNotInteger: RFC 7047's integers are JSON numbers without a fraction,
// in 64 bits.
var errNotInteger = errors.New("not an integer")

// atomInt is an integer, which encoding/json reads as a float64 (holding
// every integer ovsdb-server sends here exactly).
func atomInt(v any) (int, error) {
	f, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("got %s, want an integer", kind(v))
	}
	if f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, fmt.Errorf("%v: %w", f, errNotInteger)
	}
	return int(f), nil
}

// optional decodes a column of at most one value: the bare atom, or a set
// of zero or one.
func optional[E any](atom func(any) (E, error)) func(any) (*E, error) {
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
func setOf[E any](atom func(any) (E, error)) func(any) ([]E, error) {
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

func stringMap(v any) (map[string]string, error) {
	m, ok := v.(ovsdb.OvsMap)
	if !ok {
		return nil, fmt.Errorf("got %s, want a map", kind(v))
	}
	out := make(map[string]string, len(m.GoMap))
	for k, v := range m.GoMap {
		ks, err := atomString(k)
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		vs, err := atomString(v)
		if err != nil {
			return nil, fmt.Errorf("value of %q: %w", ks, err)
		}
		out[ks] = vs
	}
	return out, nil
}
