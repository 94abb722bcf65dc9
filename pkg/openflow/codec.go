//go:build !libofcodec

package openflow

// appendFlowMod appends the OFPT_FLOW_MOD of a bundle entry. The production
// build encodes it here, by hand; the build tag libofcodec swaps in
// libofcodec.go, which encodes it through antrea's libOpenflow, to measure
// that library against this code (docs/design.md, "OpenFlow codec").
func appendFlowMod(b []byte, m Mod) []byte { return m.flowMod(b) }
