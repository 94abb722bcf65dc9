package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// assertNothingLeft fails if an attachment of container id left a port, its
// host veth, or an allocation of network in dataDir.
func assertNothingLeft(t *testing.T, id, dataDir, network string) {
	t.Helper()
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, id); len(ports) != 0 {
		t.Errorf("ports %v left", ports)
	}
	if _, err := netlink.LinkByName((&framework.Container{ID: id}).HostVeth("eth0")); err == nil {
		t.Errorf("host veth %s left", (&framework.Container{ID: id}).HostVeth("eth0"))
	}
	if got := allocations(t, dataDir, network); len(got) != 0 {
		t.Errorf("allocations %v left", got)
	}
}

// Runtime-supplied MACs that another port of the bridge, the bridge itself
// or its uplink already uses: ADD fails with code 7 naming "mac" and leaves
// nothing behind. Given by runtimeConfig (capability "mac"), args.cni.mac or
// CNI_ARGS MAC=. Control: the same ADD with a fresh MAC works and carries
// traffic. (A duplicate MAC is no property of the attachment that port
// security could be off for; the refusal is unconditional, so the control is
// the same request with a unique MAC.)
func TestAttackRuntimeMAC(t *testing.T) {
	l := newLab(t)
	victim := l.join(l.network("mac-victim", nil, nil), "victim", nil)
	uplinkMAC := func() string {
		ifi, err := net.InterfaceByName(l.uplink(t))
		if err != nil {
			t.Fatal(err)
		}
		return ifi.HardwareAddr.String()
	}()
	cases := []struct {
		name, mac, via string
	}{
		{"runtimeConfig-other-containers-MAC", victim.mac.String(), "runtimeConfig"},
		{"runtimeConfig-bridge-MAC", l.bridgeMAC(t).String(), "runtimeConfig"},
		{"runtimeConfig-uplink-MAC", uplinkMAC, "runtimeConfig"},
		{"args-cni-mac-other-containers-MAC", victim.mac.String(), "args"},
		{"CNI_ARGS-MAC-other-containers-MAC", strings.ToUpper(victim.mac.String()), "CNI_ARGS"},
		{"control-fresh-MAC", "02:00:00:12:12:01", "runtimeConfig"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[string]any{"capabilities": map[string]bool{"mac": true}}
			if tc.via == "args" {
				extra["args"] = map[string]any{"cni": map[string]any{"mac": tc.mac}}
			}
			name := fmt.Sprintf("runtime-mac%d", i)
			n := l.network(name, extra, nil)
			c := framework.NewContainer(t)
			rt := c.RT("eth0", nil)
			switch tc.via {
			case "runtimeConfig":
				rt.CapabilityArgs = map[string]any{"mac": tc.mac}
			case "CNI_ARGS":
				rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"MAC", tc.mac}}
			}
			_, err := n.Cfg.AddNetworkList(context.Background(), n.List, rt)
			t.Cleanup(func() { n.Cfg.DelNetworkList(context.Background(), n.List, rt) })
			if strings.HasPrefix(tc.name, "control") {
				if err != nil {
					t.Fatalf("ADD with a fresh MAC %s: %v", tc.mac, err)
				}
				if err := c.Ping("192.0.2.1"); err != nil {
					t.Errorf("ping the gateway with the fresh MAC: %v", err)
				}
				return
			}
			if err == nil || cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(strings.ToLower(err.Error()), "mac") {
				t.Fatalf("ADD with %s MAC %s (in use on the bridge): got %v (code %d), want code 7 naming \"mac\"", tc.via, tc.mac, err, cniCode(err))
			}
			assertNothingLeft(t, c.ID, l.dir, name)
		})
	}
	if err := victim.Ping("192.0.2.1"); err != nil {
		t.Errorf("victim after the attempts: %v", err)
	}
	l.normal(t)
}

// CNI_NETNS naming the plugin's own netns (the node's: this test runs
// there) on an L2-only ADD: code 4 naming CNI_NETNS, nothing created.
// Control: the same ADD with a container's netns works.
func TestAttackNodeNetNS(t *testing.T) {
	l := newLab(t)
	const ifname = "nodens0"
	for _, tc := range []struct{ name, netns string }{
		{"proc-self", "/proc/self/ns/net"},
		{"sandbox-netns-path", filepath.Join("/run/netns", sandboxNS)},
		{"control-container-netns", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := l.network("node-netns", map[string]any{"ipam": nil, "isGateway": false}, nil)
			c := framework.NewContainer(t)
			rt := c.RT(ifname, nil)
			if tc.netns != "" {
				rt.NetNS = tc.netns
			}
			_, err := n.Cfg.AddNetworkList(context.Background(), n.List, rt)
			host := c.HostVeth(ifname)
			t.Cleanup(func() {
				n.Cfg.DelNetworkList(context.Background(), n.List, rt)
				run("ovs-vsctl", "--db="+ovsdbAddr, "--if-exists", "del-port", host)
				run("ip", "link", "del", host)
				run("ip", "link", "del", ifname)
			})
			if tc.netns == "" {
				if err != nil {
					t.Fatalf("ADD into a container netns: %v", err)
				}
				if err := c.NS.Do(func(ns.NetNS) error { _, err := netlink.LinkByName(ifname); return err }); err != nil {
					t.Errorf("container interface: %v", err)
				}
				return
			}
			if err == nil || cniCode(err) != types.ErrInvalidEnvironmentVariables || !strings.Contains(err.Error(), "CNI_NETNS") {
				t.Errorf("ADD with CNI_NETNS=%s (the plugin's own netns): got %v (code %d), want code 4 naming CNI_NETNS", tc.netns, err, cniCode(err))
			}
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
				t.Errorf("ports %v left", ports)
			}
			for _, name := range []string{host, ifname} {
				if _, err := netlink.LinkByName(name); err == nil {
					t.Errorf("interface %s left in the node", name)
				}
			}
		})
	}
}
