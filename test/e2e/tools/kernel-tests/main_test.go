package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The selection of the real suite: not empty, and its regexp runs exactly
// the tests of kernelDatapath, as go test -run matches top-level names.
func TestSuiteSelection(t *testing.T) {
	const dir = "../.."
	kernel, err := selection(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(kernel) == 0 {
		t.Fatal("empty selection")
	}
	re, err := regexp.Compile(runRegexp(kernel))
	if err != nil {
		t.Fatalf("the -test.run regexp: %v", err)
	}
	all := testsIn(t, dir)
	if len(all) <= len(kernel) {
		t.Errorf("%d tests selected of %d: want a subset", len(kernel), len(all))
	}
	for _, name := range all {
		if got, want := re.MatchString(name), slices.Contains(kernel, name); got != want {
			t.Errorf("%s: -test.run matches it %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"TestMain", kernel[0] + "X", "X" + kernel[0]} {
		if re.MatchString(name) {
			t.Errorf("-test.run matches %s", name)
		}
	}
}

// testsIn lists the top-level TestXxx functions of the package in dir
// (TestMain is none).
func testsIn(t *testing.T, dir string) []string {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") && fd.Name.Name != "TestMain" {
					names = append(names, fd.Name.Name)
				}
			}
		}
	}
	return names
}

// What the check refuses, on packages of two tests.
func TestSelectionRefuses(t *testing.T) {
	const tests = `package x

import "testing"

func TestMain(m *testing.M) {}
func TestA(t *testing.T)    {}
func TestB(t *testing.T)    {}
func TestHelper()           {}
`
	lists := func(kernel, any string) string {
		return `package x

type datapathGroup struct {
	why   string
	tests []string
}

var kernelDatapath = []datapathGroup{{"k", []string{` + kernel + `}}}

var anyDatapath = []datapathGroup{{why: "a", tests: []string{` + any + `}}}
`
	}
	for _, tc := range []struct {
		name, kernel, any string
		want              string // in the error; "" for none
	}{
		{"placed", `"TestA"`, `"TestB"`, ""},
		{"no such test", `"TestA", "TestC"`, `"TestB"`, "kernelDatapath names TestC, which is no test"},
		{"not a test", `"TestA", "TestHelper"`, `"TestB"`, "kernelDatapath names TestHelper, which is no test"},
		{"in neither", `"TestA"`, ``, "TestB is in neither"},
		{"in both", `"TestA", "TestB"`, `"TestB"`, "TestB is in kernelDatapath and again in anyDatapath"},
		{"empty selection", ``, `"TestA", "TestB"`, "kernelDatapath selects no test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range map[string]string{"x_test.go": tests, "datapath_test.go": lists(tc.kernel, tc.any)} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := selection(dir)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.want == "" && !slices.Equal(got, []string{"TestA"}):
				t.Fatalf("got %v, want [TestA]", got)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, %v; want an error saying %q", got, err, tc.want)
			}
		})
	}
}
