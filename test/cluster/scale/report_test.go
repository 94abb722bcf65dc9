package main

import (
	"bytes"
	"strings"
	"testing"
)

// The report of a recorded run (testdata: bench -kube at c7645ab, the
// reference run without idle phases): each table, the idle one for the
// chain that had the phase, "–" for the other.
func TestReportOfARecordedRun(t *testing.T) {
	var b bytes.Buffer
	if err := printReport(&b, []string{"testdata/ovsflow.json", "testdata/reference.json"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| ovsflow | 3 × 110 | 0.3 | **48.2** |",
		"- ovsflow: the control plane's own pace: the last pod created at 3.9 s, the last marked for deletion at 7.5 s;",
		"### CPU-seconds of the harness's processes during the scale-up, by process",
		"### CPU-seconds of the harness's processes idle with all pods (110 pods per node), by process",
		"| containerd-shim | 9.2 | – |",
		"- ovsflow: ovs-vswitchd by thread (every node's; its main thread is named ovs-vswitchd): ovs-vswitchd 8.7, revalidator 0.2",
		"### CPU-seconds of the harness's processes during the scale-down, by process",
		"- reference: the node's own work (neither the CNI chain nor Open vSwitch nor the node agent): ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report has no %q:\n%s", want, out)
		}
	}
	if err := printReport(&b, nil); err == nil {
		t.Error("a report of no file: no error")
	}
}
