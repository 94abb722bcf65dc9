package e2e

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// What an operator meets first: errors that name the cause and the key.

// A bridge the plugin created that ovs-vswitchd cannot open (the kernel
// datapath on a node without the openvswitch module) is a permanent error
// (code 7) naming the reason, at once, not a "try again later" after the
// ofport timeout; the bridge is removed, so that the ADD with the config
// fixed works.
func TestOperatorUnopenableBridge(t *testing.T) {
	requireSandbox(t)
	if _, err := netlink.GenlFamilyGet("ovs_datapath"); err == nil {
		t.Skip("SKIPPED: this kernel has the openvswitch module: every bridge on the kernel datapath opens (TestOperatorUnknownDatapath covers a bridge that does not)")
	}
	br := uniq("e2enomod")
	t.Cleanup(func() { delBridge(br) })
	c := newContainer(t)
	broken := newCNI(t, conflist("1.0.0", "nomod", bridgeConf(br, t.TempDir(), map[string]any{"createBridge": true})))
	_, err := broken.add(c, "eth0", nil)
	if got := cniCode(err); got != 7 {
		t.Fatalf("ADD on the kernel datapath without the module: code %d (%v), want 7", got, err)
	}
	want := `"datapathType" unset ("system"): ovs-vswitchd cannot open bridge "` + br + `" on the kernel datapath: the kernel has no openvswitch module (generic netlink family "ovs_datapath" not found); removed the bridge, which this plugin had created; set "datapathType": "netdev" for the userspace datapath`
	if got := err.Error(); !strings.Contains(got, want) {
		t.Fatalf("ADD error:\n got %s\nwant %s", got, want)
	}
	if out := vsctl(t, "--no-headings", "--columns=name", "find", "Bridge", "name="+br); out != "" {
		t.Fatalf("bridge %s left after the failed ADD: %q", br, out)
	}
	fixed := newCNI(t, conflist("1.0.0", "nomod", bridgeConf(br, t.TempDir(), map[string]any{"createBridge": true, "datapathType": "netdev"})))
	fixed.mustAdd(t, c, "eth0", nil)
	if err := fixed.del(c, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
}

// A bridge that ovs-vswitchd cannot open, made by someone else, is the same
// permanent error, and stays: it is not ours to remove.
func TestOperatorUnknownDatapath(t *testing.T) {
	requireSandbox(t)
	br := uniq("e2ebaddp")
	vsctl(t, "add-br", br, "--", "set", "bridge", br, "datapath_type=nosuch")
	t.Cleanup(func() { delBridge(br) })
	c := newContainer(t)
	n := newCNI(t, conflist("1.0.0", "baddp", bridgeConf(br, t.TempDir(), nil)))
	_, err := n.add(c, "eth0", nil)
	if got := cniCode(err); got != 7 {
		t.Fatalf("ADD on a bridge of datapath type nosuch: code %d (%v), want 7", got, err)
	}
	want := `"datapathType" unset ("system"): ovs-vswitchd cannot open bridge "` + br + `" on the nosuch datapath (see ovs-vswitchd's log)`
	if got := err.Error(); !strings.Contains(got, want) {
		t.Fatalf("ADD error:\n got %s\nwant %s", got, want)
	}
	if out := vsctl(t, "--no-headings", "--columns=name", "find", "Bridge", "name="+br); out != br {
		t.Fatalf("bridge %s, not ours, is gone after the failed ADD: %q", br, out)
	}
}
