package portmap

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

func TestLoadConf(t *testing.T) {
	const base = `"cniVersion":"1.0.0","name":"n","type":"ovs-portmap"`
	cases := []struct {
		name     string
		conf     string
		wantCode uint
		wantMsg  string
		want     []flows.Mapping
	}{
		{"no mappings", `{` + base + `}`, 0, "", []flows.Mapping{}},
		{"lowercase keys", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}`, 0, "",
			[]flows.Mapping{{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80}}},
		{"containerd keys, empty HostIP, protocol case", `{` + base + `,"runtimeConfig":{"portMappings":[{"HostPort":53,"ContainerPort":5353,"Protocol":"UDP","HostIP":""}]}}`, 0, "",
			[]flows.Mapping{{Protocol: flows.UDP, HostPort: 53, ContainerPort: 5353}}},
		{"empty protocol is tcp", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":2}]}}`, 0, "",
			[]flows.Mapping{{Protocol: flows.TCP, HostPort: 1, ContainerPort: 2}}},
		{"hostIP v4 and v6, mapped v6 unmapped", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":2,"hostIP":"::ffff:198.51.100.1"},{"hostPort":1,"containerPort":2,"hostIP":"::"}]}}`, 0, "",
			[]flows.Mapping{{Protocol: flows.TCP, HostIP: netip.MustParseAddr("198.51.100.1"), HostPort: 1, ContainerPort: 2},
				{Protocol: flows.TCP, HostIP: netip.MustParseAddr("::"), HostPort: 1, ContainerPort: 2}}},
		{"mesos form", `{` + base + `,"args":{"org.apache.mesos":{"network_info":{"name":"n","port_mappings":[{"host_port":8080,"container_port":80},{"host_port":5353,"container_port":53,"protocol":"udp"}]}}}}`, 0, "",
			[]flows.Mapping{{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80}, {Protocol: flows.UDP, HostPort: 5353, ContainerPort: 53}}},
		{"runtimeConfig wins over mesos", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":2}]},"args":{"org.apache.mesos":{"network_info":{"port_mappings":[{"host_port":8080,"container_port":80}]}}}}`, 0, "",
			[]flows.Mapping{{Protocol: flows.TCP, HostPort: 1, ContainerPort: 2}}},
		{"duplicate mapping folded", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":2},{"hostPort":1,"containerPort":2,"protocol":"TCP"}]}}`, 0, "",
			[]flows.Mapping{{Protocol: flows.TCP, HostPort: 1, ContainerPort: 2}}},
		{"conflicting duplicate", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":2},{"hostPort":1,"containerPort":3}]}}`, types.ErrInvalidNetworkConfig, "mapped twice", nil},
		{"hostPort 0", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":0,"containerPort":2}]}}`, types.ErrInvalidNetworkConfig, "runtimeConfig.portMappings[0] (hostPort 0", nil},
		{"hostPort 65536", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":65536,"containerPort":2}]}}`, types.ErrInvalidNetworkConfig, "hostPort 65536: want 1-65535", nil},
		{"containerPort -1", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":-1}]}}`, types.ErrInvalidNetworkConfig, "containerPort -1", nil},
		{"bad protocol", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":2,"protocol":"icmp"}]}}`, types.ErrInvalidNetworkConfig, `protocol "icmp"`, nil},
		{"bad hostIP", `{` + base + `,"runtimeConfig":{"portMappings":[{"hostPort":1,"containerPort":2,"hostIP":"nope; rm -rf /"}]}}`, types.ErrInvalidNetworkConfig, `hostIP "nope; rm -rf /"`, nil},
		{"mesos bad port", `{` + base + `,"args":{"org.apache.mesos":{"network_info":{"port_mappings":[{"host_port":70000,"container_port":80}]}}}}`, types.ErrInvalidNetworkConfig, `args["org.apache.mesos"].network_info.port_mappings[0]`, nil},
		{"iptables backend", `{` + base + `,"backend":"iptables"}`, types.ErrInvalidNetworkConfig, `"backend" "iptables" does not apply`, nil},
		{"ovs backend", `{` + base + `,"backend":"ovs"}`, 0, "", []flows.Mapping{}},
		{"timeout", `{` + base + `,"timeout":"30s"}`, 0, "", []flows.Mapping{}},
		{"timeout too short", `{` + base + `,"timeout":"100ms"}`, types.ErrInvalidNetworkConfig, `"timeout" "100ms"`, nil},
		{"markMasqBit", `{` + base + `,"markMasqBit":13}`, types.ErrInvalidNetworkConfig, `"markMasqBit" is an iptables portmap option`, nil},
		{"externalSetMarkChain", `{` + base + `,"externalSetMarkChain":"KUBE-MARK-MASQ"}`, types.ErrInvalidNetworkConfig, `"externalSetMarkChain"`, nil},
		{"conditionsV4", `{` + base + `,"conditionsV4":["-s","1.2.3.4"]}`, types.ErrInvalidNetworkConfig, `"conditionsV4"`, nil},
		{"conditionsV6", `{` + base + `,"conditionsV6":[]}`, types.ErrInvalidNetworkConfig, `"conditionsV6"`, nil},
		{"zone 0", `{` + base + `,"dnatZone":0}`, types.ErrInvalidNetworkConfig, `"dnatZone" 0`, nil},
		{"same zones", `{` + base + `,"dnatZone":7,"snatZone":7}`, types.ErrInvalidNetworkConfig, "must differ", nil},
		{"port security reassembly zone", `{` + base + `,"containerZone":64003}`, types.ErrInvalidNetworkConfig, "reassembly zone", nil},
		{"gateway zone", `{` + base + `,"snatZone":64004}`, types.ErrInvalidNetworkConfig, "Service replies", nil},
		{"bad hostIPs", `{` + base + `,"hostIPs":["0.0.0.0"]}`, types.ErrInvalidNetworkConfig, `"hostIPs"[0]`, nil},
		{"bad openflow", `{` + base + `,"openflow":"br0"}`, types.ErrInvalidNetworkConfig, `"openflow"`, nil},
		{"bad ovsdb", `{` + base + `,"ovsdb":"tcp:127.0.0.1:0"}`, types.ErrInvalidNetworkConfig, `"ovsdb"`, nil},
		{"bad json", `{` + base, types.ErrDecodingFailure, "decoding", nil},
		{"wrong type", `{` + base + `,"runtimeConfig":{"portMappings":{"hostPort":1}}}`, types.ErrDecodingFailure, "decoding", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConf([]byte(tc.conf))
			if tc.wantCode != 0 {
				var e *types.Error
				if !errors.As(err, &e) || e.Code != tc.wantCode || !strings.Contains(e.Msg, tc.wantMsg) {
					t.Fatalf("got %v, want code %d with %q", err, tc.wantCode, tc.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want success", err)
			}
			if len(c.Mappings) != len(tc.want) {
				t.Fatalf("mappings: got %v, want %v", c.Mappings, tc.want)
			}
			for i := range tc.want {
				if c.Mappings[i] != tc.want[i] {
					t.Errorf("mapping %d: got %+v, want %+v", i, c.Mappings[i], tc.want[i])
				}
			}
			if !*c.SNAT || c.Endpoints.OVSDB.String() != "unix:/var/run/openvswitch/db.sock" || c.Pipeline != flows.DefaultPipeline() {
				t.Errorf("defaults: snat %v ovsdb %s pipeline %+v", *c.SNAT, c.Endpoints.OVSDB, c.Pipeline)
			}
		})
	}
}

func TestTooManyMappings(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"runtimeConfig":{"portMappings":[`)
	for i := 0; i < 100000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"hostPort":1,"containerPort":2}`)
	}
	b.WriteString(`]}}`)
	_, err := LoadConf([]byte(b.String()))
	var e *types.Error
	if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, "100000 mappings") {
		t.Fatalf("got %v, want code 7 naming the count", err)
	}
}

func FuzzLoadConf(f *testing.F) {
	f.Add([]byte(`{"runtimeConfig":{"portMappings":[{"HostPort":8080,"ContainerPort":80,"Protocol":"tcp","HostIP":""}]}}`))
	f.Add([]byte(`{"args":{"org.apache.mesos":{"network_info":{"port_mappings":[{"host_port":1,"container_port":2}]}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := LoadConf(b)
		if err != nil {
			return
		}
		for _, m := range c.Mappings {
			if m.HostPort == 0 || m.ContainerPort == 0 || !m.Protocol.IsValid() {
				t.Fatalf("accepted %+v", m)
			}
		}
	})
}

func TestNewConnectionRate(t *testing.T) {
	const base = `{"cniVersion":"1.0.0","name":"n","type":"ovs-portmap"`
	for _, tc := range []struct {
		conf        string
		rate, burst uint32
		wantCode    uint
		wantMsg     string
	}{
		{conf: base + `}`},
		{conf: base + `,"newConnectionRate":20}`, rate: 20, burst: 20},
		{conf: base + `,"newConnectionRate":20,"newConnectionBurst":5}`, rate: 20, burst: 5},
		{conf: base + `,"newConnectionBurst":5}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `"newConnectionBurst" 5 without "newConnectionRate"`},
		{conf: base + `,"newConnectionRate":-1}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `"newConnectionRate" -1`},
		{conf: base + `,"newConnectionRate":4294967296}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `"newConnectionRate" 4294967296`},
	} {
		c, err := LoadConf([]byte(tc.conf))
		if tc.wantCode != 0 {
			var e *types.Error
			if !errors.As(err, &e) || e.Code != tc.wantCode || !strings.Contains(e.Msg, tc.wantMsg) {
				t.Errorf("%s: got %v, want code %d saying %q", tc.conf, err, tc.wantCode, tc.wantMsg)
			}
			continue
		}
		if err != nil || c.ConnRate != tc.rate || c.ConnBurst != tc.burst {
			t.Errorf("%s: got %v, rate %d, burst %d; want %d, %d", tc.conf, err, c.ConnRate, c.ConnBurst, tc.rate, tc.burst)
		}
	}
}
