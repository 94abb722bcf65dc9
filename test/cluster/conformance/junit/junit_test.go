package junit

import (
	"bytes"
	"strings"
	"testing"
)

// The shape Ginkgo v2 writes for e2e.test (--report-dir): suite nodes, a
// passed test, one skipped at run time, one filtered out, one failed.
const sample = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="1" errors="0" failures="1" time="10">
  <testsuite name="Kubernetes e2e suite" tests="6" skipped="2" failures="1">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.03"></testcase>
    <testcase name="[It] [sig-network] HostPort validates that there is no conflict [LinuxOnly] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="20.5"></testcase>
    <testcase name="[It] [sig-network] DNS should provide DNS for the cluster [Provider:gce]" classname="Kubernetes e2e suite" status="skipped" time="0.1">
      <skipped message="skipped - Only supported for providers [gce] (not skeleton)"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] Deployment should work" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-network] Services should serve a basic endpoint | from pods [Conformance]" classname="Kubernetes e2e suite" status="failed" time="300">
      <failure message="timed out waiting&#xA;for the endpoint" type="failed">[FAILED] timed out</failure>
    </testcase>
    <testcase name="[It] [sig-network] NoSNAT Should be able to send traffic between Pods without SNAT" classname="Kubernetes e2e suite" status="failed" time="2.2">
      <failure message="" type="failed">[FAILED] Expected&#xA;    &lt;string&gt;: 198.18.0.159&#xA;to equal&#xA;    &lt;string&gt;: 192.0.2.196&#xA;In [It] at: k8s.io/kubernetes@v1.37.2/test/e2e/network/no_snat.go:99 @ 12/06/26 12:58:38.904&#xA;</failure>
      <system-err>the log</system-err>
    </testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="passed" time="0.01"></testcase>
  </testsuite>
</testsuites>`

func TestParse(t *testing.T) {
	r, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	if p, f, s := r.Count(); p != 1 || f != 2 || s != 1 {
		t.Errorf("passed=%d failed=%d skipped=%d, want 1 2 1 (%v)", p, f, s, r)
	}
	// e2e.test's own shape: an empty message, the text in the element.
	if o := r["[sig-network] NoSNAT Should be able to send traffic between Pods without SNAT"]; o.Reason != "Expected <string>: 198.18.0.159 to equal <string>: 192.0.2.196" {
		t.Errorf("the failure in the element's text: %+v", o)
	}
	if o := r["[sig-network] DNS should provide DNS for the cluster [Provider:gce]"]; o.Reason != "Only supported for providers [gce] (not skeleton)" {
		t.Errorf("the skip's reason: %q", o.Reason)
	}
	if o := r["[sig-network] Services should serve a basic endpoint | from pods [Conformance]"]; o.Status != "failed" || o.Reason != "timed out waiting" {
		t.Errorf("the failure: %+v", o)
	}
	if _, ok := r["[sig-apps] Deployment should work"]; ok {
		t.Error("a test filtered out counted as run")
	}
}

func TestTable(t *testing.T) {
	a, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	b := Results{"[sig-network] HostPort validates that there is no conflict [LinuxOnly] [Conformance]": {Status: "failed", Reason: "no answer"}}
	var w bytes.Buffer
	if err := Table(&w, []Run{{"ovsflow", a}, {"reference", b}}); err != nil {
		t.Fatal(err)
	}
	got := w.String()
	for _, want := range []string{
		"| test | ovsflow | reference |\n",
		"| [sig-network] HostPort validates that there is no conflict [LinuxOnly] [Conformance] | passed | **FAILED**: no answer |\n",
		`| [sig-network] Services should serve a basic endpoint \| from pods [Conformance] | **FAILED**: timed out waiting | not run |` + "\n",
		"| total | 1 passed, 2 failed, 1 skipped | 0 passed, 1 failed, 0 skipped |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table has no line %q:\n%s", want, got)
		}
	}
}
