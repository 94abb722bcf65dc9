// Package junit reads the JUnit file Ginkgo writes for Kubernetes' e2e
// suite and says, per test, what became of it.
package junit

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Outcome is what became of one test.
type Outcome struct {
	Status string // passed, failed, skipped (at run time); also panicked, interrupted, timedout, aborted
	Reason string // a skip's reason, a failure's message (its first line)
	Secs   float64
}

// Results maps the tests that ran (not filtered out) to their outcome.
type Results map[string]Outcome

// Run is one JUnit file under a name (the chain it ran on).
type Run struct {
	Name    string
	Results Results
}

type file struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Status  string  `xml:"status,attr"`
			Time    float64 `xml:"time,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Body    string `xml:",chardata"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// skipPrefix starts the message of a test the suite skipped itself; a test
// filtered out says "skipped" alone.
const skipPrefix = "skipped - "

// Read reads the tests of a JUnit file that ran: the suite's own nodes
// (BeforeSuite, ReportAfterSuite) count when they did not pass.
func Read(path string) (Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the JUnit file: %w", err)
	}
	return Parse(b)
}

// Parse is Read of the file's bytes.
func Parse(b []byte) (Results, error) {
	var f file
	if err := xml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("parsing the JUnit file: %w", err)
	}
	r := Results{}
	for _, s := range f.Suites {
		for _, c := range s.Cases {
			name, isTest := strings.CutPrefix(c.Name, "[It] ")
			o := Outcome{Status: c.Status, Secs: c.Time}
			switch {
			case c.Status == "skipped":
				if c.Skipped == nil || !strings.HasPrefix(c.Skipped.Message, skipPrefix) {
					continue // filtered out
				}
				o.Reason = strings.TrimPrefix(c.Skipped.Message, skipPrefix)
			case c.Status == "passed":
				if !isTest {
					continue
				}
			case c.Failure != nil:
				o.Reason = failureReason(c.Failure.Message, c.Failure.Body)
			}
			if prev, ok := r[name]; ok && prev.Status != "passed" {
				continue // a suite node's first failure stands
			}
			r[name] = o
		}
	}
	return r, nil
}

// failureReason is a failure's reason on one line: its message's first
// line; else (e2e.test leaves the message empty) its text up to where
// Ginkgo says where it failed ("In [It] at: ..."), without the
// "[FAILED] " mark, its white space squeezed, at most maxReason bytes.
func failureReason(message, body string) string {
	if r, _, _ := strings.Cut(message, "\n"); strings.TrimSpace(r) != "" {
		return r
	}
	body, _, _ = strings.Cut(body, "\nIn [")
	r := strings.Join(strings.Fields(strings.TrimPrefix(strings.TrimSpace(body), "[FAILED] ")), " ")
	if len(r) > maxReason {
		r = r[:maxReason] + "..."
	}
	return r
}

const maxReason = 200

// Count says how many tests passed, failed (any status but passed and
// skipped) and were skipped at run time.
func (r Results) Count() (passed, failed, skipped int) {
	for _, o := range r {
		switch o.Status {
		case "passed":
			passed++
		case "skipped":
			skipped++
		default:
			failed++
		}
	}
	return
}

func (r Results) names() []string {
	n := make([]string, 0, len(r))
	for k := range r {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Report writes the failures, the skips with their reason, and the counts.
func Report(w io.Writer, r Results) error {
	for _, n := range r.names() {
		if o := r[n]; o.Status != "passed" {
			fmt.Fprintf(w, "  %s: %s: %s\n", o.Status, n, o.Reason)
		}
	}
	p, f, s := r.Count()
	_, err := fmt.Fprintf(w, "passed=%d failed=%d skipped=%d\n", p, f, s)
	return err
}

// cell is a test's outcome in a table row.
func cell(o Outcome, ok bool) string {
	switch {
	case !ok:
		return "not run"
	case o.Status == "passed":
		return "passed"
	case o.Status == "skipped":
		return "skipped: " + o.Reason
	default:
		return "**" + strings.ToUpper(o.Status) + "**: " + o.Reason
	}
}

// Table writes one Markdown row per test that ran in any run, its outcome
// in each, and a row of totals.
func Table(w io.Writer, runs []Run) error {
	all := Results{}
	head, rule := "| test |", "|---|"
	for _, r := range runs {
		for n, o := range r.Results {
			all[n] = o
		}
		head += " " + r.Name + " |"
		rule += "---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	for _, n := range all.names() {
		row := "| " + md(n) + " |"
		for _, r := range runs {
			o, ok := r.Results[n]
			row += " " + md(cell(o, ok)) + " |"
		}
		fmt.Fprintln(w, row)
	}
	row := "| total |"
	for _, r := range runs {
		p, f, s := r.Results.Count()
		row += fmt.Sprintf(" %d passed, %d failed, %d skipped |", p, f, s)
	}
	_, err := fmt.Fprintln(w, row)
	return err
}

// md keeps a table cell one cell: no pipe, no line break.
func md(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}
