package podroutes

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestDumpsUnderChurn: route and address dumps while the tables change
// under them (a busy node): the kernel marks such dumps interrupted
// (NLM_F_DUMP_INTR, netlink.ErrDumpInterrupted); List, LinkOf and Local
// retry them (netlinksafe) and never fail for it. The control, a raw dump,
// shows that the churn does interrupt dumps.
func TestDumpsUnderChurn(t *testing.T) {
	l := vethInPrivateNetns(t, "the dumps under churn", "up0", "up1")
	ns, err := netns.Get() // the private one, for the churn's thread
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ad, _ := netlink.ParseAddr("203.0.113.1/24")
	if err := netlink.AddrAdd(l, ad); err != nil {
		t.Fatal(err)
	}
	// Enough addresses and routes of ours that a dump takes several messages.
	for i := range 1000 {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(172, 16, byte(i>>8), byte(i)).To4(), Mask: net.CIDRMask(32, 32)}}
		if err := netlink.AddrAdd(l, a); err != nil {
			t.Fatal(err)
		}
	}
	tb := Table{Protocol: DefaultProtocol}
	for i := range 2000 {
		dst := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
		if err := netlink.RouteAdd(tb.netlinkRoute(Route{Dst: dst, Via: netip.MustParseAddr("203.0.113.2")}, l.Attrs().Index)); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the churn, in the same netns
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := netns.Set(ns); err != nil {
			return
		}
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4(198, 18, 0, 0).To4(), Mask: net.CIDRMask(24, 32)}}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 19, 0, 1).To4(), Mask: net.CIDRMask(24, 32)}}
		for {
			select {
			case <-stop:
				return
			default:
			}
			netlink.RouteAdd(r)
			netlink.AddrAdd(l, a)
			netlink.RouteDel(r)
			netlink.AddrDel(l, a)
		}
	}()
	defer func() { close(stop); <-done }()
	interrupted := 0
	for range 200 {
		_, rerr := netlink.RouteList(nil, netlink.FAMILY_V4) //nolint:forbidigo // the control
		_, aerr := netlink.AddrList(nil, netlink.FAMILY_V4)  //nolint:forbidigo // the control
		if errors.Is(rerr, netlink.ErrDumpInterrupted) || errors.Is(aerr, netlink.ErrDumpInterrupted) {
			interrupted++
		}
		// Past its attempts netlinksafe returns what the last dump read,
		// with no error: the assertion is on the error, not the data.
		if _, err := tb.List(); err != nil {
			t.Fatalf("List under churn: %v", err)
		}
		if _, err := LinkOf(netip.MustParseAddr("203.0.113.1")); errors.Is(err, netlink.ErrDumpInterrupted) {
			t.Fatalf("LinkOf under churn: %v", err)
		}
		if _, err := Local(); err != nil {
			t.Fatalf("Local under churn: %v", err)
		}
	}
	t.Logf("raw dumps interrupted: %d of 200", interrupted)
	if interrupted == 0 {
		t.Error("the churn interrupted no raw dump: the test shows nothing")
	}
}
