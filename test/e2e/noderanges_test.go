package e2e

import (
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/noderanges"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// A network whose ovs-bridge names the node agent's confirmation of the pod
// ranges ("confirmedRanges") is served only while the file holds its IPAM
// ranges: with no file (a node just booted, before its agent read the
// Node) and with other ranges (the Node registered again with others, the
// conflist not rewritten yet), STATUS says unavailable (code 50) and ADD
// try again (code 11), naming the file and the ranges, and the refused ADD
// leaves no port and no address taken. With the ranges, both succeed; DEL
// always does.
func TestBridgeConfirmedRanges(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	dataDir := t.TempDir()
	confirm := filepath.Join(t.TempDir(), "run", "pod-ranges")
	n := framework.NewCNI(t, conflist("1.1.0", "confirm", framework.BridgeConf(br, ovsdbAddr, dataDir,
		map[string]any{noderanges.Key: confirm})), nil)
	c := framework.NewContainer(t)
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	ours := []netip.Prefix{netip.MustParsePrefix("2001:db8:c::/64"), netip.MustParsePrefix("192.0.2.0/24")}
	old := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/25"), netip.MustParsePrefix("2001:db8:c::/64")}

	refused := func(state, want string) {
		t.Helper()
		if err := n.Status(context.Background()); cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: STATUS %v, want code 50 saying %q", state, err, want)
		}
		_, err := n.Add(c, "eth0", nil)
		if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), confirm) {
			t.Errorf("%s: ADD %v, want code 11 saying %q and naming %s", state, err, want, confirm)
		}
		if ports := framework.Vsctl(t, "list-ports", br); ports != "" {
			t.Errorf("%s: the refused ADD left ports %q on %s", state, ports, br)
		}
		if taken := allocations(t, dataDir, "confirm"); len(taken) != 0 {
			t.Errorf("%s: the refused ADD left addresses taken: %v", state, taken)
		}
		if err := n.Del(c, "eth0", nil); err != nil {
			t.Errorf("%s: DEL after the refused ADD: %v", state, err)
		}
	}
	refused("no confirmation", "has not confirmed this network's pod ranges (192.0.2.0/24, 2001:db8:c::/64)")
	if _, err := noderanges.Write(confirm, old); err != nil {
		t.Fatal(err)
	}
	refused("other ranges confirmed", "are not the Node's the node agent confirmed in "+confirm+" (192.0.2.0/25, 2001:db8:c::/64)")

	if _, err := noderanges.Write(confirm, ours); err != nil {
		t.Fatal(err)
	}
	if err := n.Status(context.Background()); err != nil {
		t.Errorf("STATUS with the ranges confirmed: %v", err)
	}
	r := n.MustAdd(t, c, "eth0", nil)
	if ip := framework.AddrOf(t, r, false); !ours[1].Contains(netip.MustParseAddr(ip)) {
		t.Errorf("address %s, want one of %v", ip, ours[1])
	}
	// The confirmation withdrawn (the Node deleted): the pod that has its
	// address keeps it and goes as any other.
	if _, err := noderanges.Remove(confirm); err != nil {
		t.Fatal(err)
	}
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Errorf("DEL with the confirmation withdrawn: %v", err)
	}
	if ports := framework.Vsctl(t, "list-ports", br); ports != "" {
		t.Errorf("after DEL: ports %q on %s", ports, br)
	}
}
