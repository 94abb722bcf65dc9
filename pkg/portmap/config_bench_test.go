package portmap

import (
	"fmt"
	"strings"
	"testing"
)

// portmapConf is the config libcni hands to ovs-portmap: the chain's entry,
// runtimeConfig with n mappings, and the prevResult of ovs-bridge.
func portmapConf(n int) []byte {
	var m strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			m.WriteByte(',')
		}
		proto := "tcp"
		if i%2 == 1 {
			proto = "udp"
		}
		fmt.Fprintf(&m, `{"hostPort":%d,"containerPort":%d,"protocol":"%s"}`, 1+i, 1+i%1000, proto)
	}
	return []byte(`{"cniVersion":"1.0.0","name":"bench-ovs","type":"ovs-portmap","ovsdb":"unix:/run/ovsflow/bench/db.sock",
		"capabilities":{"portMappings":true},"runtimeConfig":{"portMappings":[` + m.String() + `]},
		"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"ovf0123456789ab","mac":"02:00:00:00:00:01"},
		{"name":"eth0","mac":"02:00:00:00:00:02","sandbox":"/run/netns/c1"}],
		"ips":[{"interface":1,"address":"198.18.0.5/16","gateway":"198.18.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}}`)
}

func BenchmarkLoadConf(b *testing.B) {
	for _, n := range []int{1, 100, 4096} {
		b.Run(fmt.Sprintf("mappings=%d", n), func(b *testing.B) {
			stdin := portmapConf(n)
			c, err := LoadConf(stdin)
			if err != nil {
				b.Fatalf("LoadConf: %v", err)
			}
			if len(c.Mappings) != n {
				b.Fatalf("got %d mappings, want %d", len(c.Mappings), n)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(stdin)))
			for b.Loop() {
				if _, err := LoadConf(stdin); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPrevResult adds what ADD does next with the config: parse the
// prevResult.
func BenchmarkPrevResult(b *testing.B) {
	stdin := portmapConf(1)
	b.ReportAllocs()
	for b.Loop() {
		c, err := LoadConf(stdin)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := prevResult(c); err != nil {
			b.Fatal(err)
		}
	}
}
