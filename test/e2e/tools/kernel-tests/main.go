// Command kernel-tests prints the -test.run regexp of the test/e2e tests
// that the kernel datapath guest runs (hack/ovs-vm.sh test e2e): the names
// in kernelDatapath of test/e2e/datapath_test.go, read from the source.
// It fails when a name there is no test of the package, a test is in
// neither list or in both, or the selection is empty.
//
//	go run ./test/e2e/tools/kernel-tests [-dir test/e2e]
package main

import (
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	dir := flag.String("dir", "test/e2e", "the package of the end-to-end tests")
	flag.Parse()
	tests, err := selection(*dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kernel-tests: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(runRegexp(tests))
}

// runRegexp matches exactly the named top-level tests (and their subtests).
func runRegexp(tests []string) string {
	q := make([]string, len(tests))
	for i, t := range tests {
		q[i] = regexp.QuoteMeta(t)
	}
	return "^(" + strings.Join(q, "|") + ")$"
}

// The lists of datapath_test.go.
const (
	kernelList = "kernelDatapath"
	anyList    = "anyDatapath"
)

// selection reads the tests of the package in dir and its two lists, checks
// that they place every test exactly once, and returns kernelDatapath's,
// sorted.
func selection(dir string) ([]string, error) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", dir, err)
	}
	exists := map[string]bool{}
	lists := map[string][]string{}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if isTest(d) {
						exists[d.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						vs, ok := s.(*ast.ValueSpec)
						if !ok {
							continue
						}
						for i, n := range vs.Names {
							if (n.Name == kernelList || n.Name == anyList) && i < len(vs.Values) {
								names, err := listNames(vs.Values[i])
								if err != nil {
									return nil, fmt.Errorf("%s: %s: %w", fset.Position(n.Pos()), n.Name, err)
								}
								lists[n.Name] = append(lists[n.Name], names...)
							}
						}
					}
				}
			}
		}
	}
	if len(exists) == 0 {
		return nil, fmt.Errorf("no tests in %s", dir)
	}
	var errs []error
	placed := map[string]string{}
	for _, list := range []string{kernelList, anyList} {
		for _, name := range lists[list] {
			if !exists[name] {
				errs = append(errs, fmt.Errorf("%s names %s, which is no test of %s", list, name, dir))
			}
			if prev, ok := placed[name]; ok {
				errs = append(errs, fmt.Errorf("%s is in %s and again in %s", name, prev, list))
			}
			placed[name] = list
		}
	}
	var unplaced []string
	for name := range exists {
		if placed[name] == "" {
			unplaced = append(unplaced, name)
		}
	}
	slices.Sort(unplaced)
	for _, name := range unplaced {
		errs = append(errs, fmt.Errorf("%s is in neither %s nor %s (datapath_test.go): place it", name, kernelList, anyList))
	}
	if len(lists[kernelList]) == 0 {
		errs = append(errs, fmt.Errorf("%s selects no test", kernelList))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	kernel := slices.Clone(lists[kernelList])
	slices.Sort(kernel)
	return kernel, nil
}

// isTest reports whether d is a top-level test function: TestXxx(t *testing.T),
// TestMain excluded.
func isTest(d *ast.FuncDecl) bool {
	if d.Recv != nil || !strings.HasPrefix(d.Name.Name, "Test") || d.Name.Name == "TestMain" {
		return false
	}
	ps := d.Type.Params.List
	if len(ps) != 1 {
		return false
	}
	star, ok := ps[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "T"
}

// listNames returns the test names of a []datapathGroup literal: the
// string literals of each group's tests.
func listNames(e ast.Expr) ([]string, error) {
	groups, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil, fmt.Errorf("want a []datapathGroup literal")
	}
	var names []string
	for _, g := range groups.Elts {
		group, ok := g.(*ast.CompositeLit)
		if !ok || len(group.Elts) != 2 {
			return nil, fmt.Errorf("want groups of {why, tests}")
		}
		tests, ok := group.Elts[1].(*ast.CompositeLit)
		if kv, isKV := group.Elts[1].(*ast.KeyValueExpr); isKV {
			tests, ok = kv.Value.(*ast.CompositeLit)
		}
		if !ok {
			return nil, fmt.Errorf("want a []string literal of test names")
		}
		for _, t := range tests.Elts {
			lit, ok := t.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return nil, fmt.Errorf("want test names as string literals")
			}
			name, err := strconv.Unquote(lit.Value)
			if err != nil {
				return nil, err
			}
			names = append(names, name)
		}
	}
	return names, nil
}
