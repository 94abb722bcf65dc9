package record

import (
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// FuzzPortSecurityOf reads arbitrary text as ovs-bridge's port security
// record (OVSDB may hold anything another client wrote) and renders the
// flows reconcile would install, without panicking.
func FuzzPortSecurityOf(f *testing.F) {
	for _, s := range []string{`{"openflow":"unix:/run/openvswitch/br0.mgmt","mac":"02:00:00:00:00:01","ips":["192.0.2.2","2001:db8:c::2"]}`,
		`{"mac":"02:00:00:00:00:01","l2only":true}`, `{"mac":"","ips":["::ffff:192.0.2.2"]}`, `{"ips":[""]}`, `[]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p := ovsdb.OwnedPort{Port: ovsdb.Port{Name: "ovf0", ExternalIDs: map[string]string{KeyPortSecurity: raw}}}
		r, ok := PortSecurityOf(p)
		if !ok {
			return
		}
		_ = flows.PortSecurityBundle(r.Facts(flows.AttachmentCookie("c", "eth0"), 3))
	})
}
