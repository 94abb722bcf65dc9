package bridge

import (
	"encoding/json"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

func TestReleaseWith(t *testing.T) {
	now := []byte(`{"cniVersion":"1.0.0","name":"n","type":"ovs-bridge","bridge":"br0","ipam":{"type":"static","addresses":[{"address":"192.0.2.200/24"}]}}`)
	hostLocal := `{"type":"host-local","ranges":[[{"subnet":"192.0.2.0/24"}]]}`
	port := func(ipam string) []ovsdb.OwnedPort {
		p := ovsdb.OwnedPort{}
		p.Port.Name = "ovf1"
		p.Port.ExternalIDs = map[string]string{}
		if ipam != "" {
			p.Port.ExternalIDs[record.KeyIPAM] = ipam
		}
		return []ovsdb.OwnedPort{p}
	}
	conf := &NetConf{}
	conf.IPAM.Type = "static"
	for _, tc := range []struct {
		name     string
		ports    []ovsdb.OwnedPort
		wantType string
		wantIPAM string
	}{
		{"no port", nil, "static", ipamSection(now)},
		{"nothing recorded", port(""), "static", ipamSection(now)},
		{"the same recorded", port(ipamSection(now)), "static", ipamSection(now)},
		{"another recorded", port(hostLocal), "host-local", hostLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			typ, stdin, err := releaseWith(conf, now, tc.ports)
			if err != nil {
				t.Fatal(err)
			}
			var nc map[string]json.RawMessage
			if err := json.Unmarshal(stdin, &nc); err != nil {
				t.Fatal(err)
			}
			if typ != tc.wantType || ipamSection(stdin) != tc.wantIPAM || string(nc["name"]) != `"n"` {
				t.Errorf("got %s %s, want %s with ipam %s and the rest of the config", typ, stdin, tc.wantType, tc.wantIPAM)
			}
		})
	}
	if _, _, err := releaseWith(conf, now, port(`{"ranges":[]}`)); err == nil {
		t.Error("a recorded ipam without a type: got no error")
	}
}
