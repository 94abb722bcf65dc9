package openflow_test

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	of "github.com/ovsflow/ovs-cni/pkg/openflow"
)

// TestEncodeBytes pins two messages, decoded by hand from OpenFlow 1.4.
func TestEncodeBytes(t *testing.T) {
	tests := []struct {
		m    of.Mod
		want string
	}{
		{of.Flow{Cookie: 1, Table: 2, Priority: 3, Match: of.Match{}.InPort(4), Actions: of.Actions{of.Output{Port: 5}}},
			"050e0058 00000001" + // header, xid 1
				"0000000000000001 0000000000000000 02 00 0000 0000 0003 ffffffff ffffffff ffffffff 0000 0000" +
				"0001000c 80000004 00000004 00000000" + // OXM match: in_port=4, padded
				"00040018 00000000 0000 0010 00000005 0000 000000000000"}, // apply_actions(output:5)
		{flows.SuiteDelete(),
			"050e0038 00000001" +
				"0fc5000000000000 ffff000000000000 ff 03 0000 0000 8000 ffffffff ffffffff ffffffff 0000 0000" +
				"00010004 00000000"}, // empty match, no instructions
	}
	for _, tt := range tests {
		if got, want := hex.EncodeToString(of.FlowMod(tt.m)), strings.ReplaceAll(tt.want, " ", ""); got != want {
			t.Errorf("%s:\ngot  %s\nwant %s", tt.m.Line(), got, want)
		}
	}
}
