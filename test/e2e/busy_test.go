package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// A busy node: ADDs that meet on one ofport, reconcile passes while pods
// start, an ovs-vswitchd killed in the middle. Every port must end with
// exactly its own flows (by in_port and cookie), pass CHECK (which compares
// them with its record), and drop a spoofed frame.

// collidingPair returns two container IDs whose attachments (ifname eth0)
// hash to the same home ofport.
func collidingPair(prefix string) (string, string) {
	seen := map[int]string{}
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		home := ovsdb.HomeOFPort(ovsdb.Attachment{ContainerID: id, IfName: "eth0"})
		if other, ok := seen[home]; ok {
			return other, id
		}
		seen[home] = id
	}
}

// ofportOf is the ofport ovs-vswitchd gave the host end of c's eth0.
func ofportOf(t *testing.T, c *container) int {
	t.Helper()
	n, err := strconv.Atoi(vsctl(t, "get", "Interface", hostVeth(c, "eth0"), "ofport"))
	if err != nil || n <= 0 {
		t.Fatalf("ofport of %s: %d, %v", hostVeth(c, "eth0"), n, err)
	}
	return n
}

// ownFlowsOnly checks that table 0's flows on each container's ofport are
// all of that container's attachment, port security among them.
func ownFlowsOnly(t *testing.T, br string, cs []*container) {
	t.Helper()
	out, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows",
		(&ovsHost{bridge: br}).ofTarget(), "table=0,"+flows.SuiteMatch())
	if err != nil {
		t.Fatalf("dump-flows: %v", err)
	}
	byPort := map[string][]string{} // in_port -> cookies of its flows
	for _, line := range strings.Split(out, "\n") {
		cookie, in := field(line, "cookie="), field(line, "in_port=")
		if cookie != "" && in != "" {
			byPort[in] = append(byPort[in], cookie)
		}
	}
	for _, c := range cs {
		p := strconv.Itoa(ofportOf(t, c))
		ac := flows.AttachmentCookie(c.id, "eth0")
		own, _ := ac.Attachment()
		sec := 0
		for _, s := range byPort[p] {
			v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
			if err != nil {
				t.Fatalf("cookie %q: %v", s, err)
			}
			fc := flows.Cookie(v)
			if got, _ := fc.Attachment(); got != own && fc.Kind() != flows.CookieKindShared {
				t.Errorf("%s (ofport %s): a flow of cookie %s, not of its own attachment %s", c.id, p, fc, ac)
			}
			if fc == ac.WithKind(flows.CookieKindPortSecurity) {
				sec++
			}
		}
		if sec == 0 {
			t.Errorf("%s (ofport %s): no port security flow of its own; flows there: %v", c.id, p, byPort[p])
		}
	}
}

// field returns the value of key (up to the next comma or space) in line.
func field(line, key string) string {
	i := strings.Index(line, key)
	if i < 0 {
		return ""
	}
	v := line[i+len(key):]
	if j := strings.IndexAny(v, ", "); j >= 0 {
		v = v[:j]
	}
	return v
}

// spoofBlocked sends from each container a broadcast ARP with a forged
// sender MAC and IP, and one with its own (the control): at the node's
// bridge interface, every own one must arrive and no forged one.
func spoofBlocked(t *testing.T, br string, cs []*container, own map[*container][2]string) {
	t.Helper()
	if _, err := run("ip", "link", "set", br, "up"); err != nil {
		t.Fatal(err)
	}
	sn := sniff(t, nil, br, "node")
	forged, _ := net.ParseMAC("02:00:00:0b:ad:01")
	bcast, _ := net.ParseMAC("ff:ff:ff:ff:ff:ff")
	victim := netip.MustParseAddr("192.0.2.254")
	for _, c := range cs {
		mac, _ := net.ParseMAC(own[c][0])
		ip := netip.MustParseAddr(own[c][1])
		s := sender(t, c.ns, "eth0")
		mustSend(t, s,
			ethFrame(bcast, forged, 0x0806, arpPacket(1, forged, victim, make(net.HardwareAddr, 6), victim)),
			ethFrame(bcast, mac, 0x0806, arpPacket(1, mac, victim, make(net.HardwareAddr, 6), victim)),
			ethFrame(bcast, mac, 0x0806, arpPacket(1, mac, ip, make(net.HardwareAddr, 6), ip)))
	}
	for _, c := range cs {
		mac, _ := net.ParseMAC(own[c][0])
		if !sn.waitFor(3*time.Second, func(f frame) bool {
			_, sha, spa, _, ok := f.arp()
			return ok && sha.String() == mac.String() && spa.String() == own[c][1]
		}) {
			t.Errorf("control: %s's own ARP did not reach the node", c.id)
		}
		if n := sn.count(func(f frame) bool {
			_, sha, spa, _, ok := f.arp()
			return ok && sha.String() == mac.String() && spa == victim
		}); n > 0 {
			t.Errorf("%s: %d ARPs for another address passed", c.id, n)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := sn.count(fromMAC(forged)); n > 0 {
		t.Errorf("%d frames from a forged MAC reached the node: %v", n, sn.first(4, fromMAC(forged)))
	}
}

// Two ADDs whose attachments hash to the same home ofport, started at the
// same moment, 50 times: each port ends with its own flows alone, CHECK
// passes for both, and neither can spoof.
func TestBusyOFPortCollision(t *testing.T) {
	requireSandbox(t)
	br := newBridge(t)
	n := newCNI(t, conflist("1.0.0", uniq("busy"), bridgeConf(br, t.TempDir(), nil)))
	rounds := 50
	for r := 0; r < rounds; r++ {
		idA, idB := collidingPair(uniq("hm"))
		a, b := newContainer(t), newContainer(t)
		a.id, b.id = idA, idB
		cs := []*container{a, b}
		own := map[*container][2]string{}
		var mu sync.Mutex
		errs := parallel(2, func(i int) error {
			res, err := n.add(cs[i], "eth0", nil)
			if err != nil {
				return fmt.Errorf("ADD %s: %w", cs[i].id, err)
			}
			mu.Lock()
			own[cs[i]] = [2]string{res.Interfaces[1].Mac, addrOf(t, res, false)}
			mu.Unlock()
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		if pa, pb := ofportOf(t, a), ofportOf(t, b); pa == pb {
			t.Fatalf("round %d: both on ofport %d", r, pa)
		}
		ownFlowsOnly(t, br, cs)
		for _, c := range cs {
			if err := n.check(c, "eth0", nil); err != nil {
				t.Errorf("round %d: CHECK %s: %v", r, c.id, err)
			}
		}
		if r == rounds-1 {
			spoofBlocked(t, br, cs, own)
		}
		if err := errors.Join(parallel(2, func(i int) error { return n.del(cs[i], "eth0", nil) })...); err != nil {
			t.Fatalf("round %d: DEL: %v", r, err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	// Nothing of the attachments is left in flight.
	if ids := vsctl(t, "get", "Open_vSwitch", ".", "external_ids"); strings.Contains(ids, "ovsflow.io/ofport.") || strings.Contains(ids, "ovsflow.io/deleting.") {
		t.Errorf("in-flight records left after every DEL: %s", ids)
	}
}

// 200 ADDs from 16 callers, with one-shot reconcile passes running all the
// while and ovs-vswitchd killed (-9) and started again in the middle; an
// ADD that fails is retried as a runtime does (DEL, then ADD). Every port
// ends with exactly its own flows, CHECK passes for each, and none can
// spoof.
func TestBusyNode(t *testing.T) {
	requireSandbox(t)
	br := newBridge(t)
	vsctl(t, "set-fail-mode", br, "secure")
	n := newCNI(t, conflist("1.0.0", uniq("busy"), bridgeConf(br, t.TempDir(), nil)))
	const total, callers = 200, 16
	cs := make([]*container, total)
	for i := range cs {
		cs[i] = newContainer(t)
	}
	t.Cleanup(func() { parallel(callers, func(k int) error { return delAll(n, cs, k, callers) }) })

	stop := make(chan struct{})
	var passes, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if out, err := exec.Command(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr).CombinedOutput(); err != nil {
				failed.Add(1)
				_ = out
			} else {
				passes.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	var done atomic.Int64
	var restarted sync.Once
	var restartErr error
	own := make([][2]string, total)
	retries := make([]int, total)
	errs := parallel(callers, func(k int) error {
		for i := k; i < total; i += callers {
			if done.Add(1) == total/2 {
				restarted.Do(func() { restartErr = killVswitchd() })
			}
			var err error
			for try := 0; try < 5; try++ {
				res, aerr := n.add(cs[i], "eth0", nil)
				if err = aerr; err == nil {
					own[i] = [2]string{res.Interfaces[1].Mac, addrOf(t, res, false)}
					break
				}
				retries[i]++
				_ = n.del(cs[i], "eth0", nil)
				time.Sleep(200 * time.Millisecond)
			}
			if err != nil {
				return fmt.Errorf("ADD %d (%s) after %d tries: %w", i, cs[i].id, retries[i], err)
			}
		}
		return nil
	})
	// One more pass after the last ADD, as the watch makes after a restart.
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr); err != nil {
		t.Fatalf("reconcile: %v: %s", err, out)
	}
	sum := 0
	for _, r := range retries {
		sum += r
	}
	t.Logf("%d ADDs, %d retried; reconcile: %d passes, %d failed (ovs-vswitchd down)", total, sum, passes.Load(), failed.Load())
	if err := errors.Join(append(errs, restartErr)...); err != nil {
		t.Fatal(err)
	}
	if passes.Load() < 3 {
		t.Errorf("only %d reconcile passes ran during the burst, want several", passes.Load())
	}
	ownFlowsOnly(t, br, cs)
	for _, c := range cs {
		if err := n.check(c, "eth0", nil); err != nil {
			t.Errorf("CHECK %s: %v", c.id, err)
		}
	}
	m := map[*container][2]string{}
	for i, c := range cs {
		m[c] = own[i]
	}
	spoofBlocked(t, br, cs, m)
}

// delAll DELs every callers-th container from k on.
func delAll(n *cni, cs []*container, k, callers int) error {
	for i := k; i < len(cs); i += callers {
		_ = n.del(cs[i], "eth0", nil)
	}
	return nil
}

// killVswitchd kills ovs-vswitchd with SIGKILL and starts it again, as
// restartVswitchd does, from any goroutine.
func killVswitchd() error {
	dir := filepath.Dir(strings.TrimPrefix(ovsdbAddr, "unix:"))
	b, err := os.ReadFile(filepath.Join(dir, "ovs-vswitchd.pid"))
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return err
	}
	for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := exec.Command(filepath.Join(repoRoot, "hack", "ovs-sandbox.sh"), "start-vswitchd", sandboxNS).CombinedOutput(); err != nil {
		return fmt.Errorf("start-vswitchd: %v: %s", err, out)
	}
	return nil
}
