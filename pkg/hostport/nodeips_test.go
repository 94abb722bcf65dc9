package hostport

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/internal/nettest"
)

// TestNodeIPsUnderLinkChurn reads the node addresses while links come and
// go in the same netns, as they do on a node where other ADDs and DELs run.
// The kernel flags an address dump that such a change interrupted
// (NLM_F_DUMP_INTR), and plain netlink then returns ErrDumpInterrupted
// instead of the list: under 8 concurrent callers ovs-portmap ADD failed
// with `addresses of "bbr0": results may be incomplete or inconsistent`.
// NodeIPs must return the bridge's addresses every time.
func TestNodeIPsUnderLinkChurn(t *testing.T) {
	nettest.RequireRoot(t)
	n := nettest.NewNS(t)

	// The "bridge interface" and its addresses, then enough other links
	// with addresses that a dump takes more than one read.
	const bridge = "i14br0"
	want := []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("2001:db8:14::1")}
	addVeth := func(name string, addrs ...string) error {
		la := netlink.NewLinkAttrs()
		la.Name = name
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: name + "p"}); err != nil {
			return fmt.Errorf("veth %s: %w", name, err)
		}
		l, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("veth %s: %w", name, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("veth %s up: %w", name, err)
		}
		for _, a := range addrs {
			ipn, err := netlink.ParseIPNet(a)
			if err != nil {
				return err
			}
			if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipn}); err != nil {
				return fmt.Errorf("address %s on %s: %w", a, name, err)
			}
		}
		return nil
	}
	err := n.Do(func(ns.NetNS) error {
		if err := addVeth(bridge, "198.51.100.1/24", "2001:db8:14::1/64"); err != nil {
			return err
		}
		for i := range 64 {
			if err := addVeth(fmt.Sprintf("i14f%d", i), fmt.Sprintf("203.0.113.%d/32", i+1), fmt.Sprintf("2001:db8:14:1::%x/128", i+1)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Churn: a veth created and deleted over and over, as by other ADDs and DELs.
	stop := nettest.Churn(t, n, "i14churn")

	var fails []error
	deadline := time.Now().Add(2 * time.Second)
	calls := 0
	err = n.Do(func(ns.NetNS) error {
		for time.Now().Before(deadline) {
			calls++
			got, err := NodeIPs(bridge)
			if err != nil {
				fails = append(fails, err)
				continue
			}
			if !slices.Equal(got, want) {
				fails = append(fails, fmt.Errorf("got %v, want %v", got, want))
			}
		}
		return nil
	})
	churned := stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d NodeIPs calls while a link was created and deleted %d times", calls, churned)
	if len(fails) > 0 {
		interrupted := 0
		for _, e := range fails {
			if errors.Is(e, netlink.ErrDumpInterrupted) {
				interrupted++
			}
		}
		t.Errorf("%d of %d NodeIPs calls failed (%d interrupted dumps); first: %v", len(fails), calls, interrupted, fails[0])
	}
}
