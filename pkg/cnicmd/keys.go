package cnicmd

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
)

// warnMisspelled writes a warning to w for each top-level key of the network
// config that conf does not know but that is close (an edit or two) to one
// it does: "capabilites", "portSecurty", "brige". Unknown keys stay
// ignored, as the CNI conventions have it (runtimes and other plugins add
// their own); the warning is for the typo that would otherwise pass
// silently. Keys far from every known one get none.
func warnMisspelled(w io.Writer, stdin []byte, conf any) {
	var top map[string]json.RawMessage
	if json.Unmarshal(stdin, &top) != nil {
		return
	}
	known := jsonKeys(reflect.TypeOf(conf))
	var plugin string
	_ = json.Unmarshal(top["type"], &plugin)
	if plugin == "" {
		plugin = "plugin"
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if known[k] {
			continue
		}
		if near := nearest(k, known); near != "" {
			fmt.Fprintf(w, "%s: warning: unknown key %q ignored; did you mean %q?\n", plugin, k, near)
		}
	}
}

// jsonKeys are the JSON keys of struct type t (a pointer to one), with
// those of its embedded structs.
func jsonKeys(t reflect.Type) map[string]bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	keys := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return keys
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			for k := range jsonKeys(f.Type) {
				keys[k] = true
			}
			continue
		}
		if name == "" {
			if !f.IsExported() {
				continue
			}
			name = f.Name
		}
		keys[name] = true
	}
	return keys
}

// nearest is the known key within a small edit distance of k (case
// ignored), or "": 1 for keys of up to 5 letters, 2 beyond.
func nearest(k string, known map[string]bool) string {
	limit := 1
	if len(k) > 5 {
		limit = 2
	}
	best, bestD := "", limit+1
	for c := range known {
		if d := distance(strings.ToLower(k), strings.ToLower(c)); d < bestD || (d == bestD && c < best) {
			best, bestD = c, d
		}
	}
	if bestD > limit {
		return ""
	}
	return best
}

// distance is the Levenshtein distance of a and b (bytes: the keys are
// ASCII).
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
