package bandwidth

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/limit"
)

func TestLoadConf(t *testing.T) {
	const head = `{"cniVersion":"1.0.0","name":"net","type":"ovs-bandwidth"`
	for _, tc := range []struct {
		name, conf string
		want       limit.Entry
		code       uint     // 0: no error
		field      string   // named in the error
		msg        []string // in the error too
	}{
		{name: "none", conf: head + `}`},
		{name: "config keys", conf: head + `,"ingressRate":8000,"ingressBurst":800,"egressRate":16000,"egressBurst":1600}`,
			want: limit.Entry{IngressRate: 8000, IngressBurst: 800, EgressRate: 16000, EgressBurst: 1600}},
		{name: "runtimeConfig", conf: head + `,"runtimeConfig":{"bandwidth":{"ingressRate":8000,"ingressBurst":800}}}`,
			want: limit.Entry{IngressRate: 8000, IngressBurst: 800}},
		{name: "config keys win over runtimeConfig", conf: head + `,"egressRate":1000,"egressBurst":100,"runtimeConfig":{"bandwidth":{"ingressRate":8000,"ingressBurst":800}}}`,
			want: limit.Entry{EgressRate: 1000, EgressBurst: 100}},
		{name: "rate without burst", conf: head + `,"ingressRate":8000}`, code: 7, field: `"ingressBurst"`, msg: []string{"if rate is set, burst must also be set"}},
		{name: "burst without rate", conf: head + `,"egressBurst":8000}`, code: 7, field: `"egressRate"`, msg: []string{"if burst is set, rate must also be set"}},
		{name: "runtime rate without burst", conf: head + `,"runtimeConfig":{"bandwidth":{"egressRate":8000}}}`, code: 7,
			field: `"runtimeConfig.bandwidth.egressBurst"`, msg: []string{"if rate is set, burst must also be set"}},
		{name: "burst of 4GB", conf: head + `,"ingressRate":8000,"ingressBurst":34359738360}`, code: 7, field: `"ingressBurst"`, msg: []string{"burst cannot be more than 4GB"}},
		{name: "egress rate beyond a meter", conf: head + `,"egressRate":4294967296000,"egressBurst":1000}`, code: 7, field: `"egressRate"`},
		{name: "unshapedSubnets", conf: head + `,"unshapedSubnets":["192.0.2.0/24"]}`, code: 7, field: `"unshapedSubnets"`, msg: []string{"not supported"}},
		{name: "shapedSubnets", conf: head + `,"shapedSubnets":["192.0.2.0/24"]}`, code: 7, field: `"shapedSubnets"`},
		{name: "negative rate", conf: head + `,"ingressRate":-1,"ingressBurst":1}`, code: 6},
		{name: "bad ovsdb", conf: head + `,"ovsdb":"ftp:x"}`, code: 7, field: `"ovsdb"`},
		{name: "bad openflow", conf: head + `,"openflow":"unix:rel.mgmt"}`, code: 7, field: `"openflow"`},
		{name: "timeout", conf: head + `,"timeout":"90s"}`},
		{name: "timeout too long", conf: head + `,"timeout":"10m"}`, code: 7, field: `"timeout"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConf([]byte(tc.conf))
			if tc.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if c.Limits != tc.want {
					t.Fatalf("limits: got %+v, want %+v", c.Limits, tc.want)
				}
				return
			}
			var e *types.Error
			if !errors.As(err, &e) || e.Code != tc.code {
				t.Fatalf("got error %v, want code %d", err, tc.code)
			}
			for _, s := range append([]string{tc.field}, tc.msg...) {
				if !strings.Contains(e.Msg, s) {
					t.Errorf("error %q does not say %q", e.Msg, s)
				}
			}
		})
	}
}

// DEL does not look at the limits: bad ones do not keep it from cleaning up.
func TestLoadEndpointsIgnoresLimits(t *testing.T) {
	c, err := loadEndpoints([]byte(`{"cniVersion":"1.0.0","name":"net","type":"ovs-bandwidth","runtimeConfig":{"bandwidth":{"ingressRate":1}}}`))
	if err != nil || c.Endpoints.OVSDB.String() != "unix:/var/run/openvswitch/db.sock" {
		t.Fatalf("got %+v, %v; want the config with the default ovsdb", c, err)
	}
	if _, err := loadEndpoints([]byte(`{"cniVersion":"1.0.0","name":"net","ovsdb":"ftp:x"}`)); err == nil {
		t.Error("a bad ovsdb endpoint passed")
	}
}
