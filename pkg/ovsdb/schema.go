package ovsdb

import (
	"errors"
	"fmt"
	"strconv"
)

// KeySchema is the version of the suite's records that the writer of a row
// had, on every Port, Interface and Bridge row the plugins write (with
// every record they write on it). An OVSDB map insert keeps a key that is
// there: a writer never lowers the version a newer one set.
const KeySchema = "ovsflow.io/schema"

// SchemaVersion is the version of the records this build writes and
// reads. A row without KeySchema was written before the key existed: its
// records are version 1's.
const SchemaVersion = 1

var schemaValue = strconv.Itoa(SchemaVersion)

// ErrSchemaNewer says a row was written by a newer version of the suite,
// whose records this one cannot read.
var ErrSchemaNewer = errors.New("written by a newer version of ovsflow")

// SchemaError is a row whose records this build cannot read.
type SchemaError struct {
	Row     string // `port "ovf1a2b"`, `bridge "br0"`
	Version string // its KeySchema value
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("%s has records of schema %s (%s=%s), this build reads schema %d and older: upgrade it",
		e.Row, e.Version, KeySchema, e.Version, SchemaVersion)
}

func (e *SchemaError) Unwrap() error { return ErrSchemaNewer }

// CheckSchema reports whether the records of the row described by what,
// with external_ids ids, are of a version this build reads.
func CheckSchema(what string, ids map[string]string) error {
	v, ok := ids[KeySchema]
	if !ok {
		return nil // version 1, written before the key existed
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("%s: %s=%q is not a schema version", what, KeySchema, v)
	}
	if n > SchemaVersion {
		return &SchemaError{Row: what, Version: v}
	}
	return nil
}

// withSchema returns ids with KeySchema added (a copy).
func withSchema(ids map[string]string) strMap {
	out := make(strMap, len(ids)+1)
	for k, v := range ids {
		out[k] = v
	}
	out[KeySchema] = schemaValue
	return out
}
