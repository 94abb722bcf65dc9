package ovsdb

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// The operations this package sends (RFC 7047 section 5.2) and the values in
// them (section 5.1), each a plain Go value that appends its own JSON: an
// operation holds only the members used here, and a value says by its type
// which OVSDB value it is (an atom, a set, a map, a UUID or a named UUID),
// so that nothing is left for reflection to find out at run time.

// A value is a column's value in a row, a condition or a mutation.
type value interface {
	appendJSON(b []byte) []byte
}

// Atoms.
type (
	str     string // a string
	integer int    // an integer
	uuid    string // a row's UUID: ["uuid", u]
	named   string // the uuid-name of a row inserted in the same transaction: ["named-uuid", n]
)

// Sets and maps. A set of one value is written as that value, as RFC 7047
// allows (and libovsdb did).
type (
	strSet []string
	intSet []int
	strMap map[string]string // written with its keys in order
)

func (s str) appendJSON(b []byte) []byte     { return appendString(b, string(s)) }
func (n integer) appendJSON(b []byte) []byte { return strconv.AppendInt(b, int64(n), 10) }
func (u uuid) appendJSON(b []byte) []byte {
	return append(appendString(append(b, `["uuid",`...), string(u)), ']')
}
func (n named) appendJSON(b []byte) []byte {
	return append(appendString(append(b, `["named-uuid",`...), string(n)), ']')
}

func (s strSet) appendJSON(b []byte) []byte {
	if len(s) == 1 {
		return appendString(b, s[0])
	}
	b = append(b, `["set",[`...)
	for i, v := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, v)
	}
	return append(b, "]]"...)
}

func (s intSet) appendJSON(b []byte) []byte {
	if len(s) == 1 {
		return strconv.AppendInt(b, int64(s[0]), 10)
	}
	b = append(b, `["set",[`...)
	for i, v := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	return append(b, "]]"...)
}

func (m strMap) appendJSON(b []byte) []byte {
	return appendMap(b, m, appendString, appendString)
}

// appendMap appends m as an OVSDB map, its pairs in key order (so that an
// operation encodes the same every time).
func appendMap[K cmp.Ordered, V any](b []byte, m map[K]V, key func([]byte, K) []byte, val func([]byte, V) []byte) []byte {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, `["map",[`...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = key(append(b, '['), k)
		b = append(val(append(b, ','), m[k]), ']')
	}
	return append(b, "]]"...)
}

// appendString appends s as a JSON string, as encoding/json writes it but
// for the HTML escapes: invalid UTF-8 becomes U+FFFD, and U+2028 and U+2029
// are escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, `\u00`...)
				b = append(b, hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), `\u202`...)
			b = append(b, hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}

const hex = "0123456789abcdef"

// An opKind names an operation (RFC 7047 section 5.2): those used here.
type opKind string

const (
	opSelect opKind = "select"
	opInsert opKind = "insert"
	opMutate opKind = "mutate"
	opWait   opKind = "wait"
	opUpdate opKind = "update"
	opDelete opKind = "delete"
)

// A function compares in a condition, or in a wait's "until" (== and !=).
type function string

const (
	fnEqual    function = "=="
	fnNotEqual function = "!="
	fnIncludes function = "includes"
	fnAtLeast  function = ">="
	fnAtMost   function = "<="
)

// A mutator changes a column in a mutation.
type mutator string

const (
	mutInsert mutator = "insert"
	mutDelete mutator = "delete"
	mutAdd    mutator = "+="
)

// A condition is [column, function, value].
type condition struct {
	column   string
	function function
	value    value
}

// A mutation is [column, mutator, value].
type mutation struct {
	column  string
	mutator mutator
	value   value
}

// A cell is one column's value in a row of an insert or a wait.
type cell struct {
	column string
	value  value
}

// row is a row of an insert or a wait, in the order it is written.
type row []cell

// An operation is one operation of a transaction, with the members this
// package uses. Each kind writes the members it takes: "where" always for
// select, mutate and wait (RFC 7047 requires it; an empty one means every
// row), "columns" when set (none, for a select, means all of them).
type operation struct {
	op        opKind
	table     string
	where     []condition
	columns   []string
	row       row        // insert, update
	uuidName  string     // insert
	mutations []mutation // mutate
	timeout   int        // wait: milliseconds (0: fail at once)
	until     function   // wait: fnEqual or fnNotEqual
	rows      []row      // wait
}

// appendTriple appends [column, op, value]: a condition or a mutation.
func appendTriple(b []byte, column, op string, v value) []byte {
	b = appendString(append(b, '['), column)
	b = appendString(append(b, ','), op)
	return append(v.appendJSON(append(b, ',')), ']')
}

func (o *operation) appendJSON(b []byte) []byte {
	b = appendString(append(b, `{"op":`...), string(o.op))
	b = appendString(append(b, `,"table":`...), o.table)
	if o.op != opInsert {
		b = append(b, `,"where":[`...)
		for i, c := range o.where {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendTriple(b, c.column, string(c.function), c.value)
		}
		b = append(b, ']')
	}
	if len(o.columns) > 0 {
		b = append(b, `,"columns":[`...)
		for i, c := range o.columns {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, c)
		}
		b = append(b, ']')
	}
	switch o.op {
	case opInsert:
		b = o.row.appendJSON(append(b, `,"row":`...))
		if o.uuidName != "" {
			b = appendString(append(b, `,"uuid-name":`...), o.uuidName)
		}
	case opUpdate:
		b = o.row.appendJSON(append(b, `,"row":`...))
	case opMutate:
		b = append(b, `,"mutations":[`...)
		for i, m := range o.mutations {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendTriple(b, m.column, string(m.mutator), m.value)
		}
		b = append(b, ']')
	case opWait:
		b = strconv.AppendInt(append(b, `,"timeout":`...), int64(o.timeout), 10)
		b = appendString(append(b, `,"until":`...), string(o.until))
		b = append(b, `,"rows":[`...)
		for i, r := range o.rows {
			if i > 0 {
				b = append(b, ',')
			}
			b = r.appendJSON(b)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

func (r row) appendJSON(b []byte) []byte {
	b = append(b, '{')
	for i, c := range r {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, c.column)
		b = c.value.appendJSON(append(b, ':'))
	}
	return append(b, '}')
}

// transactParams are the params of a transact request: the database, then
// the operations. (pkg/jsonrpc sends a json.RawMessage as it is.)
func transactParams(ops []operation) json.RawMessage {
	b := make([]byte, 0, 64+320*len(ops))
	b = append(b, `["`+dbName+`"`...)
	for i := range ops {
		b = ops[i].appendJSON(append(b, ','))
	}
	return append(b, ']')
}
