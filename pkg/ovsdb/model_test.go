package ovsdb

import (
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// The hand-written models must match the schema Open vSwitch ships.
func TestModelsMatchVswitchSchema(t *testing.T) {
	const path = "/usr/share/openvswitch/vswitch.ovsschema"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("SKIPPED: %s not installed (openvswitch-common): %v", path, err)
	}
	var schema ovsdb.DatabaseSchema
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	m, err := clientDBModel()
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := model.NewDatabaseModel(schema, m); len(errs) > 0 {
		t.Fatalf("models do not match %s: %v", path, errs)
	}
}

var update = flag.Bool("update", false, "rewrite vswitch-subset.ovsschema from the installed schema")

// The embedded schema is the installed schema's subset, column for column.
func TestEmbeddedSchema(t *testing.T) {
	const path = "/usr/share/openvswitch/vswitch.ovsschema"
	full, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("SKIPPED: %s not installed (openvswitch-common): %v", path, err)
	}
	want, err := subsetSchema(full)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("vswitch-subset.ovsschema", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if string(want) != string(embeddedSchema) {
		t.Fatalf("vswitch-subset.ovsschema differs from the subset of %s: run go test ./pkg/ovsdb -run TestEmbeddedSchema -update\ngot:\n%s\nwant:\n%s", path, embeddedSchema, want)
	}
}

// The models fit the embedded schema, so that the tests can check the
// decoder and the operations against it even where Open vSwitch is not
// installed.
func TestModelsMatchEmbeddedSchema(t *testing.T) {
	databaseModel(t)
}
