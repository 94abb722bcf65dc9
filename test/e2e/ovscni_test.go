package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// ovsCNIConf is a network config of k8snetworkplumbingwg/ovs-cni (a single
// plugin, not a list), with "type" changed to ovs-bridge and the sandbox's
// database given the way ovs-cni takes it: a bare socket path.
func ovsCNIConf(t *testing.T, br string, extra map[string]any) *framework.CNI {
	t.Helper()
	c := map[string]any{"cniVersion": "0.4.0", "name": uniq("ovscni"), "type": "ovs-bridge", "bridge": br, "vlan": 100,
		"socket_file": strings.TrimPrefix(ovsdbAddr, "unix:")}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := libcni.ConfFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromConf(conf)
	if err != nil {
		t.Fatal(err)
	}
	return &framework.CNI{Cfg: libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil), List: list}
}

// An ovs-cni network config runs unchanged through ADD, CHECK and DEL: the
// port has ovs-cni's VLAN, and nothing of it is left after DEL.
func TestOVSCNIConfig(t *testing.T) {
	requireSandbox(t)
	if !strings.HasPrefix(ovsdbAddr, "unix:") {
		t.Skipf("sandbox OVSDB %s is not a unix socket", ovsdbAddr)
	}
	br := framework.NewBridge(t, "e2ebr")
	n := ovsCNIConf(t, br, map[string]any{"link_state_check_interval": 1000, "link_state_check_retries": 5})
	c := framework.NewContainer(t)
	r := n.MustAdd(t, c, "eth0", nil)
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	host := c.HostVeth("eth0")
	if tag := framework.Vsctl(t, "get", "Port", host, "tag"); tag != "100" {
		t.Errorf("tag: got %s, want 100", tag)
	}
	if len(r.Interfaces) != 2 || r.Interfaces[1].Sandbox == "" {
		t.Errorf("result interfaces: got %+v, want the host end and the container end", r.Interfaces)
	}
	if err := n.Check(c, "eth0", nil); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
		t.Errorf("ports %v left after DEL", ports)
	}
	if veths := framework.OurVeths(t); len(veths) != 0 {
		t.Errorf("veths %v left after DEL", veths)
	}
}

// ovs-cni's ofport_request is the port's ofport, and one another interface
// holds is code 7 naming the key, leaving nothing; ovnPort is the
// Interface's iface-id; an interface_type this plugin cannot make is code 7.
func TestOVSCNIKeys(t *testing.T) {
	requireSandbox(t)
	if !strings.HasPrefix(ovsdbAddr, "unix:") {
		t.Skipf("sandbox OVSDB %s is not a unix socket", ovsdbAddr)
	}
	br := framework.NewBridge(t, "e2ebr")
	const want = 4242
	n := ovsCNIConf(t, br, map[string]any{"ofport_request": want, "ovnPort": "lsp-a", "interface_type": "system"})
	a := framework.NewContainer(t)
	n.MustAdd(t, a, "eth0", nil)
	t.Cleanup(func() { n.Del(a, "eth0", nil) })
	host := a.HostVeth("eth0")
	if got := framework.Vsctl(t, "get", "Interface", host, "ofport"); got != strconv.Itoa(want) {
		t.Errorf("ofport: got %s, want %d", got, want)
	}
	if got := framework.Vsctl(t, "get", "Interface", host, "external_ids:iface-id"); got != `"lsp-a"` && got != "lsp-a" {
		t.Errorf("iface-id: got %s, want lsp-a", got)
	}
	if err := n.Check(a, "eth0", nil); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	framework.Vsctl(t, "set", "Interface", host, "external_ids:iface-id=lsp-other")
	if err := n.Check(a, "eth0", nil); err == nil || !strings.Contains(err.Error(), "ovnPort") {
		t.Errorf("CHECK with another iface-id: got %v, want an error naming ovnPort", err)
	}
	framework.Vsctl(t, "set", "Interface", host, "external_ids:iface-id=lsp-a")
	// A retried ADD of the same attachment gets its number back.
	n.MustAdd(t, a, "eth0", nil)
	if got := framework.Vsctl(t, "get", "Interface", host, "ofport"); got != strconv.Itoa(want) {
		t.Errorf("ofport after a retried ADD: got %s, want %d", got, want)
	}

	cases := []struct {
		name    string
		extra   map[string]any
		wantMsg string
	}{
		{"ofport held", map[string]any{"ofport_request": want}, `"ofport_request" 4242`},
		{"interface_type dpdk", map[string]any{"interface_type": "dpdk"}, `"interface_type" "dpdk"`},
		{"socket_file and ovsdb", map[string]any{"ovsdb": "unix:/run/ovsflow/other.sock"}, `"socket_file"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := ovsCNIConf(t, br, tc.extra)
			b := framework.NewContainer(t)
			_, err := m.Add(b, "eth0", nil)
			if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("ADD: got %v (code %d), want code 7 with %q", err, cniCode(err), tc.wantMsg)
			}
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, b.ID); len(ports) != 0 {
				t.Errorf("ports %v left", ports)
			}
			if err := m.Del(b, "eth0", nil); err != nil && tc.name == "ofport held" {
				t.Errorf("DEL after the refused ADD: %v", err)
			}
		})
	}
	if got := framework.Vsctl(t, "get", "Interface", host, "ofport"); got != strconv.Itoa(want) {
		t.Errorf("ofport of the first port after the refused ADD: got %s, want %d", got, want)
	}
}
