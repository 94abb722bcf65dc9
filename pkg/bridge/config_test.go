package bridge

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
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
		{"bad json", `{"bridge":`, "", types.ErrDecodingFailure, "decoding network config"},
		{"wrong type", `{"bridge":7}`, "", types.ErrDecodingFailure, "decoding network config"},
		{"bad mac", `{"bridge":"br0","runtimeConfig":{"mac":"zz"}}`, "", types.ErrInvalidNetworkConfig, `"mac" "zz"`},
		{"multicast mac", `{"bridge":"br0","runtimeConfig":{"mac":"01:00:5e:00:00:01"}}`, "", types.ErrInvalidNetworkConfig, "multicast"},
		{"mac from CNI_ARGS", `{"bridge":"br0"}`, "IgnoreUnknown=1;MAC=02:00:00:00:00:01;K8S_POD_NAME=x", 0, "02:00:00:00:00:01"},
		{"args beats CNI_ARGS", `{"bridge":"br0","args":{"cni":{"mac":"02:00:00:00:00:02"}}}`, "MAC=02:00:00:00:00:01", 0, "02:00:00:00:00:02"},
		{"runtimeConfig beats args", `{"bridge":"br0","args":{"cni":{"mac":"02:00:00:00:00:02"}},"runtimeConfig":{"mac":"02:00:00:00:00:03"}}`, "MAC=02:00:00:00:00:01", 0, "02:00:00:00:00:03"},
		{"unknown CNI_ARGS without IgnoreUnknown", `{"bridge":"br0"}`, "FOO=1", types.ErrInvalidNetworkConfig, "CNI_ARGS"},
		{"unknown keys ignored", `{"bridge":"br0","somethingElse":{"x":1}}`, "", 0, ""},
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
				if n.OVSDB != "unix:/var/run/openvswitch/db.sock" {
					t.Errorf("default ovsdb: got %s", n.OVSDB)
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
