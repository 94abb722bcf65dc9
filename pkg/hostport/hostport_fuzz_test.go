package hostport

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// FuzzParseMappings decodes arbitrary JSON as runtimeConfig.portMappings
// (keys match case-insensitively, as for containerd's HostPort) and checks
// what ParseMappings accepts: valid ports and protocols, canonical host IPs,
// no host port twice, at most MaxMappings; every error is code 7 naming the
// field.
func FuzzParseMappings(f *testing.F) {
	for _, s := range []string{
		`[{"hostPort":8080,"containerPort":80,"protocol":"tcp","hostIP":""}]`,
		`[{"HostPort":8080,"ContainerPort":80,"Protocol":"TCP","HostIP":"::ffff:198.51.100.1"}]`,
		`[{"hostPort":53,"containerPort":53,"protocol":"udp"},{"hostPort":53,"containerPort":53,"protocol":"UDP"}]`,
		`[{"hostPort":53,"containerPort":53,"protocol":"udp"},{"hostPort":53,"containerPort":54,"protocol":"udp"}]`,
		`[{"hostPort":1,"containerPort":65535,"protocol":"sctp","hostIP":"0.0.0.0"},{"hostPort":1,"containerPort":1,"hostIP":"::"}]`,
		`[{"hostPort":0,"containerPort":80}]`, `[{"hostPort":65536,"containerPort":80}]`, `[{"hostPort":-1,"containerPort":80}]`,
		`[{"hostPort":80,"containerPort":80,"hostIP":"fe80::1%eth0"}]`, `[{"hostPort":80,"containerPort":80,"protocol":"tcp,actions=drop"}]`,
		`[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var entries []Entry
		if json.Unmarshal(b, &entries) != nil {
			return
		}
		const field = "runtimeConfig.portMappings"
		ms, err := ParseMappings(entries, field)
		if err != nil {
			var e *types.Error
			if !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(e.Msg, field) {
				t.Fatalf("error %v (%T): want code 7 naming %s", err, err, field)
			}
			return
		}
		if len(ms) > MaxMappings || len(ms) > len(entries) {
			t.Fatalf("%d entries gave %d mappings", len(entries), len(ms))
		}
		type key struct {
			p flows.Protocol
			h string
			n uint16
		}
		seen := map[key]bool{}
		for _, m := range ms {
			if m.HostPort == 0 || m.ContainerPort == 0 || !m.Protocol.IsValid() {
				t.Fatalf("accepted %+v", m)
			}
			if m.HostIP.IsValid() && (m.HostIP.Is4In6() || m.HostIP.Zone() != "") {
				t.Fatalf("host IP %v not canonical", m.HostIP)
			}
			k := key{m.Protocol, m.HostIP.String(), m.HostPort}
			if seen[k] {
				t.Fatalf("host port %v accepted twice in %v", k, ms)
			}
			seen[k] = true
		}
	})
}

// FuzzContainerFacts decodes arbitrary JSON as a prevResult the way
// ovs-portmap does (version.ParsePrevResult, then the current result
// version) and picks the container facts from it.
func FuzzContainerFacts(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","interfaces":[{"name":"ovf0","mac":"02:00:00:00:00:01"},{"name":"eth0","mac":"02:00:00:00:00:02","sandbox":"/var/run/netns/x"}],"ips":[{"address":"192.0.2.2/24","interface":1},{"address":"2001:db8:c::2/64","interface":1}]}`,
		`{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"version":"4","address":"192.0.2.2/24","interface":0}]}`,
		`{"cniVersion":"0.3.1","ips":[{"version":"6","address":"::ffff:192.0.2.2/120"}]}`,
		`{"cniVersion":"1.0.0","ips":[{"address":"192.0.2.2/24","interface":-1}]}`,
		`{"cniVersion":"1.0.0","ips":[{"address":"192.0.2.2/24","interface":99}]}`,
		`{"cniVersion":"0.2.0","ip4":{"ip":"192.0.2.2/24"}}`,
		`{}`,
	} {
		f.Add([]byte(s), "eth0")
	}
	f.Fuzz(func(t *testing.T, b []byte, ifname string) {
		var raw map[string]any
		if json.Unmarshal(b, &raw) != nil || raw == nil {
			return // ("null": no prevResult, which cnicmd.PrevResult refuses before parsing)
		}
		conf := types.PluginConf{CNIVersion: "1.0.0", RawPrevResult: raw}
		if err := version.ParsePrevResult(&conf); err != nil {
			return
		}
		r, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return
		}
		v4, v6, mac := ContainerFacts(r, ifname)
		if v4.IsValid() && !v4.Is4() {
			t.Fatalf("v4 %v", v4)
		}
		if v6.IsValid() && (!v6.Is6() || v6.Is4In6()) {
			t.Fatalf("v6 %v", v6)
		}
		if m, err := openflow.ParseMAC(mac.String()); !mac.IsZero() && (err != nil || m != mac) {
			t.Fatalf("MAC %s does not read back: %v, %v", mac, m, err)
		}
	})
}

// FuzzRecordOf reads arbitrary text as a port's host port record (OVSDB is
// the record: it may hold anything another client wrote) and renders what a
// DEL or reconcile would do with it, without panicking.
func FuzzRecordOf(f *testing.F) {
	rec, _ := json.Marshal(record.HostPorts{Version: 1, OpenFlow: endpoint.MustParse("unix:/run/openvswitch/br0.mgmt"),
		Pipeline: flows.Pipeline{DNATZone: 64000, SNATZone: 64001},
		HostPorts: flows.HostPorts{Cookie: flows.AttachmentCookie("c", "eth0"), OFPort: 3, MAC: openflow.MAC{2, 0, 0, 0, 0, 1}, SNAT: true,
			Rules: []flows.Rule{{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80}}}})
	for _, s := range []string{string(rec), `{}`, `{"cookie":"0x"}`, `{"cookie":"0xffffffffffffffffff","mac":"x"}`,
		`{"v":1,"cookie":"0x0fc5010000000001","mac":"02:00:00:00:00:01","rules":[{"Protocol":0,"NodeIP":"","HostPort":0}]}`,
		`{"rules":null}`, `not json`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf0", ExternalIDs: map[string]string{record.KeyHostPorts: raw}}}
		r, ok, err := record.HostPortsOf(p)
		if !ok || err != nil {
			return
		}
		pl, a, err := r.Facts()
		if err != nil {
			return
		}
		_ = flows.ConntrackFlushes(pl, a.Rules)
		_ = nftScript(a.Rules, true, false)
		if a.Validate() == nil {
			_ = pl.Bundle(a)
		}
	})
}
