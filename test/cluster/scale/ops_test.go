package main

import "testing"

// kubelet's runtime operations and containerd's sandbox network timers, as
// their metrics endpoints write them, summed over two nodes.
func TestAddOps(t *testing.T) {
	kubelet := `# HELP kubelet_runtime_operations_duration_seconds [ALPHA] Duration in seconds of runtime operations. Broken down by operation type.
# TYPE kubelet_runtime_operations_duration_seconds histogram
kubelet_runtime_operations_duration_seconds_bucket{operation_type="stop_podsandbox",le="0.005"} 0
kubelet_runtime_operations_duration_seconds_bucket{operation_type="stop_podsandbox",le="+Inf"} 4
kubelet_runtime_operations_duration_seconds_sum{operation_type="stop_podsandbox"} 2.5
kubelet_runtime_operations_duration_seconds_count{operation_type="stop_podsandbox"} 4
kubelet_runtime_operations_duration_seconds_bucket{operation_type="version",le="+Inf"} 9
kubelet_runtime_operations_duration_seconds_sum{operation_type="version"} 0.01
kubelet_runtime_operations_duration_seconds_count{operation_type="version"} 9
# HELP kubelet_runtime_operations_errors_total [ALPHA] Cumulative number of runtime operation errors by operation type.
# TYPE kubelet_runtime_operations_errors_total counter
kubelet_runtime_operations_errors_total{operation_type="stop_podsandbox"} 1
`
	out := map[string][3]float64{}
	for range 2 {
		if err := addOps(out, kubelet, "kubelet_runtime_operations_duration_seconds", "kubelet_runtime_operations_errors_total", "operation_type"); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := out["stop_podsandbox"], [3]float64{5, 8, 2}; got != want {
		t.Errorf("stop_podsandbox: got %v, want %v", got, want)
	}
	if got, want := out["version"], [3]float64{0.02, 18, 0}; got != want {
		t.Errorf("version: got %v, want %v", got, want)
	}
	containerd := `# TYPE containerd_cri_sandbox_create_network_seconds histogram
containerd_cri_sandbox_create_network_seconds_bucket{le="+Inf"} 3
containerd_cri_sandbox_create_network_seconds_sum 0.75
containerd_cri_sandbox_create_network_seconds_count 3
`
	if err := addOps(out, containerd, "containerd_cri_sandbox_create_network_seconds", "", ""); err != nil {
		t.Fatal(err)
	}
	if got, want := out["sandbox_create_network"], [3]float64{0.75, 3, 0}; got != want {
		t.Errorf("sandbox_create_network: got %v, want %v", got, want)
	}
	d := opDelta(map[string][3]float64{"stop_podsandbox": {1, 2, 1}}, out)["stop_podsandbox"]
	if d.Count != 6 || d.Errors != 1 || d.Mean != 4.0/6 {
		t.Errorf("opDelta: got %+v", d)
	}
	if err := addOps(out, "not the text format {", "x", "", ""); err == nil {
		t.Error("a text that does not parse: no error")
	}
}
