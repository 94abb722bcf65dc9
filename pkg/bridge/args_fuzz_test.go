package bridge

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/hostport"
)

// cniError checks that a LoadConf error is a CNI error with one of codes.
func cniError(t *testing.T, err error, codes ...uint) {
	t.Helper()
	var e *types.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a CNI error", err, err)
	}
	for _, c := range codes {
		if e.Code == c {
			return
		}
	}
	t.Fatalf("error %v: code %d, want one of %v", err, e.Code, codes)
}

// FuzzCNIArgs feeds arbitrary CNI_ARGS to LoadConf with a valid network
// config: a bad CNI_ARGS is code 7, an accepted MAC is a unicast Ethernet
// address.
func FuzzCNIArgs(f *testing.F) {
	for _, s := range []string{"", "MAC=02:00:00:00:00:01", "IgnoreUnknown=1;K8S_POD_NAME=a;MAC=02:00:00:00:00:01",
		"MAC=01:00:5e:00:00:01", "MAC=", "MAC=a=b", ";;", "=", "MAC=02:00:00:00:00:01;MAC=02:00:00:00:00:02",
		"IgnoreUnknown=true;X=$(reboot)", "mac=02-00-00-00-00-01", "MAC=0200.0000.0001", "MAC=02:00:00:00:00:01:02:03"} {
		f.Add(s)
	}
	stdin := []byte(`{"cniVersion":"1.0.0","name":"n","type":"ovs-bridge","bridge":"br0"}`)
	f.Fuzz(func(t *testing.T, args string) {
		n, err := LoadConf(stdin, args)
		if err != nil {
			cniError(t, err, types.ErrInvalidNetworkConfig)
			return
		}
		if n.MAC != nil && (len(n.MAC) != 6 || n.MAC[0]&1 == 1) {
			t.Fatalf("CNI_ARGS %q: accepted MAC %v", args, n.MAC)
		}
	})
}

// FuzzMesosArgs feeds arbitrary JSON as the network config's "args" (Apache
// Mesos's port mappings): accepted mappings are valid, unique and bounded;
// errors are decoding (6) or config (7) errors.
func FuzzMesosArgs(f *testing.F) {
	for _, s := range []string{
		`{"org.apache.mesos":{"network_info":{"port_mappings":[{"host_port":8080,"container_port":80,"protocol":"tcp"}]}}}`,
		`{"org.apache.mesos":{"network_info":{"port_mappings":[{"host_port":8080,"container_port":80},{"host_port":8080,"container_port":80,"protocol":"TCP"}]}}}`,
		`{"org.apache.mesos":{"network_info":{"port_mappings":[{"host_port":0,"container_port":80}]}}}`,
		`{"org.apache.mesos":{"network_info":{"port_mappings":null}}}`,
		`{"org.apache.mesos":null,"cni":{"mac":"02:00:00:00:00:01"}}`,
		`{"org.apache.mesos":{"network_info":{"port_mappings":[{"host_port":"80"}]}}}`,
		`{"org.apache.mesos":{"network_info":{"port_mappings":[{"host_port":53,"container_port":53,"protocol":"udp"},{"host_port":53,"container_port":54,"protocol":"udp"}]}}}`,
		`[]`, `null`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, args []byte) {
		stdin := append(append([]byte(`{"cniVersion":"1.0.0","name":"n","type":"ovs-bridge","bridge":"br0","args":`), args...), '}')
		n, err := LoadConf(stdin, "")
		if err != nil {
			cniError(t, err, types.ErrDecodingFailure, types.ErrInvalidNetworkConfig)
			return
		}
		if len(n.Mappings) > hostport.MaxMappings {
			t.Fatalf("accepted %d mappings", len(n.Mappings))
		}
		seen := map[string]bool{}
		for _, m := range n.Mappings {
			if m.HostPort == 0 || m.ContainerPort == 0 || !m.Protocol.IsValid() || m.HostIP.IsValid() {
				t.Fatalf("accepted Mesos mapping %+v", m)
			}
			k, _ := json.Marshal([]any{m.Protocol, m.HostPort})
			if seen[string(k)] {
				t.Fatalf("host port %d/%v accepted twice", m.HostPort, m.Protocol)
			}
			seen[string(k)] = true
		}
	})
}
