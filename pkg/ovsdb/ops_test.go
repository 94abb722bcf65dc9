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
	where := byUUID(portU)
	for _, tc := range []struct {
		name string
		op   operation
		ok   bool
	}{
		{"insert", insertOp(tablePort, "",
			ovsdb.Row{"name": "p", "tag": 5, "vlan_mode": "access", "interfaces": named("i"), "external_ids": strMap{"k": "v"}.ovs()}), true},
		{"no such table", selectOp("Nosuch"), false},
		{"no such column", insertOp(tablePort, "", ovsdb.Row{"nosuch": 1}), false},
		{"no such selected column", operation{Op: ovsdb.OperationSelect, Table: tablePort, Columns: []string{"nosuch"}}, false},
		{"value of the wrong type", insertOp(tablePort, "", ovsdb.Row{"name": 1}), false},
		{"not in the enum", insertOp(tablePort, "", ovsdb.Row{"vlan_mode": "bogus"}), false},
		{"out of range", insertOp(tablePort, "", ovsdb.Row{"trunks": intSet(10, 5000)}), false},
		{"condition on no such column", selectOp(tablePort, cond("nosuch", fnEqual, "x")), false},
		{"condition of the wrong type", selectOp(tablePort, cond("name", fnEqual, intSet(1))), false},
		{"inequality on an optional integer", selectOp(tableInterface, cond("ofport", fnAtLeast, 1)), true},
		{"inequality on a string", selectOp(tableInterface, cond("name", ovsdb.ConditionGreaterThan, "a")), false},
		{"map delete by keys", mutateOp(tablePort, where, mut("external_ids", mutDelete, strSet("k"))), true},
		{"mutation of no such column", mutateOp(tablePort, where, mut("nosuch", mutInsert, strSet("k"))), false},
		{"set insert into a map", mutateOp(tablePort, where, mut("external_ids", mutInsert, strSet("k"))), false},
		{"wait on no such column", waitOp(tablePort, where, []string{"_uuid"}, untilEqual, 0, ovsdb.Row{"nosuch": 1}), false},
		{"wait until what", waitOp(tablePort, where, []string{"_uuid"}, "<", 0, ovsdb.Row{"_uuid": uuid(portU)}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkOperation(s, tc.op); (err == nil) != tc.ok {
				t.Errorf("got error %v, want ok %v", err, tc.ok)
			}
		})
	}
}
