//go:build libofcodec

package openflow_test

import (
	"testing"

	of15 "antrea.io/libOpenflow/openflow15"
	of "github.com/ovsflow/ovs-cni/pkg/openflow"
)

// BenchmarkDecodeBundleLibOpenflow parses the flow_mods of BenchmarkDecodeBundle
// with libOpenflow (its structures only; turning them into Flow values is
// not counted). libOpenflow refuses some (NXM0 vlan_tci is unknown to it)
// and panics on others (NXM_NX_IP_FRAG decodes into a nil value): those are
// left out and counted as "refused/op". Not in the production build: see
// libofcodec.go.
func BenchmarkDecodeBundleLibOpenflow(b *testing.B) {
	for name, bundle := range codecBundles(b) {
		var msgs [][]byte
		var refused int
		for _, m := range bundle {
			if _, ok := m.(of.Flow); ok {
				if fm := of.HandFlowMod(m); libofDecodes(fm) {
					msgs = append(msgs, fm)
				} else {
					refused++
				}
			}
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, fm := range msgs {
					if err := of15.NewFlowMod().UnmarshalBinary(fm); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(len(msgs)), "decoded/op")
			b.ReportMetric(float64(refused), "refused/op")
		})
	}
}

// libofDecodes reports whether libOpenflow parses fm without an error or a
// panic.
func libofDecodes(fm []byte) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return of15.NewFlowMod().UnmarshalBinary(fm) == nil
}
