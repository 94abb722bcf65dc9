package cnicmd

import (
	"bytes"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestWarnMisspelled(t *testing.T) {
	type conf struct {
		types.PluginConf
		Bridge       string `json:"bridge"`
		PortSecurity *bool  `json:"portSecurity,omitempty"`
		Internal     string `json:"-"`
	}
	for _, tc := range []struct{ stdin, want string }{
		{`{"type":"ovs-portmap","capabilites":{"portMappings":true}}`, `ovs-portmap: warning: unknown key "capabilites" ignored; did you mean "capabilities"?` + "\n"},
		{`{"type":"ovs-bridge","portSecurty":false}`, `ovs-bridge: warning: unknown key "portSecurty" ignored; did you mean "portSecurity"?` + "\n"},
		{`{"type":"ovs-bridge","brige":"br0"}`, `ovs-bridge: warning: unknown key "brige" ignored; did you mean "bridge"?` + "\n"},
		{`{"type":"ovs-bridge","bridge":"br0","portSecurity":true,"capabilities":{}}`, ""},
		{`{"type":"ovs-bridge","socket_file":"x","link_state_check":true,"runtimeConfig":{}}`, ""}, // far from every key: silent
		{`not json`, ""},
	} {
		var w bytes.Buffer
		warnMisspelled(&w, []byte(tc.stdin), &conf{})
		if got := w.String(); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.stdin, got, tc.want)
		}
	}
}
