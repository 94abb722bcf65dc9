package portmap

import (
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/hostport"
)

// FuzzPrevResult runs ovs-portmap's own decoding of stdin up to the facts
// ADD and CHECK use (LoadConf, prevResult, ContainerFacts) on arbitrary
// input: no panic, and every error is a CNI error.
func FuzzPrevResult(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"ovs-portmap","runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80}]},"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:02","sandbox":"/x"}],"ips":[{"address":"192.0.2.2/24","interface":0}]}}`,
		`{"cniVersion":"0.4.0","name":"n","type":"ovs-portmap","prevResult":{"cniVersion":"0.4.0","ips":[{"version":"4","address":"192.0.2.2/24"}]}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"ovs-portmap","prevResult":{"ips":[{"address":"192.0.2.2/24","interface":7}]}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"ovs-portmap","prevResult":"x"}`,
		`{"cniVersion":"0.3.1","prevResult":{"cniVersion":"0.3.1","dns":{"nameservers":["x"]}}}`,
		`{"name":"n","prevResult":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		conf, err := LoadConf(stdin)
		if err != nil {
			return
		}
		r, err := prevResult(conf)
		if err != nil {
			var e *types.Error
			if !errors.As(err, &e) {
				t.Fatalf("prevResult error %v (%T) is not a CNI error", err, err)
			}
			return
		}
		v4, v6, _ := hostport.ContainerFacts(r, "eth0")
		if (v4.IsValid() && !v4.Is4()) || (v6.IsValid() && v6.Is4In6()) {
			t.Fatalf("facts %v %v", v4, v6)
		}
	})
}
