package e2e

import (
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// connCounter listens on port in container c and counts the connections
// it accepts and the bytes they bring.
type connCounter struct {
	conns, bytes atomic.Int64
}

func countConns(t *testing.T, c *framework.Container, port int) *connCounter {
	t.Helper()
	var l net.Listener
	if err := c.NS.Do(func(ns.NetNS) (err error) { l, err = net.Listen("tcp", hp("0.0.0.0", port)); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cc := &connCounter{}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			cc.conns.Add(1)
			go func() {
				defer conn.Close()
				n, _ := io.Copy(io.Discard, conn)
				cc.bytes.Add(n)
			}()
		}
	}()
	return cc
}

// flood opens connections to addr from netns n with 32 callers for d, each
// giving up on a connection after 300 ms (before the first SYN
// retransmission), and returns how many the pod accepted.
func flood(t *testing.T, n ns.NetNS, addr string, cc *connCounter, d time.Duration) int64 {
	t.Helper()
	before := cc.conns.Load()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	var opened atomic.Int64
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				var conn net.Conn
				if n.Do(func(ns.NetNS) (err error) { conn, err = net.DialTimeout("tcp", addr, 300*time.Millisecond); return err }) == nil {
					opened.Add(1)
					conn.Close()
				}
			}
		}()
	}
	wg.Wait()
	// The last accepts: every connection the callers opened is the pod's.
	framework.Until(5*time.Second, func() bool { return cc.conns.Load()-before >= opened.Load() })
	return cc.conns.Load() - before
}

// A host port with newConnectionRate: a client outside opening connections
// as fast as it can gets about rate × time (+ the burst) of them to the
// pod; the same flood without the key (the control) gets far more through.
// A connection that is already open is not metered: 4 MB go through it
// while the flood runs. After kill -9 of ovs-vswitchd and reconcile, the
// bound holds again.
func TestAttackHostPortConnectionRate(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	const rate, burst, port = 20, 10, 8480
	d := framework.Scaled(4 * time.Second)
	limit := float64(rate)*d.Seconds() + burst
	addr := hp(nodeV4, port)

	n := h.PortmapList(t, "1.1.0", "pmrate", map[string]any{"newConnectionRate": rate, "newConnectionBurst": burst})
	a := framework.NewContainer(t)
	n.MustAdd(t, a, "eth0", mappings(pm(port, 80, "tcp", "")))
	cc := countConns(t, a, 80)
	// An established connection first, fed while the flood runs.
	var long net.Conn
	if err := h.Outside.NS.Do(func(ns.NetNS) (err error) { long, err = net.DialTimeout("tcp", addr, 3*time.Second); return err }); err != nil {
		t.Fatalf("connection before the flood: %v", err)
	}
	fed := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		var err error
		for i := 0; i < 64 && err == nil; i++ {
			_, err = long.Write(buf)
		}
		long.Close()
		fed <- err
	}()
	got := flood(t, h.Outside.NS, addr, cc, d)
	if err := <-fed; err != nil {
		t.Errorf("the established connection during the flood: %v", err)
	}
	framework.Until(5*time.Second, func() bool { return cc.bytes.Load() >= 64*64<<10 })
	if b := cc.bytes.Load(); b != 64*64<<10 {
		t.Errorf("established connection: the pod got %d bytes, want %d", b, 64*64<<10)
	}
	if float64(got) > 1.3*limit || float64(got) < 0.5*float64(rate)*d.Seconds() {
		t.Errorf("with newConnectionRate %d/s, burst %d: the pod accepted %d connections in %v, want about %.0f", rate, burst, got, d, limit)
	} else {
		t.Logf("with newConnectionRate %d/s, burst %d: %d connections in %v (bound %.0f)", rate, burst, got, d, limit)
	}
	if err := n.Check(a, "eth0", mappings(pm(port, 80, "tcp", ""))); err != nil {
		t.Errorf("CHECK: %v", err)
	}

	// The meters live in ovs-vswitchd's memory: after kill -9, reconcile
	// puts them back with the flows, and the bound holds again.
	restartVswitchd(t, nil)
	if framework.Userspace() {
		for _, args := range [][]string{
			{"addr", "replace", nodeV4 + "/24", "dev", h.Bridge},
			{"link", "set", h.Bridge, "up"},
		} {
			framework.Until(time.Second, func() bool { _, err := run("ip", args...); return err == nil })
		}
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
	if got := flood(t, h.Outside.NS, addr, cc, d); float64(got) > 1.3*limit || float64(got) < 0.5*float64(rate)*d.Seconds() {
		t.Errorf("after a restart and reconcile: the pod accepted %d connections in %v, want about %.0f", got, d, limit)
	} else {
		t.Logf("after a restart and reconcile: %d connections in %v", got, d)
	}
	if err := n.Check(a, "eth0", mappings(pm(port, 80, "tcp", ""))); err != nil {
		t.Errorf("CHECK after reconcile: %v", err)
	}
	if err := n.Del(a, "eth0", nil); err != nil {
		t.Fatal(err)
	}
	if out, _ := run("ovs-ofctl", "-O", "OpenFlow14", "dump-meters", h.OFTarget()); containsMeterBand(out) {
		t.Errorf("meters left after DEL:\n%s", out)
	}

	// The control: the same flood, no rate.
	n2 := h.PortmapList(t, "1.1.0", "pmfree", nil)
	b := framework.NewContainer(t)
	n2.MustAdd(t, b, "eth0", mappings(pm(port, 80, "tcp", "")))
	t.Cleanup(func() { n2.Del(b, "eth0", nil) })
	cb := countConns(t, b, 80)
	free := flood(t, h.Outside.NS, addr, cb, d)
	if float64(free) < 3*limit {
		t.Errorf("without a rate: the pod accepted %d connections in %v, want more than %.0f (else the limited figure proves nothing)", free, d, 3*limit)
	} else {
		t.Logf("without a rate: %d connections in %v", free, d)
	}
}

func containsMeterBand(out string) bool {
	for i := 0; i+len("type=drop") <= len(out); i++ {
		if out[i:i+len("type=drop")] == "type=drop" {
			return true
		}
	}
	return false
}
