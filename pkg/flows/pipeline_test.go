package flows

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// packageConsts returns the constants of the package's own files with a
// literal value: integers as uint64, strings unquoted.
func packageConsts(t *testing.T) map[string]any {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	consts := make(map[string]any)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				for i, id := range v.Names {
					if i >= len(v.Values) {
						continue
					}
					lit, ok := v.Values[i].(*ast.BasicLit)
					if !ok {
						continue
					}
					switch lit.Kind {
					case token.INT:
						n, err := strconv.ParseUint(lit.Value, 0, 64)
						if err != nil {
							t.Fatalf("%s: %v", id.Name, err)
						}
						consts[id.Name] = n
					case token.STRING:
						s, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatalf("%s: %v", id.Name, err)
						}
						consts[id.Name] = s
					}
				}
			}
		}
	}
	return consts
}

// TestDeclaration checks tables against the constants it names and its
// own rules: tables in order, priorities highest first, every Table*,
// Priority* and Reason* constant declared, each flow declared once.
func TestDeclaration(t *testing.T) {
	consts := packageConsts(t)
	seen := make(map[string]bool)
	reasons := make(map[string]string)
	for i, tb := range tables {
		seen[tb.Const] = true
		if got, ok := consts[tb.Const]; !ok || got != uint64(tb.ID) {
			t.Errorf("table %d: declared as %s, which is %v", tb.ID, tb.Const, got)
		}
		if i > 0 && tb.ID <= tables[i-1].ID {
			t.Errorf("table %d: declared after table %d", tb.ID, tables[i-1].ID)
		}
		if tb.Doc == "" || len(tb.Prios) == 0 {
			t.Errorf("table %d: no doc or no priorities", tb.ID)
		}
		for j, p := range tb.Prios {
			what := fmt.Sprintf("table %d, %s under %v", tb.ID, p.Const, p.Group)
			if seen[p.Const] && p.Doc == "" {
				// Shares the row of an earlier entry.
			} else if p.Doc == "" {
				t.Errorf("%s: no doc, and no earlier entry of its constant", what)
			}
			seen[p.Const] = true
			if got, ok := consts[p.Const]; !ok || got != uint64(p.Value) {
				t.Errorf("%s: priority %d, but the constant is %v", what, p.Value, got)
			}
			if j > 0 && p.Value > tb.Prios[j-1].Value {
				t.Errorf("%s: priority %d after %d", what, p.Value, tb.Prios[j-1].Value)
			}
			if p.Group == GroupOther {
				t.Errorf("%s: no cookie kind", what)
			}
			if (p.Name == "") == (len(p.Drops) == 0) {
				t.Errorf("%s: want a name or drops, got name %q and %d drops", what, p.Name, len(p.Drops))
			}
			if (p.Which != nil) != (len(p.Drops) > 1) {
				t.Errorf("%s: %d drops, Which set: %v", what, len(p.Drops), p.Which != nil)
			}
			if d := declared[flowKey{p.Group, tb.ID, p.Value}]; d != &tables[i].Prios[j] {
				t.Errorf("%s: declared twice", what)
			}
			for _, d := range p.Drops {
				if d.Reason == "" || d.Name == "" {
					t.Errorf("%s: drop %q named %q", what, d.Reason, d.Name)
				}
				if c, ok := reasons[d.Reason]; ok {
					t.Errorf("%s: reason %q declared by %s too", what, d.Reason, c)
				}
				reasons[d.Reason] = p.Const
			}
		}
	}
	for name, v := range consts {
		switch {
		case strings.HasPrefix(name, "Table"), strings.HasPrefix(name, "Priority"):
			if !seen[name] {
				t.Errorf("%s (%v): not declared in tables", name, v)
			}
		case strings.HasPrefix(name, "Reason"):
			if _, ok := reasons[v.(string)]; !ok {
				t.Errorf("%s (%q): no declared drop has it", name, v)
			}
		}
	}
}

// cell escapes s for a cell of a Markdown table.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// renderTables renders the Tables table of docs/design.md from tables.
func renderTables() string {
	var b strings.Builder
	b.WriteString("| table | name | what it holds |\n|---|---|---|\n")
	for _, tb := range tables {
		fmt.Fprintf(&b, "| %d | `%s` | %s |\n", tb.ID, tb.Const, cell(tb.Doc))
	}
	return b.String()
}

// renderPriorities renders the Priorities table of docs/design.md from
// tables: a row per entry with a doc, in table order, to which the later
// entries of its constant without one add their tables.
func renderPriorities() string {
	type row struct {
		tables    []string
		prio      uint16
		name, doc string
	}
	var rows []*row
	last := make(map[string]*row)
	for _, tb := range tables {
		id := strconv.Itoa(int(tb.ID))
		for _, p := range tb.Prios {
			r := last[p.Const]
			if p.Doc != "" || r == nil {
				r = &row{prio: p.Value, name: p.Const, doc: p.Doc}
				rows = append(rows, r)
				last[p.Const] = r
			}
			if !slices.Contains(r.tables, id) {
				r.tables = append(r.tables, id)
			}
		}
	}
	var b strings.Builder
	b.WriteString("| table | prio | name | flow |\n|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | `%s` | %s |\n", strings.Join(r.tables, ", "), r.prio, r.name, cell(r.doc))
	}
	return b.String()
}

// docTable returns where the first Markdown table after heading is in doc,
// its last newline included.
func docTable(doc, heading string) (start, end int, err error) {
	h := strings.Index(doc, "\n"+heading+"\n")
	if h < 0 {
		return 0, 0, fmt.Errorf("no heading %q", heading)
	}
	for i := h + len(heading) + 2; i < len(doc); {
		line, _, _ := strings.Cut(doc[i:], "\n")
		switch {
		case strings.HasPrefix(line, "#"):
			return 0, 0, fmt.Errorf("no table under %q", heading)
		case strings.HasPrefix(line, "|") && start == 0:
			start = i
		case !strings.HasPrefix(line, "|") && start != 0:
			return start, i, nil
		}
		i += len(line) + 1
	}
	if start == 0 {
		return 0, 0, fmt.Errorf("no table under %q", heading)
	}
	return start, len(doc), nil
}

// TestDesignDoc checks that the Tables and Priorities tables of
// docs/design.md are those tables renders, so that the doc follows the
// declaration. Run with OVSFLOW_UPDATE_DOCS=1 it rewrites them instead:
//
//	OVSFLOW_UPDATE_DOCS=1 go test ./pkg/flows -run TestDesignDoc
func TestDesignDoc(t *testing.T) {
	const path = "../../docs/design.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	update := os.Getenv("OVSFLOW_UPDATE_DOCS") == "1"
	doc, changed := string(b), false
	for _, sec := range []struct{ heading, table string }{
		{"### Tables", renderTables()},
		{"### Priorities", renderPriorities()},
	} {
		start, end, err := docTable(doc, sec.heading)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc[start:end] == sec.table {
			continue
		}
		if update {
			doc, changed = doc[:start]+sec.table+doc[end:], true
			continue
		}
		t.Errorf("%s, %q: the table differs from the declaration in pipeline.go (OVSFLOW_UPDATE_DOCS=1 go test ./pkg/flows -run TestDesignDoc rewrites it); want:\n%s",
			path, sec.heading, sec.table)
	}
	if changed {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(doc), fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the tables of %s", path)
	}
}
