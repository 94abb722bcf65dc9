package flows

import (
	"fmt"
	"net/netip"
	"testing"
)

func BenchmarkAttachmentFlows(b *testing.B) {
	for _, n := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("mappings=%d", n), func(b *testing.B) {
			mappings := make([]Mapping, n)
			for i := range mappings {
				mappings[i] = Mapping{Protocol: TCP, HostPort: uint16(20000 + i), ContainerPort: uint16(30000 + i)}
			}
			a := sample(b)
			a.Rules = Resolve(mappings, []netip.Addr{node4, node6}, ctr4, ctr6)
			p := DefaultPipeline()
			b.ReportAllocs()
			var flows int
			for b.Loop() {
				flows = len(p.AttachmentFlows(a))
			}
			b.ReportMetric(float64(flows), "flows/op")
		})
	}
}

func BenchmarkResolve(b *testing.B) {
	mappings := make([]Mapping, 10000)
	for i := range mappings {
		mappings[i] = Mapping{Protocol: UDP, HostPort: uint16(20000 + i), ContainerPort: 53}
	}
	nodes := []netip.Addr{node4, node4b, node6}
	b.ReportAllocs()
	for b.Loop() {
		Resolve(mappings, nodes, ctr4, ctr6)
	}
}
