package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// forgedMAC is the source MAC of the spoofer's forged frames.
var forgedMAC = net.HardwareAddr{0x02, 0x12, 0x7e, 0x00, 0x00, 0x01}

// spoofer sends, every millisecond from a container's netns, a gratuitous
// ARP claiming claim (from the interface's own MAC) and a UDP broadcast from
// forgedMAC and claim, as a hostile process with CAP_NET_ADMIN and CAP_NET_RAW
// would: it waits for eth0 to appear, brings it up itself and sends until it
// is stopped or eth0 is gone.
type spoofer struct {
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	sent     atomic.Int64
	started  atomic.Int64 // unix nanoseconds of the first frame
	last     atomic.Int64 // and of the last
	err      error        // read after done
	ended    string       // why it stopped; read after done
}

func startSpoofer(t *testing.T, c *framework.Container, claim netip.Addr) *spoofer {
	t.Helper()
	sp := &spoofer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sp.done)
		sp.err = c.NS.Do(func(ns.NetNS) error { return sp.run(claim) })
	}()
	t.Cleanup(sp.halt)
	return sp
}

func (sp *spoofer) run(claim netip.Addr) error {
	var l netlink.Link
	for {
		select {
		case <-sp.stop:
			return nil
		default:
		}
		var err error
		if l, err = netlink.LinkByName("eth0"); err == nil {
			break
		}
		time.Sleep(200 * time.Microsecond) // time is the subject: the first frame must race the plugin's own link up
	}
	_ = netlink.LinkSetUp(l) // the plugin may be doing the same
	mac := l.Attrs().HardwareAddr
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("spoofer socket: %w", err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6}
	copy(to.Addr[:], broadcastMAC)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		// Each frame carries its send time (in the ARP padding, in the UDP
		// data), so that a sniffer's lag cannot move it to another phase.
		now := binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano()))
		garp := ethFrame(broadcastMAC, mac, etherARP, append(arpPacket(1, mac, claim, make([]byte, 6), claim), now...))
		forged := ethFrame(broadcastMAC, forgedMAC, etherIPv4, udp4(claim, netip.MustParseAddr("255.255.255.255"), 9, 9, append([]byte("spof"), now...)))
		for _, f := range [][]byte{garp, forged} {
			err := unix.Sendto(fd, f, 0, to)
			switch {
			case err == nil:
				if sp.sent.Add(1) == 1 {
					sp.started.Store(time.Now().UnixNano())
				}
				sp.last.Store(time.Now().UnixNano())
			case errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV):
				sp.ended = err.Error()
				return nil // eth0 is gone (DEL)
			case errors.Is(err, unix.ENETDOWN), errors.Is(err, unix.ENOBUFS), errors.Is(err, unix.EAGAIN):
			default:
				return fmt.Errorf("spoofer: %w", err)
			}
		}
		select {
		case <-sp.stop:
			sp.ended = "stopped"
			return nil
		case <-tick.C:
		}
	}
}

// halt stops the spoofer and waits for it.
func (sp *spoofer) halt() {
	sp.stopOnce.Do(func() { close(sp.stop) })
	<-sp.done
}

// spoofed matches the spoofer's frames: the gratuitous ARP for claim from
// mac, and anything from forgedMAC.
func spoofed(mac net.HardwareAddr, claim netip.Addr) func(frame) bool {
	return func(f frame) bool {
		if f.src.String() == forgedMAC.String() {
			return true
		}
		_, sha, spa, _, ok := f.arp()
		return ok && spa == claim && sha.String() == mac.String()
	}
}

// sentAt is the send time a spoofer frame carries (zero for other frames).
func sentAt(f frame) time.Time {
	var b []byte
	if _, _, _, _, ok := f.arp(); ok && len(f.payload) >= 36 {
		b = f.payload[28:36]
	} else if _, _, d, ok := f.udp(); ok && len(d) >= 12 && string(d[:4]) == "spof" {
		b = d[4:12]
	}
	if b == nil {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b)))
}

// sentBetween matches frames that match and were sent in [from, to].
func sentBetween(from, to time.Time, match func(frame) bool) func(frame) bool {
	return func(f frame) bool {
		at := sentAt(f)
		return match(f) && !at.Before(from) && !at.After(to)
	}
}

// No unguarded moment during ADD and DEL. A spoofer in a new container's
// netns sends continuously (every ~1 ms) from before ADD until DEL has
// removed its interface: gratuitous ARPs claiming victim V's IPv4 and frames
// from a forged MAC. Sniffers at the outside and on the node's bridge
// interface count what passes. Protected: none at all (during ADD, after it,
// during DEL), and the node's neighbour entry of V still names V. Control
// (portSecurity false): they arrive during ADD and right up to DEL, and the
// node's entry of V names the spoofer.
func TestAttackSpoofDuringAddDel(t *testing.T) {
	for _, tc := range []struct {
		name string
		psec bool
	}{{"protected", true}, {"control-portSecurity-off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			v := l.join(l.network("addel-victim", nil, nil), "victim", nil)
			n := l.network("addel-spoofer", map[string]any{"portSecurity": tc.psec}, nil)
			if _, err := run("ping", "-c", "1", "-W", "2", v.v4.String()); err != nil {
				t.Fatalf("node -> victim: %v", err)
			}
			snOut := sniff(t, l.Outside.NS, "eth0", "outside")
			snNode := sniff(t, nil, l.Bridge, "node")
			c := framework.NewContainer(t)
			l.watch(c, "attacker")
			sp := startSpoofer(t, c, v.v4)

			addStart := time.Now()
			r, err := n.Add(c, "eth0", nil)
			addEnd := time.Now()
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			t.Cleanup(func() { n.Del(c, "eth0", nil) })
			drops := watchDrops(t, c)
			mac, _ := net.ParseMAC(r.Interfaces[1].Mac)
			// The spoofer goes on past ADD: frames of its are sent while the
			// container is attached.
			framework.Until(5*time.Second, func() bool { return sp.last.Load() > addEnd.UnixNano() })
			if sp.sent.Load() == 0 {
				sp.halt()
				t.Fatalf("the spoofer sent nothing: %v", sp.err)
			}
			lead := time.Duration(0)
			if s := sp.started.Load(); s != 0 {
				lead = addEnd.Sub(time.Unix(0, s))
			}
			// The control's spoofer keeps sending: past the node's ARP locktime
			// (1 s since the entry was last updated) it must win, within 2 s.
			// Protected, a negative check: the entry stays V's for 300 ms of
			// spoofing after ADD.
			window := 2 * time.Second
			if tc.psec {
				window = 300 * time.Millisecond
			}
			poisoned := framework.Until(window, func() bool { return neighMAC(t, nil, l.Bridge, v.v4) == mac.String() })

			drops.check(t, tc.psec, flows.ReasonSpoofed)
			delStart := time.Now()
			if err := n.Del(c, "eth0", nil); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			delEnd := time.Now()
			// The spoofer stops by itself once DEL has removed its eth0.
			framework.Until(2*time.Second, func() bool {
				select {
				case <-sp.done:
					return true
				default:
					return false
				}
			})
			sp.halt()
			if sp.err != nil {
				t.Fatal(sp.err)
			}
			t.Logf("spoofer: %d frames, the first %v before ADD returned, the last %v after DEL started (%s); ADD %v, DEL %v",
				sp.sent.Load(), lead.Round(time.Millisecond), time.Unix(0, sp.last.Load()).Sub(delStart).Round(time.Millisecond), sp.ended,
				addEnd.Sub(addStart).Round(time.Millisecond), delEnd.Sub(delStart).Round(time.Millisecond))

			match := spoofed(mac, v.v4)
			if tc.psec {
				// A negative check: nothing of the spoofer's comes out for
				// 200 ms after its last frame.
				framework.Consistently(t, 200*time.Millisecond, "spoofed frames", func() error {
					for _, sn := range []*sniffer{snOut, snNode} {
						if all := sn.count(match); all > 0 {
							return fmt.Errorf("%s received %d, want none: %v", sn.where, all, sn.first(4, match))
						}
					}
					return nil
				})
			}
			for _, sn := range []*sniffer{snOut, snNode} {
				inAdd := sn.count(sentBetween(addStart, addEnd, match))
				inDel := sn.count(sentBetween(delStart, delEnd, match))
				upToDel := sn.count(sentBetween(delStart.Add(-300*time.Millisecond), delEnd, match))
				if all := sn.count(match); tc.psec && all > 0 {
					t.Errorf("%s received %d spoofed frames (%d sent during ADD, %d during DEL), want none: %v", sn.where, all, inAdd, inDel, sn.first(4, match))
				}
				// The control shows the spoofed frames arrive while the
				// container is attached. Whether one sent during ADD or DEL
				// arrives depends on how soon ADD connects the link (after its
				// flows, with or without port security) and DEL cuts it, and
				// on how long the userspace datapath queues frames.
				if attached := sn.count(sentBetween(addStart, delEnd, match)); !tc.psec && attached == 0 {
					t.Errorf("control: %s received no spoofed frame sent between ADD and the end of DEL (%d during ADD, %d in the 300 ms before DEL and during it), want some", sn.where, inAdd, upToDel)
				}
				t.Logf("%s: %d spoofed frames sent during ADD, %d during DEL received", sn.where, inAdd, inDel)
			}
			if poisoned == tc.psec {
				t.Errorf("the node's neighbour entry of %s names the spoofer %s: %v, want %v", v.v4, mac, poisoned, !tc.psec)
			}
			if tc.psec {
				l.normal(t)
			}
		})
	}
}

// vswitchdCtl is the control socket of the sandbox's ovs-vswitchd.
func vswitchdCtl(t *testing.T) string {
	t.Helper()
	dir := filepath.Dir(strings.TrimPrefix(ovsdbAddr, "unix:"))
	b, err := os.ReadFile(filepath.Join(dir, "ovs-vswitchd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "ovs-vswitchd."+strings.TrimSpace(string(b))+".ctl")
}

func appctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run("ovs-appctl", append([]string{"-t", vswitchdCtl(t)}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// restoreNode puts the operator's node addresses back on the bridge
// interface that a restarted ovs-vswitchd re-created.
func (l *lab) restoreNode(t *testing.T) {
	t.Helper()
	for _, args := range [][]string{
		{"addr", "replace", nodeV4 + "/24", "dev", l.Bridge},
		{"addr", "replace", nodeV4b + "/24", "dev", l.Bridge},
		{"addr", "replace", nodeV6 + "/64", "dev", l.Bridge, "nodad"},
		{"link", "set", l.Bridge, "up"},
	} {
		framework.Until(2*time.Second, func() bool { _, err := run("ip", args...); return err == nil })
	}
	run("ethtool", "-K", l.Bridge, "tx", "off")
}

// The restart window. A continuous spoofer in an attached container, `kill
// -9` of ovs-vswitchd, a restart and `ovs-portmap reconcile -watch`. Protected
// (fail_mode=secure, as docs/operations.md tells operators; ovs-bridge installs the
// base NORMAL flow itself): no spoofed frame reaches the outside, and after
// reconcile the normal path (pings, host ports, hairpin) works again.
// Control (fail_mode standalone, the default): spoofed frames get through
// until reconcile has put the flows back.
func TestAttackRestartWindow(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		blocked    bool
	}{{"protected-fail-mode-secure", "secure", true}, {"control-fail-mode-standalone", "standalone", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			framework.Vsctl(t, "set-fail-mode", l.Bridge, tc.mode)
			n := l.network("restart-window", nil, map[string]any{})
			v := l.join(n, "victim", nil)
			a := l.join(n, "attacker", nil)
			l.normal(t)
			if t.Failed() {
				t.FailNow()
			}
			if tc.blocked {
				out, _ := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows", l.OFTarget(), "table=0,"+flows.SuiteDelete().String())
				base := false
				for _, line := range strings.Split(out, "\n") {
					base = base || strings.Contains(line, " priority=0 ") && strings.HasSuffix(strings.TrimSpace(line), "actions=NORMAL")
				}
				if !base {
					t.Errorf("secure bridge: no base priority=0 NORMAL flow with the suite cookie:\n%s", out)
				}
			}

			// On the kernel datapath a watch that sees ovs-vswitchd die has
			// the next one keep the datapath's flows (flow-restore-wait):
			// then even a standalone bridge opens no window. The control
			// shows the window of a restart without it: its watch starts
			// after the restart.
			lateWatch := !tc.blocked && !framework.Userspace()
			if !lateWatch {
				startReconcileWatch(t)
			}

			snOut := sniff(t, l.Outside.NS, "eth0", "outside")
			sp := startSpoofer(t, a.Container, v.v4)
			framework.Until(5*time.Second, func() bool { return sp.sent.Load() > 0 })
			killed := time.Now()
			restartVswitchd(t, nil)
			l.restoreNode(t)
			if lateWatch {
				// The window is open until the watch starts: it is shown
				// once a spoofed frame has gone through it.
				framework.Until(5*time.Second, func() bool { return snOut.count(spoofed(a.mac, v.v4)) > 0 })
				startReconcileWatch(t)
			}
			var answer string
			var err error
			if !framework.Until(10*time.Second, func() bool {
				answer, err = framework.Dial(l.Outside.NS, "tcp", hp(nodeV4, normalHostPort))
				return err == nil && strings.HasPrefix(answer, "hello from "+l.np.p1.ID)
			}) {
				t.Fatalf("host port did not answer within %v of the restart: %q, %v", framework.Scaled(10*time.Second), answer, err)
			}
			back := time.Since(killed)
			// Reconcile has put the attacker's port security back on
			// either bridge: from then on its drop counter moves.
			drops := watchDrops(t, a.Container)
			framework.Until(5*time.Second, func() bool {
				return dropCounts(t, a.Container)[flows.ReasonSpoofed] > drops.before[flows.ReasonSpoofed]
			})
			drops.check(t, true, flows.ReasonSpoofed)
			sp.halt()
			if sp.err != nil {
				t.Fatal(sp.err)
			}
			match := spoofed(a.mac, v.v4)
			got := snOut.count(match)
			t.Logf("host port back %v after the kill; spoofer sent %d frames, %d reached the outside", back.Round(time.Millisecond), sp.sent.Load(), got)
			if tc.blocked && got > 0 {
				t.Errorf("%d spoofed frames reached the outside across the restart, want none: %v", got, snOut.first(4, match))
			}
			if !tc.blocked && got == 0 {
				t.Errorf("control: no spoofed frame reached the outside across the restart of a standalone bridge")
			}
			l.normal(t)
		})
	}
}

// conntrackCount counts the userspace datapath's conntrack entries per zone.
func conntrackCount(t *testing.T, zones ...int) map[int]int {
	t.Helper()
	out := appctl(t, "dpctl/dump-conntrack")
	got := map[int]int{}
	for _, line := range strings.Split(out, "\n") {
		for _, z := range zones {
			if strings.Contains(line, fmt.Sprintf("zone=%d", z)) {
				got[z]++
			}
		}
	}
	return got
}

// restoreCTLimits puts the datapath's conntrack zone limits of zones back as
// they were when it was called, at the end of the test.
func restoreCTLimits(t *testing.T, zones ...int) {
	t.Helper()
	before := appctl(t, "dpctl/ct-get-limits")
	t.Cleanup(func() {
		for _, z := range zones {
			key := fmt.Sprintf("zone=%d,", z)
			limit := ""
			for _, f := range strings.Fields(before) {
				if strings.HasPrefix(f, key) {
					limit, _, _ = strings.Cut(f, ",count=") // zone=N,limit=M
				}
			}
			if limit != "" {
				run("ovs-appctl", "-t", vswitchdCtl(t), "dpctl/ct-set-limits", limit)
			} else {
				run("ovs-appctl", "-t", vswitchdCtl(t), "dpctl/ct-del-limits", fmt.Sprintf("zone=%d", z))
			}
			run("ovs-appctl", "-t", vswitchdCtl(t), "dpctl/flush-conntrack", fmt.Sprintf("zone=%d", z))
		}
	})
}

// Conntrack exhaustion. Container A floods a UDP host port of container S
// with datagrams from 3000 source ports (raw frames from A's own MAC and
// address to the node address). Protected ("containerConntrackLimit": 300,
// "conntrackLimit": 5000): connections from containers to host ports live in
// zone 64002, which holds 250-300 entries after the flood; the outside
// clients' zones carry the configured limit, and the outside's TCP and UDP
// connections to host ports still work. Control (no limit keys): the flood
// leaves more than 300 entries in the pipeline's zones (64000-64002), which
// is what the limit bounds.
func TestAttackConntrackFlood(t *testing.T) {
	const flood = 3000
	for _, tc := range []struct {
		name    string
		pmExtra map[string]any
	}{
		{"protected-containerConntrackLimit-300", map[string]any{"containerConntrackLimit": 300, "conntrackLimit": 5000}},
		{"control-no-limits", map[string]any{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			zones := []int{64000, 64001, 64002}
			l := newLab(t) // dpctl/ needs a datapath: a bridge
			restoreCTLimits(t, zones...)
			for _, z := range zones {
				appctl(t, "dpctl/flush-conntrack", fmt.Sprintf("zone=%d", z))
			}
			n := l.network("ct-flood", nil, tc.pmExtra)
			srv := l.join(n, "server", mappings(pm(5360, 53, "udp", ""), pm(8096, 80, "tcp", "")))
			srv.ServeUDP(t, 53)
			srv.ServeTCP(t, 80)
			a := l.join(n, "attacker", nil)
			s := sender(t, a.NS, "eth0")
			gw := l.bridgeMAC(t)
			node := netip.MustParseAddr(nodeV4)
			start := time.Now()
			for i := 0; i < flood; i++ {
				mustSend(t, s, ethFrame(gw, a.mac, etherIPv4, udp4(a.v4, node, uint16(20000+i), 5360, []byte("conntrack flood"))))
				if i%50 == 49 {
					time.Sleep(2 * time.Millisecond) // time is the subject: the pace that keeps the flood within the datapath's receive queue
				}
			}
			// The flood has been through the datapath once the zones hold
			// what it leaves: the limit's worth, or (the control) more.
			_, limited := tc.pmExtra["containerConntrackLimit"]
			framework.Until(5*time.Second, func() bool {
				c := conntrackCount(t, zones...)
				if limited {
					return c[64002] >= 250
				}
				return c[64000]+c[64001]+c[64002] > 300
			})
			if limited {
				// A negative check: the limit holds for 300 ms more.
				framework.Consistently(t, 300*time.Millisecond, "zone 64002 after the flood", func() error {
					if n := conntrackCount(t, zones...)[64002]; n > 300 {
						return fmt.Errorf("%d entries, want at most the limit, 300", n)
					}
					return nil
				})
			}
			got := conntrackCount(t, zones...)
			t.Logf("%d datagrams in %v; conntrack entries per zone %v", flood, time.Since(start).Round(time.Millisecond), got)
			// The metrics see the same entries, and the zone's limit.
			wantLimit := float64(flows.DefaultContainerLimit)
			if _, limited := tc.pmExtra["containerConntrackLimit"]; limited {
				wantLimit = 300
			}
			// (Read a moment later: within 5% of the dump's count.)
			if entries, limit := zoneMetrics(t, 64002); entries < 0.95*float64(got[64002]) || entries > 1.05*float64(got[64002]) || limit != wantLimit {
				t.Errorf("metrics of zone 64002: %v entries, limit %v; want %d (dpctl/dump-conntrack), %v", entries, limit, got[64002], wantLimit)
			}
			if _, limited := tc.pmExtra["containerConntrackLimit"]; limited {
				if got[64002] > 300 || got[64002] < 250 {
					t.Errorf("zone 64002 (containers -> host ports) holds %d entries after the flood, want 250-300 (the limit)", got[64002])
				}
				limits := appctl(t, "dpctl/ct-get-limits", "zone=64000,64001,64002")
				for _, want := range []string{"zone=64000,limit=5000", "zone=64001,limit=5000", "zone=64002,limit=300"} {
					if !strings.Contains(limits, want) {
						t.Errorf("conntrack limits: want %s in\n%s", want, limits)
					}
				}
			} else if total := got[64000] + got[64001] + got[64002]; total <= 300 {
				t.Errorf("control: the flood left %d entries in the pipeline's zones, want more than 300", total)
			}
			expect(t, l.Outside.NS, "udp", hp(nodeV4, 5360), srv.Container, outsideV4)
			expect(t, l.Outside.NS, "tcp", hp(nodeV4, 8096), srv.Container, outsideV4)
			expect(t, l.Outside.NS, "tcp", hp(nodeV6, 8096), srv.Container, outsideV6)
			if _, limited := tc.pmExtra["containerConntrackLimit"]; limited {
				l.normal(t)
			}
		})
	}
}
