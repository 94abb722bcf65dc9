package flows

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// source is what the package's own files declare, read from their source.
type source struct {
	// consts are the constants of a literal or constant-expression value:
	// integers as uint64, strings unquoted; types their declared types.
	consts map[string]any
	types  map[string]string
	vars   map[string]ast.Expr // package-level variables' values
	funcs  map[string]bool     // functions, not methods
}

// packageSource reads the package's own files.
func packageSource(t *testing.T) source {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	src := source{consts: make(map[string]any), types: make(map[string]string),
		vars: make(map[string]ast.Expr), funcs: make(map[string]bool)}
	exprs := make(map[string]ast.Expr)
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
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				src.funcs[fd.Name.Name] = true
			}
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST && g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				for i, id := range v.Names {
					if i >= len(v.Values) {
						continue
					}
					if g.Tok == token.VAR {
						src.vars[id.Name] = v.Values[i]
						continue
					}
					exprs[id.Name] = v.Values[i]
					if typ, ok := v.Type.(*ast.Ident); ok {
						src.types[id.Name] = typ.Name
					}
				}
			}
		}
	}
	// Constants may name others declared later: evaluate until nothing
	// more can be.
	known := make(map[string]constant.Value)
	for progress := true; progress; {
		progress = false
		for name, e := range exprs {
			if _, ok := known[name]; ok {
				continue
			}
			if v := constValue(e, known); v != nil {
				known[name], progress = v, true
			}
		}
	}
	for name, v := range known {
		switch v.Kind() {
		case constant.Int:
			n, ok := constant.Uint64Val(v)
			if !ok {
				t.Fatalf("%s: %v is not a uint64", name, v)
			}
			src.consts[name] = n
		case constant.String:
			src.consts[name] = constant.StringVal(v)
		}
	}
	return src
}

// constValue evaluates a constant expression of literals, constants in
// known and integer operators, or returns nil.
func constValue(e ast.Expr, known map[string]constant.Value) constant.Value {
	switch e := e.(type) {
	case *ast.BasicLit:
		if v := constant.MakeFromLiteral(e.Value, e.Kind, 0); v.Kind() != constant.Unknown {
			return v
		}
	case *ast.Ident:
		return known[e.Name]
	case *ast.ParenExpr:
		return constValue(e.X, known)
	case *ast.BinaryExpr:
		x, y := constValue(e.X, known), constValue(e.Y, known)
		if x == nil || y == nil || x.Kind() != constant.Int || y.Kind() != constant.Int {
			return nil
		}
		switch e.Op {
		case token.SHL, token.SHR:
			if s, ok := constant.Uint64Val(y); ok {
				return constant.Shift(x, e.Op, uint(s))
			}
		case token.ADD, token.SUB, token.MUL, token.OR, token.AND, token.XOR, token.AND_NOT:
			return constant.BinaryOp(x, e.Op, y)
		}
	}
	return nil
}

// TestDeclaration checks tables against the constants it names and its
// own rules: tables in order, priorities highest first, every Table*,
// Priority* and Reason* constant declared, each flow declared once.
func TestDeclaration(t *testing.T) {
	consts := packageSource(t).consts
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

// TestLayout checks layout against the names it gives, as read from the
// source: each zone, limit, cookie and meter constant has its entry's
// value, each field variable its bits, each function exists; the cookie
// fields tile its 64 bits; each key is Pipeline's; and every exported
// *Zone, *Limit, Label*, Reg*, CTMark* and CookieKind* name is declared,
// once.
func TestLayout(t *testing.T) {
	src := packageSource(t)
	keys := make(map[string]bool)
	for f := range reflect.TypeFor[Pipeline]().Fields() {
		key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		keys[key] = true
	}
	seen := make(map[string]bool)
	var cookieBits uint64
	cookieFields := make(map[[2]uint8]bool)
	for _, e := range layout {
		what := fmt.Sprintf("layout %s", strings.Join(e.Names, ", "))
		if len(e.Names) == 0 || e.Doc == "" {
			t.Errorf("%s: no names or no doc", what)
			continue
		}
		for _, n := range e.Names {
			if seen[n] {
				t.Errorf("%s: %s declared twice", what, n)
			}
			seen[n] = true
		}
		if e.Key != "" && !keys[e.Key] {
			t.Errorf("%s: key %q is none of Pipeline's", what, e.Key)
		}
		name := e.Names[0]
		got, ok := src.consts[name]
		switch e.Kind {
		case layoutZone, layoutLimit:
			if !ok || got != e.Value {
				t.Errorf("%s: declared %d, but the constant is %v", what, e.Value, got)
			}
		case layoutField:
			if sf, ok := subfieldOf(src.vars[name]); !ok || sf != e.Field {
				t.Errorf("%s: declared %v, but the variable is %v", what, e.Field, sf)
			}
			if fieldText(e.Field) == "" {
				t.Errorf("%s: %v is not ct_label, ct_mark or a register", what, e.Field)
			}
		case layoutCookie:
			if e.Lo > e.Hi || e.Hi > 63 || e.Fixed && e.Value>>(e.Hi-e.Lo+1) != 0 {
				t.Errorf("%s: value %#x in bits %d..%d", what, e.Value, e.Lo, e.Hi)
				continue
			}
			mask := (uint64(1)<<(e.Hi-e.Lo+1) - 1) << e.Lo
			if !cookieFields[[2]uint8{e.Lo, e.Hi}] && cookieBits&mask != 0 {
				t.Errorf("%s: bits %d..%d overlap another field", what, e.Lo, e.Hi)
			}
			cookieFields[[2]uint8{e.Lo, e.Hi}], cookieBits = true, cookieBits|mask
			// A Cookie constant is a whole cookie (the field's value in
			// place, or its mask); any other is a kind, the value of the
			// field at CookieKindShift.
			want := e.Value
			switch {
			case src.types[name] == "Cookie" && e.Fixed:
				want = e.Value << e.Lo
			case src.types[name] == "Cookie":
				want = mask
			case !e.Fixed || uint64(e.Lo) != src.consts["CookieKindShift"]:
				t.Errorf("%s: not a Cookie constant, and not a kind at CookieKindShift", what)
			}
			seen["CookieKindShift"] = true
			if !ok || got != want {
				t.Errorf("%s: declared %#x, but the constant is %#v", what, want, got)
			}
		case layoutMeter:
			if e.Form != "" {
				if len(e.Names) != 1 || !src.funcs[name] {
					t.Errorf("%s: want the one function of form %q", what, e.Form)
				}
				continue
			}
			first := e.Value << e.Lo
			if !e.Fixed || e.Hi != 31 || len(e.Names) != 2 || e.Value>>(e.Hi-e.Lo+1) != 0 {
				t.Errorf("%s: want a fixed value of the top bits of the id, and its first and last", what)
				continue
			}
			if got, ok := src.consts[e.Names[0]]; !ok || got != first {
				t.Errorf("%s: first %#x, but %s is %#v", what, first, e.Names[0], got)
			}
			if got, ok := src.consts[e.Names[1]]; !ok || got != first|(1<<e.Lo-1) {
				t.Errorf("%s: last %#x, but %s is %#v", what, first|(1<<e.Lo-1), e.Names[1], got)
			}
		default:
			t.Errorf("%s: kind %d", what, e.Kind)
		}
	}
	if cookieBits != ^uint64(0) {
		t.Errorf("the cookie fields cover %#x, want every bit", cookieBits)
	}
	names := slices.Concat(slices.Collect(maps.Keys(src.consts)), slices.Collect(maps.Keys(src.vars)))
	for _, name := range names {
		if !token.IsExported(name) || seen[name] {
			continue
		}
		if strings.HasSuffix(name, "Zone") || strings.HasSuffix(name, "Limit") ||
			strings.HasPrefix(name, "Label") || strings.HasPrefix(name, "Reg") ||
			strings.HasPrefix(name, "CTMark") || strings.HasPrefix(name, "CookieKind") {
			t.Errorf("%s: not declared in layout", name)
		}
	}
}

// subfieldOf evaluates a variable's value of the form F.Bits(lo, hi) or
// F.Bit(n), F being openflow.FieldCTLabel, openflow.FieldCTMark or
// openflow.Reg(n).
func subfieldOf(e ast.Expr) (openflow.Subfield, bool) {
	num := func(e ast.Expr) (uint16, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.INT {
			return 0, false
		}
		n, err := strconv.ParseUint(lit.Value, 0, 16)
		return uint16(n), err == nil
	}
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return openflow.Subfield{}, false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return openflow.Subfield{}, false
	}
	var f openflow.Field
	switch x := sel.X.(type) {
	case *ast.SelectorExpr:
		switch types.ExprString(x) {
		case "openflow.FieldCTLabel":
			f = openflow.FieldCTLabel
		case "openflow.FieldCTMark":
			f = openflow.FieldCTMark
		default:
			return openflow.Subfield{}, false
		}
	case *ast.CallExpr:
		if types.ExprString(x.Fun) != "openflow.Reg" || len(x.Args) != 1 {
			return openflow.Subfield{}, false
		}
		n, ok := num(x.Args[0])
		if !ok {
			return openflow.Subfield{}, false
		}
		f = openflow.Reg(int(n))
	default:
		return openflow.Subfield{}, false
	}
	var args []uint16
	for _, a := range call.Args {
		n, ok := num(a)
		if !ok {
			return openflow.Subfield{}, false
		}
		args = append(args, n)
	}
	switch {
	case sel.Sel.Name == "Bits" && len(args) == 2:
		return f.Bits(args[0], args[1]), true
	case sel.Sel.Name == "Bit" && len(args) == 1:
		return f.Bit(args[0]), true
	}
	return openflow.Subfield{}, false
}

// fieldText renders s as ovs-ofctl names it in a flow (ct_label[0..47],
// reg1[0]), or "" for another field.
func fieldText(s openflow.Subfield) string {
	var name string
	switch s.Field {
	case openflow.FieldCTLabel:
		name = "ct_label"
	case openflow.FieldCTMark:
		name = "ct_mark"
	default:
		for n := range 16 {
			if s.Field == openflow.Reg(n) {
				name = fmt.Sprintf("reg%d", n)
			}
		}
	}
	switch {
	case name == "":
		return ""
	case s.Bits == 1:
		return fmt.Sprintf("%s[%d]", name, s.Offset)
	}
	return fmt.Sprintf("%s[%d..%d]", name, s.Offset, s.Offset+s.Bits-1)
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

// renderLayout renders a layout table of docs/design.md from the entries
// of layout of the given kinds.
func renderLayout(kinds ...layoutKind) string {
	bits := func(field string, e layoutDecl) string {
		f := fmt.Sprintf("`%s[%d..%d]`", field, e.Lo, e.Hi)
		switch {
		case !e.Fixed:
			return f
		case e.Value < 10:
			return fmt.Sprintf("%s = %d", f, e.Value)
		}
		return fmt.Sprintf("%s = 0x%0*x", f, (e.Hi-e.Lo+4)/4, e.Value)
	}
	var b strings.Builder
	b.WriteString("| field | name | purpose |\n|---|---|---|\n")
	for _, e := range layout {
		if !slices.Contains(kinds, e.Kind) {
			continue
		}
		var field string
		switch e.Kind {
		case layoutZone:
			field = fmt.Sprintf("zone %d", e.Value)
		case layoutLimit:
			field = fmt.Sprintf("limit %d", e.Value)
		case layoutField:
			field = "`" + fieldText(e.Field) + "`"
		case layoutCookie:
			field = bits("cookie", e)
		case layoutMeter:
			field = bits("meter", e)
			if e.Form != "" {
				field = "meter = `" + e.Form + "`"
			}
		}
		names := "`" + strings.Join(e.Names, "`-`") + "`"
		if e.Key != "" {
			names += " (`" + e.Key + "`)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", cell(field), names, cell(e.Doc))
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

// TestDesignDoc checks that the Tables, Priorities, Zones and Cookies
// tables of docs/design.md are those tables and layout render, so that the
// doc follows the declaration. Run with OVSFLOW_UPDATE_DOCS=1 it rewrites
// them instead:
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
		{"### Zones, limits, registers, labels, meters", renderLayout(layoutZone, layoutLimit, layoutField, layoutMeter)},
		{"### Cookies", renderLayout(layoutCookie)},
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
