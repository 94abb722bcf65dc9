package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// The limits of the shaping tests: 20 Mbit/s each way, with bursts of half
// a second (a policer needs a burst of a good fraction of the rate for TCP
// to reach it; the measurement starts after the burst is spent).
const (
	bwRate  = 20_000_000
	bwBurst = 10_000_000
	// bwTolerance is how far from bwRate an achieved rate may be. The
	// rates count Ethernet frames, the receiver payload: TCP's goodput is
	// about 96% of the rate, UDP's (1200-byte datagrams) 97%.
	bwTolerance = 0.15
	// bwControl is how far above the band's top the same traffic gets
	// without the plugin, at least: the shaped figure is the limit's. 1.3:
	// clearly above what the limit lets through, which the emulated
	// guest's UDP sender still offers beside a loaded host (CI's guest
	// beside the three-node cluster: 33-77 Mbit/s unshaped, the sender
	// offering 42-90), where twice the top was out of the sender's reach.
	bwControl = 1.3
	// bwUDPRate is the rate the UDP sender offers: 5 times the limit.
	bwUDPRate = 5 * bwRate
)

// bwWarm and bwWindow: the rate is the bytes delivered in bwWindow, after
// bwWarm of traffic (the burst and TCP's slow start). A rate is bytes over
// a measured interval, not a time asserted: a slower machine needs a longer
// window only up to a point (the burst is 3 % of 16 s at the rate), so the
// emulated guest's ten-fold scale is capped.
var (
	bwWarm   = min(framework.Scaled(2*time.Second), 4*time.Second)
	bwWindow = min(framework.Scaled(8*time.Second), 16*time.Second)
)

// doIn runs f in netns n, or where the test runs (the node) when n is nil.
func doIn(n ns.NetNS, f func() error) error {
	if n == nil {
		return f()
	}
	return n.Do(func(ns.NetNS) error { return f() })
}

var bwPort atomic.Int32

// measure is one rate measurement, in bits per second over its window: what
// the sender handed its socket (offered: a sender the shaper's queue holds
// back offers what gets through: TCP's, and on the kernel datapath the
// node's own UDP into the HTB queue) and what the receiver read (got).
type measure struct{ offered, got float64 }

func (m measure) String() string {
	return fmt.Sprintf("%.2f Mbit/s (sender offered %.2f)", m.got/1e6, m.offered/1e6)
}

// rate sends network ("tcp" or "udp") traffic from netns from to a
// receiver in netns to (nil: the node) that listens on ip, and measures
// it in a window of d after warm: the payload bytes the sender wrote and
// the receiver read, over the window's measured length. TCP sends as fast
// as it can; UDP offers bwUDPRate in 1200-byte datagrams.
func rate(t *testing.T, network string, from, to ns.NetNS, ip string, warm, d time.Duration) measure {
	t.Helper()
	port := 5201 + int(bwPort.Add(1))
	addr := net.JoinHostPort(ip, fmt.Sprint(port))
	var got, sent atomic.Int64
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	err := doIn(to, func() error {
		if network == "udp" {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				return err
			}
			closers = append(closers, pc)
			go func() {
				buf := make([]byte, 65536)
				for {
					n, _, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					got.Add(int64(n))
				}
			}()
			return nil
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		closers = append(closers, l)
		go func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, 65536)
			for {
				n, err := c.Read(buf)
				got.Add(int64(n))
				if err != nil {
					return
				}
			}
		}()
		return nil
	})
	if err != nil {
		t.Fatalf("receiver on %s: %v", addr, err)
	}
	var conn net.Conn
	if err := doIn(from, func() (err error) { conn, err = net.DialTimeout(network, addr, 3*time.Second); return err }); err != nil {
		t.Fatalf("sender to %s: %v", addr, err)
	}
	closers = append(closers, conn)
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if network == "tcp" {
			buf := make([]byte, 64<<10)
			for !stop.Load() {
				conn.SetWriteDeadline(time.Now().Add(time.Second))
				n, err := conn.Write(buf)
				sent.Add(int64(n))
				if err != nil && !os.IsTimeout(err) {
					return
				}
			}
			return
		}
		// Paced in rounds of 2 ms: what is due since the start is sent.
		buf := make([]byte, 1200)
		start, offered := time.Now(), 0.0
		for !stop.Load() {
			due := time.Since(start).Seconds() * bwUDPRate / 8
			for ; offered < due; offered += float64(len(buf)) {
				if n, err := conn.Write(buf); err == nil { // ENOBUFS and refused datagrams count as lost
					sent.Add(int64(n))
				}
			}
			time.Sleep(2 * time.Millisecond) // time is the subject: the sender's pace
		}
	}()
	time.Sleep(warm) // time is the subject: a rate is bytes over a measured interval, after the burst (see bwWarm)
	b0, s0, t0 := got.Load(), sent.Load(), time.Now()
	time.Sleep(d) // the measured interval
	b1, s1, t1 := got.Load(), sent.Load(), time.Now()
	stop.Store(true)
	wg.Wait()
	secs := t1.Sub(t0).Seconds()
	return measure{offered: float64(s1-s0) * 8 / secs, got: float64(b1-b0) * 8 / secs}
}

// bwAttempts is how many times a rate below what it should be is measured
// before it counts: a sender or receiver starved of CPU (a loaded machine,
// the emulated guest) delivers less than a limit or a link allows, but
// never more, so a rate above the band fails at once.
const bwAttempts = 3

// bwEmulatedFloor is the band's lower edge, as a fraction of the limit,
// under software emulation (hack/ovs-vm.sh without KVM): there a rate below
// the limit is a figure of the emulation's speed, not of the datapath (TCP
// into a shaped container got 15.9 Mbit/s of 20 three times in a row while
// CI loaded the host, 19.0 when it was quiet), and the guest proves
// behaviour, not times. A quarter still catches a limit in the wrong unit
// or a queue that starves its port; the top edge stays.
const bwEmulatedFloor = 0.25

// wantRate checks the shaped rate m measures against bwRate and
// bwTolerance: the band, both edges (the lower one bwEmulatedFloor under
// software emulation).
func wantRate(t *testing.T, what string, m func() measure) {
	t.Helper()
	lo, hi := bwRate*(1-bwTolerance), bwRate*(1+bwTolerance)
	if framework.Slowdown > 1 {
		lo = bwRate * bwEmulatedFloor
	}
	wantMeasure(t, what, m, func(got float64) (ok, again bool) { return got >= lo && got <= hi, got < lo },
		fmt.Sprintf("%.1f-%.1f Mbit/s (limit %.1f)", lo/1e6, hi/1e6, bwRate/1e6))
}

// wantCapped checks that the rate m measures is under the band's top and
// not nothing: the limit caps a sender that overruns it. It is what the
// ingress limit proves with UDP: the HTB queue that holds it drains in the
// kernel's softirq time, which a CPU hog starves (ksoftirqd): measured on
// netdev beside stress-ng on both cores, UDP offered at 100 Mbit/s got
// 3.3-9.0 Mbit/s through a 20 Mbit/s queue, the unshaped control 100 and
// TCP through the same queue 19.1; the emulated guest's timers do the same
// (10.4-10.6 while the host was loaded). TCP proves the lower edge (its
// sender waits for the queue, and it held under the same hog).
func wantCapped(t *testing.T, what string, m func() measure) {
	t.Helper()
	hi := bwRate * (1 + bwTolerance)
	wantMeasure(t, what, m, func(got float64) (ok, again bool) { return got > 0 && got <= hi, got == 0 },
		fmt.Sprintf("more than 0 and at most %.1f Mbit/s (limit %.1f)", hi/1e6, bwRate/1e6))
}

// wantUnshaped checks that the control rate m measures is far above the
// band: else the shaped figures would prove nothing.
func wantUnshaped(t *testing.T, what string, m func() measure) {
	t.Helper()
	floor := bwControl * bwRate * (1 + bwTolerance)
	wantMeasure(t, what+" (no limit)", m, func(got float64) (ok, again bool) { return got >= floor, true },
		fmt.Sprintf("at least %.1f Mbit/s", floor/1e6))
}

// wantMeasure measures until in says a rate passes, or until one fails that
// in says is not worth another measure, or bwAttempts have failed.
func wantMeasure(t *testing.T, what string, m func() measure, in func(float64) (ok, again bool), want string) {
	t.Helper()
	for i := 1; ; i++ {
		got := m()
		ok, again := in(got.got)
		switch {
		case ok:
			t.Logf("%s: %v, want %s", what, got, want)
		case again && i < bwAttempts:
			t.Logf("%s: %v, want %s (measure %d of %d): again", what, got, want, i, bwAttempts)
			continue
		default:
			t.Errorf("%s: %v, want %s (%d measures)", what, got, want, i)
		}
		return
	}
}

// bwState is what Open vSwitch holds of our limits for one attachment.
type bwState struct {
	qos, queues []string // QoS and Queue rows tagged with the attachment
	portQoS     string   // the port's qos column
	flows       []string // flows with its bandwidth cookie
	meter       string   // its meter, as dump-meters prints it ("" none)
}

func bwStateOf(h *framework.OVSHost, t *testing.T, c *framework.Container, ifname string) bwState {
	t.Helper()
	var s bwState
	sel := []string{"external_ids:ovsflow.io/owner=ovsflow-cni", "external_ids:ovsflow.io/container-id=" + c.ID, "external_ids:ovsflow.io/ifname=" + ifname}
	for _, tbl := range []struct {
		name string
		to   *[]string
	}{{"QoS", &s.qos}, {"Queue", &s.queues}} {
		out := framework.Vsctl(t, append([]string{"--no-headings", "-f", "csv", "--columns=other_config", "find", tbl.name}, sel...)...)
		if out != "" {
			*tbl.to = strings.Split(out, "\n")
		}
	}
	if out, err := run("ovs-vsctl", "--db="+ovsdbAddr, "--timeout=10", "get", "Port", c.HostVeth(ifname), "qos"); err == nil {
		s.portQoS = strings.TrimSpace(out)
	}
	s.flows = h.FlowsOf(t, flows.AttachmentCookie(c.ID, ifname).WithKind(flows.CookieKindBandwidth))
	if of, err := run("ovs-vsctl", "--db="+ovsdbAddr, "--timeout=10", "get", "Interface", c.HostVeth(ifname), "ofport"); err == nil {
		port, err := strconv.ParseUint(strings.TrimSpace(of), 10, 32)
		if err != nil {
			t.Fatalf("ofport %q: %v", of, err)
		}
		out, err := run("ovs-ofctl", "-O", "OpenFlow14", "dump-meters", h.OFTarget(), fmt.Sprintf("meter=%d", flows.MeterOf(uint32(port))))
		if err != nil {
			t.Fatal(err)
		}
		// A meter that does not exist is an OFPT_ERROR and the request.
		if _, body, _ := strings.Cut(out, "\n"); strings.Contains(body, "bands=") {
			s.meter = strings.Join(strings.Fields(body), " ")
		}
	}
	return s
}

// wantLimits checks that both limits of c are in Open vSwitch.
func wantLimits(h *framework.OVSHost, t *testing.T, c *framework.Container, ifname string) {
	t.Helper()
	s := bwStateOf(h, t, c, ifname)
	wantQoS := fmt.Sprintf(`"{max-rate=""%d""}"`, bwRate)
	if len(s.qos) != 1 || s.qos[0] != wantQoS || len(s.queues) != 1 || !strings.Contains(s.queues[0], fmt.Sprintf(`burst=""%d""`, bwBurst)) ||
		s.portQoS == "[]" || s.portQoS == "" {
		t.Errorf("QoS of %s: got %+v, want one QoS %s used by the port, one queue with the burst", c.ID, s, wantQoS)
	}
	if len(s.flows) != 1 || !strings.Contains(s.flows[0], "priority=430") || !strings.Contains(s.flows[0], "actions=meter:") {
		t.Errorf("egress flows of %s: got %q, want the meter flow", c.ID, s.flows)
	}
	if want := fmt.Sprintf("type=drop rate=%d burst_size=%d", bwRate/1000, bwBurst/1000); !strings.Contains(s.meter, want) {
		t.Errorf("meter of %s: got %q, want %q", c.ID, s.meter, want)
	}
}

// wantNoLimits checks that nothing of ours is left for c, nor meter
// meterID ("": none named).
func wantNoLimits(h *framework.OVSHost, t *testing.T, c *framework.Container, ifname string, meterID string) {
	t.Helper()
	s := bwStateOf(h, t, c, ifname)
	if len(s.qos)+len(s.queues)+len(s.flows) > 0 || s.meter != "" || (s.portQoS != "" && s.portQoS != "[]") {
		t.Errorf("limits of %s left: %+v", c.ID, s)
	}
	if meterID != "" {
		out, _ := run("ovs-ofctl", "-O", "OpenFlow14", "dump-meters", h.OFTarget(), "meter="+meterID)
		if strings.Contains(out, "bands=") {
			t.Errorf("meter %s of %s left: %s", meterID, c.ID, out)
		}
	}
}

// execPlugin runs a plugin binary as a runtime would, with the config conf
// on stdin, and returns its stdout and error (its stderr and exit status).
func execPlugin(t *testing.T, plugin, command string, c *framework.Container, ifname string, conf map[string]any) (string, error) {
	t.Helper()
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, plugin))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+command, "CNI_CONTAINERID="+c.ID, "CNI_NETNS="+c.NS.Path(),
		"CNI_IFNAME="+ifname, "CNI_PATH="+binDir)
	cmd.Stdin = bytes.NewReader(b)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s%s", plugin, command, err, out.String(), errb.String())
	}
	return out.String(), nil
}

// Both directions, TCP and UDP, shaped to the limit (UDP into the container
// capped by it: see wantCapped); the same traffic of a container without
// limits (the same network, no runtimeConfig.bandwidth) far above it. Then
// CHECK, and DEL without prevResult.
func TestBandwidthShapes(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.BandwidthList(t, "bw", nil)
	shaped, free := framework.NewContainer(t), framework.NewContainer(t)
	bw := framework.Limits(bwRate, bwBurst, bwRate, bwBurst)
	r := n.MustAdd(t, shaped, "eth0", bw)
	rf := n.MustAdd(t, free, "eth0", nil)
	t.Cleanup(func() { n.Del(shaped, "eth0", bw); n.Del(free, "eth0", nil) })
	if len(r.Interfaces) == 0 || r.Interfaces[0].Name != shaped.HostVeth("eth0") {
		t.Errorf("result: got interfaces %v, want ovs-bridge's passed through", r.Interfaces)
	}
	wantLimits(h, t, shaped, "eth0")
	wantNoLimits(h, t, free, "eth0", "")
	const gw = "192.0.2.1"
	ip, ipf := framework.AddrOf(t, r, false), framework.AddrOf(t, rf, false)
	for _, network := range []string{"tcp", "udp"} {
		// ingress: the node sends to the container; egress: the container
		// sends to the node.
		shapedIn := wantRate
		if network == "udp" {
			shapedIn = wantCapped
		}
		shapedIn(t, network+" ingress", func() measure { return rate(t, network, nil, shaped.NS, ip, bwWarm, bwWindow) })
		wantUnshaped(t, network+" ingress", func() measure { return rate(t, network, nil, free.NS, ipf, time.Second, 3*time.Second) })
		wantRate(t, network+" egress", func() measure { return rate(t, network, shaped.NS, nil, gw, bwWarm, bwWindow) })
		wantUnshaped(t, network+" egress", func() measure { return rate(t, network, free.NS, nil, gw, time.Second, 3*time.Second) })
	}
	if err := n.Check(shaped, "eth0", bw); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	if err := n.Check(free, "eth0", nil); err != nil {
		t.Errorf("CHECK without limits: %v", err)
	}
	meter := fmt.Sprint(flows.MeterOf(uint32(ofportOf(t, shaped))))
	// DEL of ovs-bandwidth alone, as a runtime that lost its cache sends it:
	// no prevResult, no runtimeConfig.
	del := map[string]any{"cniVersion": "1.1.0", "name": "bw", "type": "ovs-bandwidth", "ovsdb": ovsdbAddr}
	for i := 0; i < 2; i++ { // and again: nothing left is no error
		if _, err := execPlugin(t, "ovs-bandwidth", "DEL", shaped, "eth0", del); err != nil {
			t.Fatalf("DEL without prevResult (%d): %v", i+1, err)
		}
	}
	wantNoLimits(h, t, shaped, "eth0", meter)
	wantUnshaped(t, "tcp egress after DEL", func() measure { return rate(t, "tcp", shaped.NS, nil, gw, time.Second, 3*time.Second) })
}

// CHECK fails when a limit was removed or changed behind the plugin's back:
// the port's QoS, the meter (and with it its flow), the meter's rate, the
// flow alone.
func TestBandwidthCheckDetectsRemoval(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.BandwidthList(t, "bwchk", nil)
	c := framework.NewContainer(t)
	bw := framework.Limits(bwRate, bwBurst, bwRate, bwBurst)
	t.Cleanup(func() { n.Del(c, "eth0", bw) })
	for _, tc := range []struct {
		name   string
		remove func()
	}{
		{"port QoS cleared", func() { framework.Vsctl(t, "clear", "Port", c.HostVeth("eth0"), "qos") }},
		{"meter deleted", func() {
			if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "del-meter", h.OFTarget(), "meter="+fmt.Sprint(flows.MeterOf(uint32(ofportOf(t, c))))); err != nil {
				t.Fatal(err)
			}
		}},
		{"meter band changed", func() {
			if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "mod-meter", h.OFTarget(),
				fmt.Sprintf("meter=%d,kbps,burst,band=type=drop,rate=%d,burst_size=%d", flows.MeterOf(uint32(ofportOf(t, c))), bwRate/2000, bwBurst/1000)); err != nil {
				t.Fatal(err)
			}
		}},
		{"flow deleted", func() {
			c := flows.AttachmentCookie(c.ID, "eth0").WithKind(flows.CookieKindBandwidth)
			if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "del-flows", h.OFTarget(), c.Delete().String()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n.MustAdd(t, c, "eth0", bw)
			if err := n.Check(c, "eth0", bw); err != nil {
				t.Fatalf("CHECK before: %v", err)
			}
			tc.remove()
			if err := n.Check(c, "eth0", bw); err == nil {
				t.Errorf("CHECK passed with the limit removed: %+v", bwStateOf(h, t, c, "eth0"))
			} else {
				t.Logf("CHECK: %v", err)
			}
			if err := n.Del(c, "eth0", bw); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Other limits than the config's fail CHECK too.
	n.MustAdd(t, c, "eth0", bw)
	if err := n.Check(c, "eth0", framework.Limits(bwRate/2, bwBurst, bwRate, bwBurst)); err == nil {
		t.Errorf("CHECK passed with another ingress rate than ADD's")
	}
}

// The egress meter lives in ovs-vswitchd's memory: after kill -9 and a new
// ovs-vswitchd, `ovs-portmap reconcile` puts it back (the QoS rows survive
// in OVSDB), and both limits hold again.
func TestBandwidthAfterVswitchdRestart(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.BandwidthList(t, "bwrec", nil)
	c := framework.NewContainer(t)
	bw := framework.Limits(bwRate, bwBurst, bwRate, bwBurst)
	r := n.MustAdd(t, c, "eth0", bw)
	t.Cleanup(func() { n.Del(c, "eth0", bw) })
	restartVswitchd(t, nil)
	if framework.Userspace() {
		// The internal interface comes back without the node's addresses
		// (see TestReconcileAfterVswitchdRestart); the gateway is reconcile's.
		framework.Until(time.Second, func() bool { _, err := run("ip", "link", "set", h.Bridge, "up"); return err == nil })
	}
	if s := bwStateOf(h, t, c, "eth0"); len(s.flows) != 0 || s.meter != "" {
		t.Fatalf("after the restart, before reconcile: got %+v, want neither flow nor meter (else the test proves nothing)", s)
	}
	var out string
	err := framework.Wait(10*time.Second, func() (err error) { // until ovs-vswitchd serves the bridge again
		out, err = run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr)
		return err
	})
	if err != nil {
		t.Fatalf("reconcile: %v: %s", err, out)
	}
	if framework.Userspace() {
		run("ethtool", "-K", h.Bridge, "tx", "off")
	}
	wantLimits(h, t, c, "eth0")
	if err := n.Check(c, "eth0", bw); err != nil {
		t.Errorf("CHECK after reconcile: %v", err)
	}
	ip := framework.AddrOf(t, r, false)
	wantRate(t, "tcp egress after restart", func() measure { return rate(t, "tcp", c.NS, nil, "192.0.2.1", bwWarm, bwWindow) })
	wantRate(t, "tcp ingress after restart", func() measure { return rate(t, "tcp", nil, c.NS, ip, bwWarm, bwWindow) })
}

// GC removes the limits of attachments that are not valid: of one whose
// port is still there, and the QoS rows, egress flow and meter of an
// orphan whose port is gone; the valid one keeps its limits.
func TestBandwidthGC(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.BandwidthList(t, "bwgc", nil)
	keep, stale, orphan := framework.NewContainer(t), framework.NewContainer(t), framework.NewContainer(t)
	bw := framework.Limits(bwRate, bwBurst, bwRate, bwBurst)
	for _, c := range []*framework.Container{keep, stale, orphan} {
		n.MustAdd(t, c, "eth0", bw)
	}
	t.Cleanup(func() {
		for _, c := range []*framework.Container{keep, stale, orphan} {
			n.Del(c, "eth0", bw)
		}
	})
	staleMeter, orphanMeter := fmt.Sprint(flows.MeterOf(uint32(ofportOf(t, stale)))), fmt.Sprint(flows.MeterOf(uint32(ofportOf(t, orphan))))
	// The orphan's port goes behind the plugins' back; its rows stay (QoS
	// and Queue are root tables).
	framework.Vsctl(t, "del-port", h.Bridge, orphan.HostVeth("eth0"))
	if s := bwStateOf(h, t, orphan, "eth0"); len(s.qos) != 1 || len(s.queues) != 1 || len(s.flows) != 1 {
		t.Fatalf("orphan: got %+v, want its QoS and Queue rows and its egress flow left (else the test proves nothing)", s)
	}
	gc := map[string]any{"cniVersion": "1.1.0", "name": "bwgc", "type": "ovs-bandwidth", "ovsdb": ovsdbAddr,
		"cni.dev/valid-attachments": []any{map[string]any{"containerID": keep.ID, "ifname": "eth0"}}}
	if _, err := execPlugin(t, "ovs-bandwidth", "GC", keep, "eth0", gc); err != nil {
		t.Fatal(err)
	}
	wantLimits(h, t, keep, "eth0")
	wantNoLimits(h, t, stale, "eth0", staleMeter)
	wantNoLimits(h, t, orphan, "eth0", orphanMeter)
	if err := n.Check(keep, "eth0", bw); err != nil {
		t.Errorf("CHECK of the valid attachment after GC: %v", err)
	}
}

// Bad input fails ADD with the reference plugin's messages, code 7 naming
// the key, and installs nothing; DEL with the same input succeeds; no
// prevResult fails ADD too.
func TestBandwidthBadInput(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	for _, tc := range []struct {
		name    string
		extra   map[string]any
		capArgs map[string]any
		code    uint
		msg     string
	}{
		{"rate without burst", nil, map[string]any{"bandwidth": map[string]any{"ingressRate": 1000}}, 7, `"runtimeConfig.bandwidth.ingressBurst" 0: if rate is set, burst must also be set`},
		{"burst without rate", map[string]any{"egressBurst": 1000}, nil, 7, `"egressRate" 0 with "egressBurst" 1000: if burst is set, rate must also be set`},
		{"burst above 4GB", map[string]any{"ingressRate": 1000, "ingressBurst": int64(40e9)}, nil, 7, "burst cannot be more than 4GB"},
		{"unshapedSubnets", map[string]any{"unshapedSubnets": []string{"198.51.100.0/24"}}, framework.Limits(bwRate, bwBurst, 0, 0), 7, `"unshapedSubnets" is not supported`},
		{"shapedSubnets", map[string]any{"shapedSubnets": []string{"198.51.100.0/24"}}, framework.Limits(bwRate, bwBurst, 0, 0), 7, `"shapedSubnets" is not supported`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := h.BandwidthList(t, uniq("bwbad"), tc.extra)
			c := framework.NewContainer(t)
			_, err := n.Add(c, "eth0", tc.capArgs)
			if got := cniCode(err); got != tc.code || err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("ADD: got %v (code %d), want code %d saying %q", err, got, tc.code, tc.msg)
			}
			wantNoLimits(h, t, c, "eth0", "")
			// DEL looks at no limit: the bad ones do not keep the chain's
			// DEL from removing ovs-bridge's port.
			if err := n.Del(c, "eth0", tc.capArgs); err != nil {
				t.Errorf("DEL: %v", err)
			}
			if ps := framework.PortsOf(t, "ovsflow.io/container-id", c.ID); len(ps) != 0 {
				t.Errorf("ports left after DEL: %v", ps)
			}
		})
	}
	c := framework.NewContainer(t)
	conf := map[string]any{"cniVersion": "1.1.0", "name": "bwbad", "type": "ovs-bandwidth", "ovsdb": ovsdbAddr,
		"ingressRate": bwRate, "ingressBurst": bwBurst}
	if _, err := execPlugin(t, "ovs-bandwidth", "ADD", c, "eth0", conf); err == nil || !strings.Contains(err.Error(), "must be called as chained plugin") {
		t.Errorf("ADD without prevResult: got %v, want the chained plugin error", err)
	}
}

// Concurrent ADDs, with GC sweeping orphans meanwhile, each get their own
// rows, meter and flow; concurrent DELs leave nothing.
func TestBandwidthParallel(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	n := h.BandwidthList(t, "bwpar", nil)
	const N = 8
	cs := make([]*framework.Container, N)
	for i := range cs {
		cs[i] = framework.NewContainer(t)
	}
	bw := framework.Limits(bwRate, bwBurst, bwRate, bwBurst)
	t.Cleanup(func() {
		for _, c := range cs {
			n.Del(c, "eth0", bw)
		}
	})
	var valid []any
	for _, c := range cs {
		valid = append(valid, map[string]any{"containerID": c.ID, "ifname": "eth0"})
	}
	gc := map[string]any{"cniVersion": "1.1.0", "name": "bwpar", "type": "ovs-bandwidth", "ovsdb": ovsdbAddr, "cni.dev/valid-attachments": valid}
	stop := make(chan struct{})
	gcDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				gcDone <- nil
				return
			default:
			}
			if _, err := execPlugin(t, "ovs-bandwidth", "GC", cs[0], "eth0", gc); err != nil {
				gcDone <- err
				return
			}
		}
	}()
	errs := parallel(N, func(i int) error { _, err := n.Add(cs[i], "eth0", bw); return err })
	close(stop)
	if err := <-gcDone; err != nil {
		t.Errorf("GC during the ADDs: %v", err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
	}
	meters := map[string]bool{}
	for _, c := range cs {
		wantLimits(h, t, c, "eth0")
		m := bwStateOf(h, t, c, "eth0").meter
		if meters[m] {
			t.Errorf("meter %q shared", m)
		}
		meters[m] = true
		if err := n.Check(c, "eth0", bw); err != nil {
			t.Errorf("CHECK %s: %v", c.ID, err)
		}
	}
	ids := make([]string, N)
	for i, c := range cs {
		ids[i] = fmt.Sprint(flows.MeterOf(uint32(ofportOf(t, c))))
	}
	for i, err := range parallel(N, func(i int) error { return n.Del(cs[i], "eth0", bw) }) {
		if err != nil {
			t.Errorf("DEL %d: %v", i, err)
		}
	}
	for i, c := range cs {
		wantNoLimits(h, t, c, "eth0", ids[i])
	}
	if out := framework.Vsctl(t, "--no-headings", "--columns=_uuid", "find", "QoS", "external_ids:ovsflow.io/network=bwpar"); out != "" {
		t.Errorf("QoS rows of the network left: %s", out)
	}
}
