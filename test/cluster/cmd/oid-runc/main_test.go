package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestRewrite(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(p string) map[string]any {
		var v map[string]any
		b, _ := os.ReadFile(p)
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	os.Mkdir(filepath.Join(dir, "b"), 0o755)
	cfg := write("b/config.json", `{"process":{"oomScoreAdj":-997,"args":["/x"]},
		"linux":{"resources":{"hugepageLimits":[{"pageSize":"2MB","limit":0}],"memory":{"limit":1}}}}`)
	proc := write("p.json", `{"oomScoreAdj":-5,"args":["sh"]}`)
	kept := write("k.json", `{"oomScoreAdj":1000}`)
	before, _ := os.ReadFile(kept)
	if err := rewrite([]string{"--root", "/r", "create", "--bundle", filepath.Join(dir, "b"), "--pid-file", "x", "id"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := rewrite([]string{"exec", "--process=" + proc, "id"}, -3); err != nil {
		t.Fatal(err)
	}
	if err := rewrite([]string{"exec", "-p", kept, "id"}, 0); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"process": map[string]any{"oomScoreAdj": 0.0, "args": []any{"/x"}},
		"linux": map[string]any{"resources": map[string]any{"memory": map[string]any{"limit": 1.0}}}}
	if got := read(cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("config.json: got %v, want %v", got, want)
	}
	if got := read(proc)["oomScoreAdj"]; got != -3.0 {
		t.Errorf("process: oomScoreAdj %v, want -3 (this process's own)", got)
	}
	if after, _ := os.ReadFile(kept); string(after) != string(before) {
		t.Errorf("a score above the node's was rewritten: %s", after)
	}
}
