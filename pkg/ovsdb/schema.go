package ovsdb

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// The schema a plugin validates its operations against is embedded, not
// downloaded: get_schema is a round trip, and decoding the whole
// Open_vSwitch schema costs more than the transactions of a command
// (docs/performance.md, "Design costs"). The file
// holds only the tables and columns the models and operations use, cut from
// the schema Open vSwitch ships (TestEmbeddedSchema keeps it equal to the
// installed one's subset; go test ./pkg/ovsdb -update rewrites it). The
// server still checks every transaction against its own schema.
//
//go:embed vswitch-subset.ovsschema
var embeddedSchema []byte

// extraColumns are written by operations but not read into models.
var extraColumns = map[string][]string{tablePort: {"vlan_mode"}, tableInterface: {"ofport_request"}}

var schemaOnce = sync.OnceValues(func() (ovsdb.DatabaseSchema, error) {
	var s ovsdb.DatabaseSchema
	if err := json.Unmarshal(embeddedSchema, &s); err != nil {
		return s, fmt.Errorf("embedded schema: %w", err)
	}
	return s, nil
})

// modelColumns returns, per table, the columns the models and operations use.
func modelColumns() map[string][]string {
	out := map[string][]string{}
	for table, m := range map[string]any{tableRoot: OpenvSwitch{}, tableBridge: Bridge{},
		tablePort: Port{}, tableInterface: Interface{}} {
		t := reflect.TypeOf(m)
		for i := 0; i < t.NumField(); i++ {
			if col := t.Field(i).Tag.Get("ovsdb"); col != "" && col != "_uuid" {
				out[table] = append(out[table], col)
			}
		}
		out[table] = append(out[table], extraColumns[table]...)
		sort.Strings(out[table])
	}
	return out
}

// subsetSchema cuts a full Open_vSwitch schema down to modelColumns, as
// indented JSON with sorted keys.
func subsetSchema(full []byte) ([]byte, error) {
	var s struct {
		Name    string                                `json:"name"`
		Version string                                `json:"version"`
		Tables  map[string]map[string]json.RawMessage `json:"tables"`
	}
	if err := json.Unmarshal(full, &s); err != nil {
		return nil, fmt.Errorf("decoding schema: %w", err)
	}
	tables := map[string]any{}
	for table, cols := range modelColumns() {
		t, ok := s.Tables[table]
		if !ok {
			return nil, fmt.Errorf("schema %s has no table %s", s.Version, table)
		}
		var all map[string]json.RawMessage
		if err := json.Unmarshal(t["columns"], &all); err != nil {
			return nil, fmt.Errorf("table %s: %w", table, err)
		}
		kept := map[string]json.RawMessage{}
		for _, c := range cols {
			if all[c] == nil {
				return nil, fmt.Errorf("schema %s: table %s has no column %s", s.Version, table, c)
			}
			kept[c] = all[c]
		}
		out := map[string]any{"columns": kept}
		if raw, ok := t["isRoot"]; ok {
			out["isRoot"] = raw
		}
		tables[table] = out
	}
	b, err := json.MarshalIndent(map[string]any{"name": s.Name, "version": s.Version, "tables": tables}, "", "  ")
	if err != nil {
		return nil, err
	}
	return []byte(strings.TrimSpace(string(b)) + "\n"), nil
}
