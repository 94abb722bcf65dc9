package ovsdb

import (
	"slices"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// The operations this package sends (RFC 7047 section 5.2) are libovsdb's
// wire types, written by encoding/json (their MarshalJSON): ovsdb.Operation,
// ovsdb.Condition, ovsdb.Mutation, and the values ovsdb.UUID, ovsdb.OvsSet
// and ovsdb.OvsMap beside plain strings and ints. The helpers below only
// spell the values and operations used here shortly. Only libovsdb's ovsdb
// package is imported: its client, cache and model packages would load a
// schema and keep a cache, which a short-lived plugin has no use for.

// An operation is one operation of a transaction.
type operation = ovsdb.Operation

// Condition functions, mutators and wait conditions used here.
const (
	fnEqual    = ovsdb.ConditionEqual
	fnNotEqual = ovsdb.ConditionNotEqual
	fnIncludes = ovsdb.ConditionIncludes
	fnAtLeast  = ovsdb.ConditionGreaterThanOrEqual
	fnAtMost   = ovsdb.ConditionLessThanOrEqual

	mutInsert = ovsdb.MutateOperationInsert
	mutDelete = ovsdb.MutateOperationDelete
	mutAdd    = ovsdb.MutateOperationAdd

	untilEqual    = ovsdb.WaitConditionEqual
	untilNotEqual = ovsdb.WaitConditionNotEqual
)

// uuid is a reference to the row of UUID u. (libovsdb writes a string of
// a UUID's form as ["uuid", u], any other as a named UUID.)
func uuid(u string) ovsdb.UUID { return ovsdb.UUID{GoUUID: u} }

// named is the uuid-name of a row inserted in the same transaction.
func named(n string) ovsdb.UUID { return ovsdb.UUID{GoUUID: n} }

// strSet is a set of strings. (A set of one is written as that value, as
// RFC 7047 allows.)
func strSet(vals ...string) ovsdb.OvsSet { return ovsdb.OvsSet{GoSet: anySlice(vals)} }

// intSet is a set of integers.
func intSet(vals ...int) ovsdb.OvsSet { return ovsdb.OvsSet{GoSet: anySlice(vals)} }

func anySlice[T any](vals []T) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		out[i] = v
	}
	return out
}

// strMap is a map of strings: the external_ids and other_config columns.
type strMap map[string]string

// ovs is m as an OVSDB map.
func (m strMap) ovs() ovsdb.OvsMap {
	g := make(map[any]any, len(m))
	for k, v := range m {
		g[k] = v
	}
	return ovsdb.OvsMap{GoMap: g}
}

// keys are the keys of m, in order: a map delete by keys.
func (m strMap) keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func cond(column string, fn ovsdb.ConditionFunction, v any) ovsdb.Condition {
	return ovsdb.Condition{Column: column, Function: fn, Value: v}
}

func mut(column string, m ovsdb.Mutator, v any) ovsdb.Mutation {
	return ovsdb.Mutation{Column: column, Mutator: m, Value: v}
}

func selectOp(table string, where ...ovsdb.Condition) operation {
	return operation{Op: ovsdb.OperationSelect, Table: table, Where: where}
}

func insertOp(table, uuidName string, row ovsdb.Row) operation {
	return operation{Op: ovsdb.OperationInsert, Table: table, UUIDName: uuidName, Row: row}
}

func mutateOp(table string, where []ovsdb.Condition, muts ...ovsdb.Mutation) operation {
	return operation{Op: ovsdb.OperationMutate, Table: table, Where: where, Mutations: muts}
}

func updateOp(table string, where []ovsdb.Condition, row ovsdb.Row) operation {
	return operation{Op: ovsdb.OperationUpdate, Table: table, Where: where, Row: row}
}

func deleteOp(table string, where ...ovsdb.Condition) operation {
	return operation{Op: ovsdb.OperationDelete, Table: table, Where: where}
}

// waitOp waits until the rows of table matching where, in columns, are
// (untilEqual) or are not (untilNotEqual) rows, for at most timeoutMS
// milliseconds (0: it fails at once). The timeout is always written:
// without it ovsdb-server would wait for ever.
func waitOp(table string, where []ovsdb.Condition, columns []string, until ovsdb.WaitCondition, timeoutMS int, rows ...ovsdb.Row) operation {
	if rows == nil {
		rows = []ovsdb.Row{}
	}
	return operation{Op: ovsdb.OperationWait, Table: table, Where: where, Columns: columns,
		Until: string(until), Timeout: &timeoutMS, Rows: rows}
}

// wireOp writes an operation as libovsdb does, but for a wait's "rows",
// which RFC 7047 requires and libovsdb leaves out when empty (omitempty):
// a wait for no matching row is one with rows [].
type wireOp struct{ operation }

func (o wireOp) MarshalJSON() ([]byte, error) {
	b, err := o.operation.MarshalJSON()
	if err != nil || o.Op != ovsdb.OperationWait || len(o.Rows) > 0 {
		return b, err
	}
	return append(b[:len(b)-1], `,"rows":[]}`...), nil
}

// transactParams are the params of a transact request: the database, then
// the operations.
func transactParams(ops []operation) []any {
	out := make([]any, 0, 1+len(ops))
	out = append(out, dbName)
	for _, o := range ops {
		out = append(out, wireOp{o})
	}
	return out
}
