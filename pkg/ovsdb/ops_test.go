package ovsdb

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// checkOperation checks what ValidateOperations does not: the columns of
// conditions, mutations and waits, and that every value, condition and
// mutation fits its column's type (enums and integer ranges included).
func checkOperation(s ovsdb.DatabaseSchema, op ovsdb.Operation) error {
	table := s.Table(op.Table)
	if table == nil {
		return fmt.Errorf("no table %q", op.Table)
	}
	column := func(name string) (*ovsdb.ColumnSchema, error) {
		if c := table.Column(name); c != nil {
			return c, nil
		}
		return nil, fmt.Errorf("no column %q", name)
	}
	for _, name := range op.Columns {
		if _, err := column(name); err != nil {
			return err
		}
	}
	for _, row := range append([]ovsdb.Row{op.Row}, op.Rows...) {
		for name, v := range row {
			c, err := column(name)
			if err != nil {
				return err
			}
			if _, err := checkValue(c, v); err != nil {
				return fmt.Errorf("column %s: %w", name, err)
			}
		}
	}
	for _, cond := range op.Where {
		c, err := column(cond.Column)
		if err != nil {
			return err
		}
		native, err := checkValue(c, cond.Value)
		if err == nil && !optionalInequality(c, cond.Function) {
			err = ovsdb.ValidateCondition(c, cond.Function, native)
		}
		if err != nil {
			return fmt.Errorf("condition %s: %w", cond, err)
		}
	}
	for _, m := range op.Mutations {
		c, err := column(m.Column)
		if err != nil {
			return err
		}
		var native any
		if _, keys := m.Value.(ovsdb.OvsSet); keys && c.Type == ovsdb.TypeMap && m.Mutator == ovsdb.MutateOperationDelete {
			// A map delete may name only the keys.
			native, err = ovsdb.OvsToNativeSlice(c.TypeObj.Key.Type, m.Value)
		} else {
			native, err = checkValue(c, m.Value)
		}
		if err == nil {
			err = ovsdb.ValidateMutation(c, m.Mutator, native)
		}
		if err != nil {
			return fmt.Errorf("mutation %s %s: %w", m.Column, m.Mutator, err)
		}
	}
	if op.Op == ovsdb.OperationWait && op.Until != string(ovsdb.WaitConditionEqual) && op.Until != string(ovsdb.WaitConditionNotEqual) {
		return fmt.Errorf("wait until %q", op.Until)
	}
	return nil
}

// optionalInequality reports an inequality on an optional integer or real,
// which ovsdb-server accepts (and ChooseOFPort uses) but libovsdb's
// ValidateCondition refuses.
func optionalInequality(c *ovsdb.ColumnSchema, f ovsdb.ConditionFunction) bool {
	switch f {
	case ovsdb.ConditionLessThan, ovsdb.ConditionLessThanOrEqual, ovsdb.ConditionGreaterThan, ovsdb.ConditionGreaterThanOrEqual:
	default:
		return false
	}
	return c.Type == ovsdb.TypeSet && c.TypeObj.Min() == 0 && c.TypeObj.Max() == 1 &&
		(c.TypeObj.Key.Type == ovsdb.TypeInteger || c.TypeObj.Key.Type == ovsdb.TypeReal)
}

// checkValue converts an OVSDB value to its native form by the column's
// type, and checks enums and integer ranges.
func checkValue(c *ovsdb.ColumnSchema, v any) (any, error) {
	native, err := ovsdb.OvsToNative(c, v)
	if err != nil {
		return nil, err
	}
	if c.TypeObj == nil || c.TypeObj.Key == nil || c.Type == ovsdb.TypeMap {
		return native, nil // an unconstrained atom (_uuid), or a map
	}
	key := c.TypeObj.Key
	var atoms []reflect.Value
	switch rv := reflect.ValueOf(native); rv.Kind() {
	case reflect.Slice:
		for i := 0; i < rv.Len(); i++ {
			atoms = append(atoms, rv.Index(i))
		}
	case reflect.Pointer:
		if !rv.IsNil() {
			atoms = append(atoms, rv.Elem())
		}
	default:
		atoms = append(atoms, rv)
	}
	for _, a := range atoms {
		if key.Enum != nil && !slices.Contains(key.Enum, a.Interface()) {
			return nil, fmt.Errorf("%v is not one of %v", a.Interface(), key.Enum)
		}
		if key.Type == ovsdb.TypeInteger {
			lo, _ := key.MinInteger()
			hi, _ := key.MaxInteger()
			if n := int(a.Int()); n < lo || n > hi {
				return nil, fmt.Errorf("%d is not in %d-%d", n, lo, hi)
			}
		}
	}
	return native, nil
}

// checkOperation refuses what does not fit the schema.
func TestCheckOperation(t *testing.T) {
	s, err := schemaOnce()
	if err != nil {
		t.Fatal(err)
	}
	byUUID := []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: "u"})}
	for _, tc := range []struct {
		name string
		op   ovsdb.Operation
		ok   bool
	}{
		{"insert", ovsdb.Operation{Op: ovsdb.OperationInsert, Table: tablePort,
			Row: ovsdb.Row{"name": "p", "tag": 5, "vlan_mode": "access", "interfaces": uuidSet("i"), "external_ids": strMap(map[string]string{"k": "v"})}}, true},
		{"no such table", ovsdb.Operation{Op: ovsdb.OperationSelect, Table: "Nosuch"}, false},
		{"no such column", ovsdb.Operation{Op: ovsdb.OperationInsert, Table: tablePort, Row: ovsdb.Row{"nosuch": 1}}, false},
		{"no such selected column", ovsdb.Operation{Op: ovsdb.OperationSelect, Table: tablePort, Columns: []string{"nosuch"}}, false},
		{"value of the wrong type", ovsdb.Operation{Op: ovsdb.OperationInsert, Table: tablePort, Row: ovsdb.Row{"name": 1}}, false},
		{"not in the enum", ovsdb.Operation{Op: ovsdb.OperationInsert, Table: tablePort, Row: ovsdb.Row{"vlan_mode": "bogus"}}, false},
		{"out of range", ovsdb.Operation{Op: ovsdb.OperationInsert, Table: tablePort, Row: ovsdb.Row{"trunks": ovsSet(10, 5000)}}, false},
		{"condition on no such column", ovsdb.Operation{Op: ovsdb.OperationSelect, Table: tablePort,
			Where: []ovsdb.Condition{ovsdb.NewCondition("nosuch", ovsdb.ConditionEqual, "x")}}, false},
		{"condition of the wrong type", ovsdb.Operation{Op: ovsdb.OperationSelect, Table: tablePort,
			Where: []ovsdb.Condition{ovsdb.NewCondition("name", ovsdb.ConditionEqual, ovsSet(1))}}, false},
		{"inequality on an optional integer", ovsdb.Operation{Op: ovsdb.OperationSelect, Table: tableInterface,
			Where: []ovsdb.Condition{ovsdb.NewCondition("ofport", ovsdb.ConditionGreaterThanOrEqual, 1)}}, true},
		{"inequality on a string", ovsdb.Operation{Op: ovsdb.OperationSelect, Table: tableInterface,
			Where: []ovsdb.Condition{ovsdb.NewCondition("name", ovsdb.ConditionGreaterThan, "a")}}, false},
		{"map delete by keys", ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tablePort, Where: byUUID,
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationDelete, ovsSet("k"))}}, true},
		{"mutation of no such column", ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tablePort, Where: byUUID,
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("nosuch", ovsdb.MutateOperationInsert, ovsSet("k"))}}, false},
		{"set insert into a map", ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tablePort, Where: byUUID,
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationInsert, ovsSet("k"))}}, false},
		{"wait on no such column", ovsdb.Operation{Op: ovsdb.OperationWait, Table: tablePort, Where: byUUID,
			Columns: []string{"_uuid"}, Until: "==", Rows: []ovsdb.Row{{"nosuch": 1}}}, false},
		{"wait until what", ovsdb.Operation{Op: ovsdb.OperationWait, Table: tablePort, Where: byUUID,
			Columns: []string{"_uuid"}, Until: "<", Rows: []ovsdb.Row{{"_uuid": ovsdb.UUID{GoUUID: "u"}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkOperation(s, tc.op); (err == nil) != tc.ok {
				t.Errorf("got error %v, want ok %v", err, tc.ok)
			}
		})
	}
}
