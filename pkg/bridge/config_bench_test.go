package bridge

import (
	"fmt"
	"testing"
)

// The config as libcni hands it to ovs-bridge in a chain with host-local
// (hack/bench's chain A), and worst cases: the largest trunk range and a
// MAC from every source.
var benchConfs = []struct{ name, conf, cniArgs string }{
	{"chain", `{"cniVersion":"1.0.0","name":"bench-ovs","type":"ovs-bridge","bridge":"bbr0",
		"ovsdb":"unix:/run/ovsflow/bench/db.sock","isGateway":true,
		"ipam":{"type":"host-local","dataDir":"/tmp/ipam","ranges":[[{"subnet":"198.18.0.0/16","gateway":"198.18.0.1"}]],
		"routes":[{"dst":"0.0.0.0/0"}]}}`, "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc"},
	{"trunk 1-4094", `{"cniVersion":"1.0.0","name":"n","type":"ovs-bridge","bridge":"br0","trunk":[{"minID":1,"maxID":4094}]}`, ""},
	{"mac everywhere", `{"cniVersion":"1.0.0","name":"n","type":"ovs-bridge","bridge":"br0",
		"args":{"cni":{"mac":"02:00:00:00:00:02"}},"runtimeConfig":{"mac":"02:00:00:00:00:03"}}`, "MAC=02:00:00:00:00:01"},
}

func BenchmarkLoadConf(b *testing.B) {
	for _, bc := range benchConfs {
		b.Run(bc.name, func(b *testing.B) {
			stdin := []byte(bc.conf)
			if _, err := LoadConf(stdin, bc.cniArgs); err != nil {
				b.Fatalf("LoadConf: %v", err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(stdin)))
			for b.Loop() {
				if _, err := LoadConf(stdin, bc.cniArgs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoadConfMappings decodes Mesos port mappings, which ovs-bridge
// publishes itself.
func BenchmarkLoadConfMappings(b *testing.B) {
	for _, n := range []int{1, 100, 4096} {
		b.Run(fmt.Sprintf("mappings=%d", n), func(b *testing.B) {
			conf := `{"cniVersion":"1.0.0","name":"n","type":"ovs-bridge","bridge":"br0","args":{"org.apache.mesos":{"network_info":{"port_mappings":[`
			for i := 0; i < n; i++ {
				if i > 0 {
					conf += ","
				}
				conf += fmt.Sprintf(`{"host_port":%d,"container_port":80,"protocol":"tcp"}`, 1+i)
			}
			stdin := []byte(conf + `]}}}}`)
			if _, err := LoadConf(stdin, ""); err != nil {
				b.Fatalf("LoadConf: %v", err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := LoadConf(stdin, ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
