package bridge

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

func TestLoadConf(t *testing.T) {
	cases := []struct {
		name     string
		conf     string
		cniArgs  string
		wantCode uint   // 0: success
		wantMsg  string // substring of the error, or of the MAC on success
	}{
		{"minimal", `{"cniVersion":"1.0.0","name":"n","type":"ovs-bridge","bridge":"br0"}`, "", 0, ""},
		{"no bridge", `{"cniVersion":"1.0.0","name":"n","type":"ovs-bridge"}`, "", types.ErrInvalidNetworkConfig, `"bridge" is required`},
		{"long bridge", `{"bridge":"abcdefghijklmnop"}`, "", types.ErrInvalidNetworkConfig, `"bridge" "abcdefghijklmnop"`},
		{"bridge with shell", `{"bridge":"br0;rm -rf"}`, "", types.ErrInvalidNetworkConfig, `"bridge"`},
		{"vlan 0", `{"bridge":"br0","vlan":0}`, "", types.ErrInvalidNetworkConfig, `"vlan" 0`},
		{"vlan 4095", `{"bridge":"br0","vlan":4095}`, "", types.ErrInvalidNetworkConfig, `"vlan" 4095`},
		{"vlan and trunk", `{"bridge":"br0","vlan":3,"trunk":[{"id":4}]}`, "", types.ErrInvalidNetworkConfig, "exclusive"},
		{"trunk id and range", `{"bridge":"br0","trunk":[{"id":4,"minID":1,"maxID":2}]}`, "", types.ErrInvalidNetworkConfig, `"trunk"[0]`},
		{"trunk reversed", `{"bridge":"br0","trunk":[{"minID":9,"maxID":2}]}`, "", types.ErrInvalidNetworkConfig, "minID 9 > maxID 2"},
		{"mtu small", `{"bridge":"br0","mtu":10}`, "", types.ErrInvalidNetworkConfig, `"mtu" 10`},
		{"datapath", `{"bridge":"br0","datapathType":"dpdk"}`, "", types.ErrInvalidNetworkConfig, `"datapathType"`},
		{"ovsdb", `{"bridge":"br0","ovsdb":"/var/run/db.sock"}`, "", types.ErrInvalidNetworkConfig, `"ovsdb"`},
		{"ovsdb tcp no port", `{"bridge":"br0","ovsdb":"tcp:127.0.0.1"}`, "", types.ErrInvalidNetworkConfig, `"ovsdb"`},
		{"openflow relative", `{"bridge":"br0","openflow":"unix:br0.mgmt"}`, "", types.ErrInvalidNetworkConfig, `"openflow"`},
		{"openflow ssl", `{"bridge":"br0","openflow":"ssl:127.0.0.1:6653"}`, "", types.ErrInvalidNetworkConfig, `"openflow"`},
		{"timeout", `{"bridge":"br0","timeout":"3m"}`, "", 0, ""},
		{"timeout short", `{"bridge":"br0","timeout":"1s"}`, "", types.ErrInvalidNetworkConfig, `"timeout" "1s"`},
		{"timeout no unit", `{"bridge":"br0","timeout":"120"}`, "", types.ErrInvalidNetworkConfig, `"timeout" "120"`},
		{"bad json", `{"bridge":`, "", types.ErrDecodingFailure, "decoding network config"},
		{"wrong type", `{"bridge":7}`, "", types.ErrDecodingFailure, "decoding network config"},
		{"bad mac", `{"bridge":"br0","runtimeConfig":{"mac":"zz"}}`, "", types.ErrInvalidNetworkConfig, `"mac" "zz"`},
		{"multicast mac", `{"bridge":"br0","runtimeConfig":{"mac":"01:00:5e:00:00:01"}}`, "", types.ErrInvalidNetworkConfig, "multicast"},
		{"mac from CNI_ARGS", `{"bridge":"br0"}`, "IgnoreUnknown=1;MAC=02:00:00:00:00:01;K8S_POD_NAME=x", 0, "02:00:00:00:00:01"},
		{"args beats CNI_ARGS", `{"bridge":"br0","args":{"cni":{"mac":"02:00:00:00:00:02"}}}`, "MAC=02:00:00:00:00:01", 0, "02:00:00:00:00:02"},
		{"runtimeConfig beats args", `{"bridge":"br0","args":{"cni":{"mac":"02:00:00:00:00:02"}},"runtimeConfig":{"mac":"02:00:00:00:00:03"}}`, "MAC=02:00:00:00:00:01", 0, "02:00:00:00:00:03"},
		{"unknown CNI_ARGS without IgnoreUnknown", `{"bridge":"br0"}`, "FOO=1", types.ErrInvalidNetworkConfig, "CNI_ARGS"},
		{"unknown keys ignored", `{"bridge":"br0","somethingElse":{"x":1}}`, "", 0, ""},
		{"ovs-cni link state keys ignored", `{"bridge":"br0","link_state_check_interval":500,"link_state_check_retries":3}`, "", 0, ""},
		{"socket_file and ovsdb disagree", `{"bridge":"br0","socket_file":"/run/a.sock","ovsdb":"unix:/run/b.sock"}`, "", types.ErrInvalidNetworkConfig, `"socket_file" "/run/a.sock" and "ovsdb" "unix:/run/b.sock" disagree`},
		{"socket_file bad tcp", `{"bridge":"br0","socket_file":"tcp:127.0.0.1"}`, "", types.ErrInvalidNetworkConfig, `"ovsdb"`},
		{"configuration_path missing", `{"bridge":"br0","configuration_path":"/nonexistent/ovs.conf"}`, "", types.ErrInvalidNetworkConfig, `"configuration_path" "/nonexistent/ovs.conf"`},
		{"ofport_request 0", `{"bridge":"br0","ofport_request":0}`, "", types.ErrInvalidNetworkConfig, `"ofport_request" 0`},
		{"ofport_request too big", `{"bridge":"br0","ofport_request":65280}`, "", types.ErrInvalidNetworkConfig, `"ofport_request" 65280`},
		{"ssl without files", `{"bridge":"br0","ovsdb":"ssl:127.0.0.1:6641"}`, "", types.ErrInvalidNetworkConfig, `"ovsdbKey" is missing`},
		{"ssl without CA", `{"bridge":"br0","ovsdb":"ssl:127.0.0.1:6641","ovsdbKey":"/k.pem","ovsdbCert":"/c.pem"}`, "", types.ErrInvalidNetworkConfig, `"ovsdbCA" is missing`},
		{"ssl relative file", `{"bridge":"br0","ovsdb":"ssl:127.0.0.1:6641","ovsdbKey":"k.pem","ovsdbCert":"/c.pem","ovsdbCA":"/ca.pem"}`, "", types.ErrInvalidNetworkConfig, `"ovsdbKey" "k.pem": want an absolute path`},
		{"CA without ssl", `{"bridge":"br0","ovsdbCA":"/ca.pem"}`, "", types.ErrInvalidNetworkConfig, `"ovsdbCA" is for an ssl: "ovsdb"`},
		{"allowedAddresses", `{"bridge":"br0","allowedAddresses":["198.51.100.0/28","198.51.100.77","2001:db8::7/128"],"allowVRRP":true}`, "", 0, ""},
		{"allowedAddresses not a CIDR", `{"bridge":"br0","allowedAddresses":["x"]}`, "", types.ErrInvalidNetworkConfig, `"allowedAddresses"[0] "x"`},
		{"allowedAddresses /0", `{"bridge":"br0","allowedAddresses":["0.0.0.0/0"]}`, "", types.ErrInvalidNetworkConfig, `"portSecurity": false`},
		{"allowedAddresses multicast", `{"bridge":"br0","allowedAddresses":["224.0.0.18/32"]}`, "", types.ErrInvalidNetworkConfig, "not a unicast source"},
		{"allowedAddresses IPv6 prefix", `{"bridge":"br0","allowedAddresses":["198.51.100.1","2001:db8::/64"]}`, "", types.ErrInvalidNetworkConfig, `"allowedAddresses"[1] "2001:db8::/64": IPv6 entries are single addresses`},
		{"interface_type system", `{"bridge":"br0","interface_type":"system"}`, "", 0, ""},
		{"interface_type dpdk", `{"bridge":"br0","interface_type":"dpdk"}`, "", types.ErrInvalidNetworkConfig, `"interface_type" "dpdk"`},
		{"ovnPort with space", `{"bridge":"br0","ovnPort":"a b"}`, "", types.ErrInvalidNetworkConfig, `"ovnPort"`},
		{"ovnPort and CNI_ARGS disagree", `{"bridge":"br0","ovnPort":"lsp1"}`, "OvnPort=lsp2", types.ErrInvalidNetworkConfig, `"ovnPort" "lsp1" and CNI_ARGS OvnPort "lsp2" disagree`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := LoadConf([]byte(tc.conf), tc.cniArgs)
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				if tc.wantMsg != "" && n.MAC.String() != tc.wantMsg {
					t.Errorf("MAC: got %s, want %s", n.MAC, tc.wantMsg)
				}
				if n.Endpoints.OVSDB.String() != "unix:/var/run/openvswitch/db.sock" {
					t.Errorf("default ovsdb: got %s", n.Endpoints.OVSDB)
				}
				return
			}
			var e *types.Error
			if !errors.As(err, &e) || e.Code != tc.wantCode || !strings.Contains(e.Msg, tc.wantMsg) {
				t.Fatalf("got %v, want code %d with %q", err, tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// TestOVSCNIKeys: ovs-cni's keys land where ovs-bridge's own would.
func TestOVSCNIKeys(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ovs.conf")
	if err := os.WriteFile(file, []byte(`{"socket_file":"/run/flat.sock","link_state_check_retries":5}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, conf, cniArgs string
		wantOVSDB, wantOVN  string
		wantOFPort          int
	}{
		{"socket_file path", `{"bridge":"br0","socket_file":"/run/ovs/db.sock"}`, "", "unix:/run/ovs/db.sock", "", 0},
		{"socket_file unix:", `{"bridge":"br0","socket_file":"unix:/run/ovs/db.sock"}`, "", "unix:/run/ovs/db.sock", "", 0},
		{"socket_file tcp:", `{"bridge":"br0","socket_file":"tcp:127.0.0.1:6640"}`, "", "tcp:127.0.0.1:6640", "", 0},
		{"socket_file agrees with ovsdb", `{"bridge":"br0","socket_file":"/run/a.sock","ovsdb":"unix:/run/a.sock"}`, "", "unix:/run/a.sock", "", 0},
		{"configuration_path", `{"bridge":"br0","configuration_path":"` + file + `"}`, "", "unix:/run/flat.sock", "", 0},
		{"socket_file beats configuration_path", `{"bridge":"br0","socket_file":"/run/x.sock","configuration_path":"` + file + `"}`, "", "unix:/run/x.sock", "", 0},
		{"ofport_request", `{"bridge":"br0","ofport_request":7}`, "", "unix:/var/run/openvswitch/db.sock", "", 7},
		{"ovnPort", `{"bridge":"br0","ovnPort":"lsp1"}`, "", "unix:/var/run/openvswitch/db.sock", "lsp1", 0},
		{"OvnPort in CNI_ARGS", `{"bridge":"br0"}`, "IgnoreUnknown=1;OvnPort=lsp2", "unix:/var/run/openvswitch/db.sock", "lsp2", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := LoadConf([]byte(tc.conf), tc.cniArgs)
			if err != nil {
				t.Fatalf("got %v, want success", err)
			}
			if n.Endpoints.OVSDB.String() != tc.wantOVSDB {
				t.Errorf("ovsdb: got %q (parsed %s), want %q", n.OVSDB, n.Endpoints.OVSDB, tc.wantOVSDB)
			}
			if n.OVNPort != tc.wantOVN {
				t.Errorf("ovnPort: got %q, want %q", n.OVNPort, tc.wantOVN)
			}
			got := 0
			if n.OFPortRequest != nil {
				got = *n.OFPortRequest
			}
			if got != tc.wantOFPort {
				t.Errorf("ofport_request: got %d, want %d", got, tc.wantOFPort)
			}
		})
	}
}

func TestTrunks(t *testing.T) {
	n, err := LoadConf([]byte(`{"bridge":"br0","trunk":[{"id":7},{"minID":3,"maxID":5},{"id":4}]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	want := []int{7, 3, 4, 5}
	if len(n.Trunks) != len(want) {
		t.Fatalf("got %v, want %v", n.Trunks, want)
	}
	for i := range want {
		if n.Trunks[i] != want[i] {
			t.Fatalf("got %v, want %v", n.Trunks, want)
		}
	}
}

func FuzzLoadConf(f *testing.F) {
	f.Add([]byte(`{"bridge":"br0","vlan":10,"trunk":[{"minID":1,"maxID":4094}]}`), "MAC=02:00:00:00:00:01")
	f.Add([]byte(`{"bridge":"br0","runtimeConfig":{"mac":"02:00:00:00:00:01"}}`), "")
	f.Fuzz(func(t *testing.T, b []byte, args string) {
		n, err := LoadConf(b, args)
		if err == nil && (n.Bridge == "" || len(n.Bridge) > 15) {
			t.Fatalf("accepted bridge %q", n.Bridge)
		}
	})
}

// ovs-cni's trunk example (its docs/cni-plugin.md) is the same shape here.
func TestOVSCNITrunk(t *testing.T) {
	n, err := LoadConf([]byte(`{"name":"mytrunknet","type":"ovs-bridge","bridge":"mynet1","mtu":9000,
		"trunk":[ { "id" : 42 }, { "minID" : 1000, "maxID" : 1010 } ]}`), "")
	if err != nil {
		t.Fatal(err)
	}
	want := []int{42}
	for id := 1000; id <= 1010; id++ {
		want = append(want, id)
	}
	if !slices.Equal(n.Trunks, want) || n.MTU != 9000 {
		t.Errorf("trunks %v, mtu %d; want %v, 9000", n.Trunks, n.MTU, want)
	}
}

// LoadConf parses the endpoints once: the OVSDB one with its PEM files, the
// OpenFlow override, or each bridge's socket beside OVSDB's.
func TestLoadConfEndpoints(t *testing.T) {
	n, err := LoadConf([]byte(`{"bridge":"br0","ovsdb":"ssl:127.0.0.1:6641","ovsdbKey":"/k.pem","ovsdbCert":"/c.pem","ovsdbCA":"/ca.pem",`+
		`"openflow":"tcp:127.0.0.1:6653"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	want := endpoint.Endpoint{Network: "ssl", Address: "127.0.0.1:6641", TLS: endpoint.TLS{Key: "/k.pem", Cert: "/c.pem", CA: "/ca.pem"}}
	if got := n.OVSDBEndpoint(); got != want {
		t.Errorf("ovsdb: got %+v, want %+v", got, want)
	}
	if got := n.Endpoints.OpenFlowOf("br0").String(); got != "tcp:127.0.0.1:6653" {
		t.Errorf("openflow: got %s, want the override", got)
	}
	n, err = LoadConf([]byte(`{"bridge":"br0","ovsdb":"unix:/run/ovs/db.sock"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Endpoints.OpenFlowOf("br1").String(); got != "unix:/run/ovs/br1.mgmt" {
		t.Errorf("openflow: got %s, want the bridge's socket beside OVSDB's", got)
	}
}
