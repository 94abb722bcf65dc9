package ovsdb

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// The schema is the tests' alone: the client loads none (see the package
// comment). The file holds only the tables and columns the models and
// operations use, cut from the schema Open vSwitch ships; TestEmbeddedSchema
// keeps it equal to the installed one's subset (go test ./pkg/ovsdb -update
// rewrites it), so that the tests that check the models and the operations
// against it also run where Open vSwitch is not installed.
//
//go:embed vswitch-subset.ovsschema
var embeddedSchema []byte

// extraColumns are written by operations but not read into models.
var extraColumns = map[string][]string{tablePort: {"vlan_mode", "qos"}, tableInterface: {"ofport_request", "options"}, tableQoS: {"queues"}, tableRoot: {"other_config"}}

// schemaOnce is the embedded schema, decoded.
var schemaOnce = sync.OnceValues(func() (ovsdb.DatabaseSchema, error) {
	var s ovsdb.DatabaseSchema
	if err := json.Unmarshal(embeddedSchema, &s); err != nil {
		return s, fmt.Errorf("embedded schema: %w", err)
	}
	return s, nil
})

// clientDBModel is libovsdb's client model of the hand-written models.
func clientDBModel() (model.ClientDBModel, error) {
	return model.NewClientDBModel("Open_vSwitch", map[string]model.Model{
		tableRoot:      &OpenvSwitch{},
		tableBridge:    &Bridge{},
		tablePort:      &Port{},
		tableInterface: &Interface{},
		tableQoS:       &QoS{},
		tableQueue:     &Queue{},
	})
}

// databaseModel is libovsdb's model of the hand-written models on the
// embedded schema, which libovsdb's mapper needs.
func databaseModel(t testing.TB) model.DatabaseModel {
	t.Helper()
	s, err := schemaOnce()
	if err != nil {
		t.Fatal(err)
	}
	m, err := clientDBModel()
	if err != nil {
		t.Fatal(err)
	}
	db, errs := model.NewDatabaseModel(s, m)
	if len(errs) > 0 {
		t.Fatalf("models do not match the embedded schema: %v", errs)
	}
	return db
}

// modelColumns returns, per table, the columns the models and operations use.
func modelColumns() map[string][]string {
	out := map[string][]string{}
	for table, m := range map[string]any{tableRoot: OpenvSwitch{}, tableBridge: Bridge{},
		tablePort: Port{}, tableInterface: Interface{}, tableQoS: QoS{}, tableQueue: Queue{}} {
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
