package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/record"
	"github.com/ovsflow/ovs-cni/pkg/trace"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// portmapTool runs `ovs-portmap SUBCOMMAND -ovsdb ... ARGS` and returns its
// standard output, failing the test on a non-zero exit.
func portmapTool(t *testing.T, sub string, args ...string) string {
	t.Helper()
	out, err := run(filepath.Join(binDir, "ovs-portmap"), append([]string{sub, "-ovsdb", ovsdbAddr}, args...)...)
	if err != nil {
		t.Fatalf("ovs-portmap %s %s: %v\n%s", sub, strings.Join(args, " "), err, out)
	}
	return out
}

// joinPod is lab.join with the pod's namespace and name in CNI_ARGS, as
// the kubelet's runtime passes them.
func (l *lab) joinPod(n *framework.CNI, role, pod string, capArgs map[string]any) *member {
	l.t.Helper()
	c := framework.NewContainer(l.t)
	m := &member{Container: c, role: role, n: n}
	ns, name, _ := strings.Cut(pod, "/")
	rt := c.RT("eth0", capArgs)
	rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", ns}, {"K8S_POD_NAME", name}}
	r, err := n.Cfg.AddNetworkList(context.Background(), n.List, rt)
	if err != nil {
		l.t.Fatalf("ADD %s: %v", role, err)
	}
	l.t.Cleanup(func() { n.Del(c, "eth0", nil) })
	if m.r, err = current.NewResultFromResult(r); err != nil {
		l.t.Fatal(err)
	}
	m.fill(l.t)
	return m
}

// hostPortRecord reads the host port record of a container's port.
func hostPortRecord(t *testing.T, c *framework.Container) record.HostPorts {
	t.Helper()
	raw := framework.Vsctl(t, "get", "Port", c.HostVeth("eth0"), "external_ids:"+record.KeyHostPorts)
	var s string
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatalf("host port record %s: %v", raw, err)
	}
	var rec record.HostPorts
	if err := json.Unmarshal([]byte(s), &rec); err != nil {
		t.Fatalf("host port record %s: %v", s, err)
	}
	return rec
}

// TestTraceVerdicts asks `ovs-portmap trace` every host-port question and
// every port-security question about a pod with host ports, and checks the
// one-line verdict: the translation and the output port, or the flow that
// dropped the frame. The controls: a pod without port security, whose
// forbidden frames are not dropped; frames from the pod's own addresses;
// a node address the host port is not published on. Then the mapping's
// flows are wiped, and trace says so until reconcile has put them back.
func TestTraceVerdicts(t *testing.T) {
	l := newLab(t)
	n := l.network("trace", nil, map[string]any{})
	p := l.joinPod(n, "traced pod", "shop/web-0", mappings(pm(8093, 80, "tcp", ""), pm(8094, 53, "udp", ""), pm(8095, 81, "tcp", nodeV4b)))
	l.join(n, "peer pod", nil)
	open := l.join(l.network("trace-open", map[string]any{"portSecurity": false}, map[string]any{}), "unprotected pod", mappings(pm(8096, 80, "tcp", "")))
	rec := hostPortRecord(t, p.Container)
	ofport := fmt.Sprint(rec.OFPort)
	uplink := framework.Vsctl(t, "get", "Interface", l.uplink(t), "ofport")
	if got := framework.Vsctl(t, "get", "Port", p.Container.HostVeth("eth0"), "external_ids:"+record.KeyPod); got != `"shop/web-0"` {
		t.Errorf("pod recorded: got %s, want \"shop/web-0\"", got)
	}
	v4, v6 := p.v4.String(), p.v6.String()
	out := fmt.Sprintf(", output port %s (the host-port output to the container, table 41, priority 100)", ofport)
	normal := `NORMAL: (to the learned port|flooded \(no learned MAC for the destination\)) \((the base NORMAL flow of a secure bridge|the bridge's own NORMAL flow), table 0, priority 0\)`
	drop := func(what string, prio uint16) string {
		return regexp.QuoteMeta(fmt.Sprintf("dropped by %s (table 0, priority %d)", what, prio))
	}
	guard := func(what string) string { return drop("the port-security guard for "+what, flows.PriorityPortSecGuard) }
	spoof := drop("the port-security drop of any other frame (another source MAC or address, a VLAN tag)", flows.PriorityPortSecDrop)
	hairpin := "198.51.100.1"
	if rec.HairpinV4.IsValid() {
		hairpin = rec.HairpinV4.String()
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // a regular expression of the whole line
	}{
		{"outside", []string{"-q", "outside", "-host-ip", nodeV4}, regexp.QuoteMeta("DNAT " + hp(nodeV4, 8093) + " -> " + hp(v4, 80) + ", zone 64000" + out)},
		{"outside-ipv6", []string{"-q", "outside", "-host-ip", nodeV6}, regexp.QuoteMeta("DNAT " + hp(nodeV6, 8093) + " -> " + hp(v6, 80) + ", zone 64000" + out)},
		{"pod", []string{"-q", "pod", "-host-ip", nodeV4}, regexp.QuoteMeta("DNAT " + hp(nodeV4, 8093) + " -> " + hp(v4, 80) + ", zone 64002" + out)},
		{"hairpin", []string{"-q", "hairpin", "-host-ip", nodeV4}, regexp.QuoteMeta("DNAT " + hp(nodeV4, 8093) + " -> " + hp(v4, 80) + ", zone 64002, SNAT " + v4 + " -> " + hairpin + ", zone 64001" + out)},
		{"node", []string{"-q", "node", "-host-ip", nodeV4}, regexp.QuoteMeta("from the node: nft DNAT "+hp(nodeV4, 8093)+" -> "+hp(v4, 80)+" in the node's nat/output hook (table ovsflow_hostport, not OVS); then ") + normal},
		{"hostip", []string{"-q", "hostip", "-host-ip", nodeV4b, "-host-port", "8095"}, regexp.QuoteMeta("DNAT " + hp(nodeV4b, 8095) + " -> " + hp(v4, 81) + ", zone 64000" + out)},
		{"hostip-not-published", []string{"-q", "hostip", "-host-ip", nodeV4, "-host-port", "8095"}, normal},
		{"udp", []string{"-q", "udp", "-host-ip", nodeV4}, regexp.QuoteMeta("DNAT " + hp(nodeV4, 8094) + " -> " + hp(v4, 53) + ", zone 64000" + out)},
		{"ra", []string{"-q", "ra"}, guard("router advertisements")},
		{"dhcp4", []string{"-q", "dhcp4"}, guard("DHCP server frames")},
		{"dhcp6", []string{"-q", "dhcp6"}, guard("DHCP server frames")},
		{"arp", []string{"-q", "arp"}, spoof},
		{"nd", []string{"-q", "nd"}, drop("the port-security drop of neighbour discovery for other addresses", flows.PriorityPortSecNDDrop)},
		{"spoof4", []string{"-q", "spoof4"}, spoof},
		{"spoof6", []string{"-q", "spoof6"}, spoof},
		{"vlan", []string{"-q", "vlan"}, spoof},
		{"frag", []string{"-q", "frag"}, guard("fragments that do not reassemble")},
		{"control-own4", []string{"-q", "own4"}, normal},
		{"control-own6", []string{"-q", "own6"}, normal},
		{"tunnel-none", []string{"-q", "tunnel"}, regexp.QuoteMeta("no tunnel: bridge " + l.Bridge + " has no overlay tunnel port, the node tunnels to no peer")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-pod", "shop/web-0", "-in-port", uplink}, tc.args...)
			got := strings.TrimSpace(portmapTool(t, "trace", args...))
			t.Logf("ovs-portmap trace %s\n%s", strings.Join(args, " "), got)
			if !regexp.MustCompile("^" + tc.want + "$").MatchString(got) {
				t.Errorf("trace %s:\ngot  %s\nwant %s\n%s", strings.Join(args, " "), got, tc.want, portmapTool(t, "trace", append(args, "-raw")...))
			}
		})
	}
	// -q all: a line per question, as each alone says it.
	all := strings.Split(strings.TrimSpace(portmapTool(t, "trace", "-pod", "shop/web-0", "-q", "all", "-host-ip", nodeV4)), "\n")
	if len(all) != len(trace.Questions) {
		t.Errorf("trace -q all: got %d lines, want %d:\n%s", len(all), len(trace.Questions), strings.Join(all, "\n"))
	}
	for i, line := range all {
		if i >= len(trace.Questions) {
			break
		}
		q := string(trace.Questions[i])
		alone := strings.TrimSpace(portmapTool(t, "trace", "-pod", "shop/web-0", "-q", q, "-host-ip", nodeV4))
		if f := strings.Fields(line); len(f) == 0 || f[0] != q || strings.TrimSpace(strings.TrimPrefix(line, f[0])) != alone {
			t.Errorf("trace -q all, line %d: got %q, want %s and %q", i, line, q, alone)
		}
	}
	t.Logf("ovs-portmap trace -pod shop/web-0 -q all -host-ip %s\n%s", nodeV4, strings.Join(all, "\n"))

	// The unprotected control: nothing drops its forbidden frames.
	for _, q := range []string{"ra", "dhcp4", "dhcp6", "arp", "nd", "spoof4", "spoof6"} {
		got := strings.TrimSpace(portmapTool(t, "trace", "-container", open.ID, "-q", q))
		if strings.HasPrefix(got, "dropped") || !regexp.MustCompile(normal).MatchString(got) {
			t.Errorf("trace -q %s of the pod without port security: got %q, want NORMAL", q, got)
		}
	}

	// flows: by group, with the counters the traced frames did not move
	// (ofproto/trace sends nothing).
	fl := portmapTool(t, "flows", "-pod", "shop/web-0")
	t.Logf("ovs-portmap flows -pod shop/web-0\n%s", fl)
	for _, want := range []string{"attachment " + p.ID + "/eth0 (pod shop/web-0)", "port security: ", "host ports: ", "shared pipeline: ",
		"the port-security guard for router advertisements", "the host-port request classifier (DNAT zone)"} {
		if !strings.Contains(fl, want) {
			t.Errorf("flows: no %q in\n%s", want, fl)
		}
	}

	// The node-local DNAT gone (nft): trace -q node says so, with no trace.
	if out, err := run("nft", "delete", "element", "ip", "ovsflow_hostport", "hostports", "{ "+nodeV4+" . tcp . 8093 }"); err != nil {
		t.Fatalf("nft delete element: %v: %s", err, out)
	}
	if got, want := strings.TrimSpace(portmapTool(t, "trace", "-pod", "shop/web-0", "-q", "node", "-host-ip", nodeV4)),
		"from the node: no node-local DNAT of tcp "+hp(nodeV4, 8093)+" (nft map hostports of table ovsflow_hostport): run reconcile"; got != want {
		t.Errorf("node-local element deleted: got %q, want %q", got, want)
	}

	// Outside the node's network namespace (here the pod's) the node's map
	// cannot be read: one error saying where to run it, not "run
	// reconcile".
	outside, err := run("nsenter", "--net="+p.NS.Path(), filepath.Join(binDir, "ovs-portmap"), "trace", "-ovsdb", ovsdbAddr, "-pod", "shop/web-0", "-q", "node", "-host-ip", nodeV4)
	if want := "this network namespace has no interface \"" + l.Bridge + "\" (the bridge's own): run it in the node's network namespace"; err == nil || !strings.Contains(outside, want) || strings.Contains(outside, "run reconcile") {
		t.Errorf("trace -q node outside the node's netns: %v, %q; want an error with %q", err, outside, want)
	}

	// Wiped: the host-port flows, then all of the attachment's.
	c := flows.AttachmentCookie(p.ID, "eth0")
	run("ovs-ofctl", "-O", "OpenFlow14", "del-flows", l.OFTarget(), c.Delete().String())
	if got := strings.TrimSpace(portmapTool(t, "trace", "-pod", "shop/web-0", "-q", "outside")); got != "no host-port flow of this attachment on the bridge: run reconcile" {
		t.Errorf("host-port flows wiped: got %q", got)
	}
	run("ovs-ofctl", "-O", "OpenFlow14", "del-flows", l.OFTarget(), c.AttachmentDelete().String())
	for _, q := range []string{"outside", "ra"} {
		if got := strings.TrimSpace(portmapTool(t, "trace", "-pod", "shop/web-0", "-q", q)); got != "no flow of this attachment on the bridge: run reconcile" {
			t.Errorf("every flow wiped, -q %s: got %q", q, got)
		}
	}
	if fl := portmapTool(t, "flows", "-pod", "shop/web-0"); !strings.Contains(fl, "no flow of this attachment on the bridge: run reconcile") {
		t.Errorf("flows after the wipe:\n%s", fl)
	}
	portmapTool(t, "reconcile")
	want := regexp.QuoteMeta("DNAT " + hp(nodeV4, 8093) + " -> " + hp(v4, 80) + ", zone 64000" + out)
	// Without -in-port: trace finds the uplink.
	if got := strings.TrimSpace(portmapTool(t, "trace", "-pod", "shop/web-0", "-host-ip", nodeV4)); !regexp.MustCompile("^" + want + "$").MatchString(got) {
		t.Errorf("after reconcile: got %q, want %s", got, want)
	}
	if got := strings.TrimSpace(portmapTool(t, "trace", "-pod", "shop/web-0", "-q", "node", "-host-ip", nodeV4)); !strings.HasPrefix(got, "from the node: nft DNAT "+hp(nodeV4, 8093)+" -> "+hp(v4, 80)) {
		t.Errorf("after reconcile, -q node: got %q", got)
	}
}
