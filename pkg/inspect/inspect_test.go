package inspect

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/trace"
)

// TestWriteFlows prints an attachment's port security and host-port flows
// and the shared ones: by group, in table and priority order, each with its
// counters and declared name.
func TestWriteFlows(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:0a")
	c := flows.AttachmentCookie("ctr", "eth0")
	ip := netip.MustParseAddr("192.0.2.10")
	ps := flows.PortSecurityFlows(flows.PortSecurity{Cookie: c, OFPort: 7, MAC: openflow.MAC(mac), IPs: []netip.Addr{ip}, LinkLocal: flows.LinkLocalOf(mac)})
	pl := flows.DefaultPipeline()
	a := flows.HostPorts{Cookie: c, OFPort: 7, MAC: openflow.MAC(mac), IPv4: ip,
		Rules: flows.Resolve([]flows.Mapping{{Protocol: flows.TCP, HostPort: 8080, ContainerPort: 80}}, []netip.Addr{netip.MustParseAddr("198.51.100.1")}, ip, netip.Addr{})}
	var fs []openflow.FlowStats
	for _, f := range append(append(pl.SharedFlows(), pl.AttachmentFlows(a)...), ps...) {
		st := openflow.FlowStats{Flow: f}
		if flows.DropReason(f) == flows.ReasonRouterAdvertisement {
			st.Packets, st.Bytes = 3, 270
		}
		fs = append(fs, st)
	}
	var b bytes.Buffer
	WriteFlows(&b, fs)
	out := b.String()
	order := []string{"\nport security: ", "\nhost ports: ", "\nshared pipeline: "}
	last := -1
	for _, g := range order {
		i := strings.Index(out, g)
		if i < 0 || i < last {
			t.Fatalf("group %q missing or out of order in\n%s", g, out)
		}
		last = i
	}
	if !strings.Contains(out, fmt.Sprintf("port security: %d flows", len(ps))+", 3 packets, 270 bytes") {
		t.Errorf("port security totals missing in\n%s", out)
	}
	ra := lineWith(out, "the port-security guard for router advertisements")
	if f := strings.Fields(ra); len(f) < 4 || f[0] != "3" || f[1] != "270" || f[2] != "0" || f[3] != "420" {
		t.Errorf("router advertisement guard line: got %q", ra)
	}
	// Table 0 before 40, 41; priorities down within a table.
	if strings.Index(out, "the host-port request classifier (DNAT zone)") > strings.Index(out, "the host-port output to the container") {
		t.Errorf("host ports out of table order:\n%s", out)
	}
	h := Header(trace.Facts{ContainerID: "ctr", IfName: "eth0", Pod: "shop/web-0", Bridge: "br0", OFPort: 7}, c)
	if want := "attachment ctr/eth0 (pod shop/web-0), bridge br0, ofport 7, cookie "; !strings.HasPrefix(h, want) || !strings.HasSuffix(h, "/0xffff00ffffffffff") {
		t.Errorf("header: got %q", h)
	}
}

// lineWith returns the first line of out that contains s.
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}
