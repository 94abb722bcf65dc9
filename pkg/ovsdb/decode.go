package ovsdb

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"sync"
)

// decode turns the rows of a select result into models of table. It fills
// each field tagged `ovsdb:"column"` by the field's Go type alone, without
// the schema: the rows come from ovsdb-server's own schema, and the models'
// types follow it (TestModelsMatchVswitchSchema), so only the forms in which
// a value may arrive are left to handle. TestDecodeAsLibovsdb and
// TestDecodeRealRows keep the result equal to libovsdb's schema-driven
// mapper. A column missing from a row leaves its field zero.
func decode[T any](table string, rows []resultRow) ([]T, error) {
	plan, err := planOf(reflect.TypeFor[T]())
	if err != nil {
		return nil, err
	}
	out := make([]T, len(rows))
	var scratch [16]atom
	for i, row := range rows {
		v := reflect.ValueOf(&out[i]).Elem()
		for _, c := range row {
			f := plan.field(c.column)
			if f == nil {
				continue
			}
			s := scanner{b: c.datum}
			d, _, err := s.datum(scratch[:0])
			if err == nil {
				err = f.set(v.Field(f.index), d)
			}
			if err != nil {
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
	set    func(field reflect.Value, d datum) error
}

type modelPlan []fieldPlan

func (p modelPlan) field(column []byte) *fieldPlan {
	for i := range p {
		if p[i].column == string(column) {
			return &p[i]
		}
	}
	return nil
}

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
func setterFor(t reflect.Type) func(reflect.Value, datum) error {
	switch t {
	case reflect.TypeFor[string]():
		return setter(single(atomString))
	case reflect.TypeFor[*string]():
		return setter(optional(atomString))
	case reflect.TypeFor[int]():
		return setter(single(atomInt))
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

func setter[E any](conv func(datum) (E, error)) func(reflect.Value, datum) error {
	return func(field reflect.Value, d datum) error {
		e, err := conv(d)
		if err == nil {
			*field.Addr().Interface().(*E) = e
		}
		return err
	}
}

// atomString is a string or a UUID (a reference, or a row's _uuid).
func atomString(a atom) (string, error) {
	if a.kind != kindString && a.kind != kindUUID {
		return "", fmt.Errorf("got %s, want a string or a UUID", a.kind)
	}
	return unquote(a.raw, a.esc)
}

// errNotInteger: RFC 7047's integers are JSON numbers without a fraction,
// in 64 bits.
var errNotInteger = errors.New("not an integer")

// atomInt is an integer. Like encoding/json (and so libovsdb), it reads
// the number as a float64, which holds every integer ovsdb-server sends
// here exactly.
func atomInt(a atom) (int, error) {
	if a.kind != kindNumber {
		return 0, fmt.Errorf("got %s, want an integer", a.kind)
	}
	f, err := strconv.ParseFloat(string(a.raw), 64)
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, fmt.Errorf("%s: %w", a.raw, errNotInteger)
	}
	return int(f), nil
}

// single decodes a column of exactly one value.
func single[E any](atom func(atom) (E, error)) func(datum) (E, error) {
	return func(d datum) (E, error) {
		if d.kind != datumAtom {
			var zero E
			return zero, fmt.Errorf("got %s, want one value", d)
		}
		return atom(d.atoms[0])
	}
}

// optional decodes a column of at most one value: the bare atom, or a set
// of zero or one.
func optional[E any](atom func(atom) (E, error)) func(datum) (*E, error) {
	return func(d datum) (*E, error) {
		switch {
		case d.kind == datumMap:
			return nil, fmt.Errorf("got %s, want at most one value", d)
		case d.kind == datumSet && len(d.atoms) == 0:
			return nil, nil
		case len(d.atoms) > 1:
			return nil, fmt.Errorf("got a set of %d values, want at most one", len(d.atoms))
		}
		e, err := atom(d.atoms[0])
		if err != nil {
			return nil, err
		}
		return &e, nil
	}
}

// setOf decodes a set, which arrives as a bare atom when it holds one value
// (RFC 7047 section 5.1). An empty set is an empty slice, not nil.
func setOf[E any](atom func(atom) (E, error)) func(datum) ([]E, error) {
	return func(d datum) ([]E, error) {
		if d.kind == datumMap {
			return nil, fmt.Errorf("got %s, want a set", d)
		}
		out := make([]E, 0, len(d.atoms))
		for _, a := range d.atoms {
			e, err := atom(a)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
}

func stringMap(d datum) (map[string]string, error) {
	if d.kind != datumMap {
		return nil, fmt.Errorf("got %s, want a map", d)
	}
	out := make(map[string]string, len(d.atoms)/2)
	for i := 0; i+1 < len(d.atoms); i += 2 {
		ks, err := atomString(d.atoms[i])
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		vs, err := atomString(d.atoms[i+1])
		if err != nil {
			return nil, fmt.Errorf("value of %q: %w", ks, err)
		}
		out[ks] = vs
	}
	return out, nil
}
