// Command conformance reads the JUnit files of Kubernetes' e2e suite
// (e2e.test --report-dir) that hack/ovs-in-docker.sh conformance keeps, and
// prints what they say:
//
//	conformance report JUNIT                  the failures, the tests skipped at run time with
//	                                          their reason, and one line "passed=P failed=F skipped=S"
//	conformance table NAME=JUNIT [NAME=JUNIT]  a Markdown table of every test that ran in any of
//	                                          them: test, then its outcome in each (passed, FAILED,
//	                                          skipped: reason, or "not run"), and the totals
//
// A test filtered out by -focus or -skip is not a test that ran; one the
// suite skipped itself (a provider it is not, a feature the cluster has not)
// is reported with the suite's reason.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ovsflow/ovs-cni/test/cluster/conformance/junit"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: conformance report JUNIT | conformance table NAME=JUNIT...")
	}
	switch args[0] {
	case "report":
		if len(args) != 2 {
			return fmt.Errorf("report takes one JUnit file")
		}
		r, err := junit.Read(args[1])
		if err != nil {
			return err
		}
		return junit.Report(w, r)
	case "table":
		var runs []junit.Run
		for _, a := range args[1:] {
			name, path, ok := strings.Cut(a, "=")
			if !ok || name == "" || path == "" {
				return fmt.Errorf("table: %q: want NAME=JUNIT", a)
			}
			r, err := junit.Read(path)
			if err != nil {
				return err
			}
			runs = append(runs, junit.Run{Name: name, Results: r})
		}
		return junit.Table(w, runs)
	default:
		return fmt.Errorf("%q: want report or table", args[0])
	}
}
