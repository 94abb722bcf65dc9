package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
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
func ofportOf(t *testing.T, c *framework.Container) int {
	t.Helper()
	n, err := strconv.Atoi(framework.Vsctl(t, "get", "Interface", c.HostVeth("eth0"), "ofport"))
	if err != nil || n <= 0 {
		t.Fatalf("ofport of %s: %d, %v", c.HostVeth("eth0"), n, err)
	}
	return n
}

// ownFlowsOnly checks that table 0's flows on each container's ofport are
// all of that container's attachment, port security among them.
func ownFlowsOnly(t *testing.T, br string, cs []*framework.Container) {
	t.Helper()
	out, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows",
		(&framework.OVSHost{Bridge: br}).OFTarget(), "table=0,"+flows.SuiteDelete().String())
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
		ac := flows.AttachmentCookie(c.ID, "eth0")
		own, _ := ac.AnyKind()
		sec := 0
		for _, s := range byPort[p] {
			v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
			if err != nil {
				t.Fatalf("cookie %q: %v", s, err)
			}
			fc := flows.Cookie(v)
			if got, _ := fc.AnyKind(); got != own && fc.Kind() != flows.CookieKindShared {
				t.Errorf("%s (ofport %s): a flow of cookie %s, not of its own attachment %s", c.ID, p, fc, ac)
			}
			if fc == ac.WithKind(flows.CookieKindPortSecurity) {
				sec++
			}
		}
		if sec == 0 {
			t.Errorf("%s (ofport %s): no port security flow of its own; flows there: %v", c.ID, p, byPort[p])
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
func spoofBlocked(t *testing.T, br string, cs []*framework.Container, own map[*framework.Container][2]string) {
	t.Helper()
	if _, err := run("ip", "link", "set", br, "up"); err != nil {
		t.Fatal(err)
	}
	sn := sniff(t, nil, br, "node")
	forged, _ := net.ParseMAC("02:00:00:0b:ad:01")
	bcast, _ := net.ParseMAC("ff:ff:ff:ff:ff:ff")
	victim := netip.MustParseAddr("192.0.2.254")
	// One container at a time, its own ARP resent until it arrives: a burst
	// of hundreds of first packets would overflow the kernel datapath's
	// upcall queue, which is not what is tested here.
	for _, c := range cs {
		mac, _ := net.ParseMAC(own[c][0])
		ip := netip.MustParseAddr(own[c][1])
		s := sender(t, c.NS, "eth0")
		mustSend(t, s,
			ethFrame(bcast, forged, 0x0806, arpPacket(1, forged, victim, make(net.HardwareAddr, 6), victim)),
			ethFrame(bcast, mac, 0x0806, arpPacket(1, mac, victim, make(net.HardwareAddr, 6), victim)))
		arrived := false
		for try := 0; try < 10 && !arrived; try++ {
			mustSend(t, s, ethFrame(bcast, mac, 0x0806, arpPacket(1, mac, ip, make(net.HardwareAddr, 6), ip)))
			arrived = sn.waitFor(300*time.Millisecond, func(f frame) bool {
				_, sha, spa, _, ok := f.arp()
				return ok && sha.String() == mac.String() && spa == ip
			})
		}
		if !arrived {
			t.Errorf("control: %s's own ARP did not reach the node", c.ID)
		}
		if n := sn.count(func(f frame) bool {
			_, sha, spa, _, ok := f.arp()
			return ok && sha.String() == mac.String() && spa == victim
		}); n > 0 {
			t.Errorf("%s: %d ARPs for another address passed", c.ID, n)
		}
	}
	// A negative check: nothing from the forged MAC for 200 ms after the
	// last container's own ARP arrived.
	framework.Consistently(t, 200*time.Millisecond, "frames from a forged MAC", func() error {
		if n := sn.count(fromMAC(forged)); n > 0 {
			return fmt.Errorf("%d reached the node: %v", n, sn.first(4, fromMAC(forged)))
		}
		return nil
	})
}

// Two ADDs whose attachments hash to the same home ofport, started at the
// same moment, 50 times: each port ends with its own flows alone, CHECK
// passes for both, and neither can spoof.
func TestBusyOFPortCollision(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", uniq("busy"), framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	rounds := 50
	if framework.Slowdown > 1 {
		rounds = 20 // software emulation (hack/ovs-vm.sh): behaviour, not load
	}
	for r := 0; r < rounds; r++ {
		idA, idB := collidingPair(uniq("hm"))
		a, b := framework.NewContainer(t), framework.NewContainer(t)
		a.ID, b.ID = idA, idB
		cs := []*framework.Container{a, b}
		own := map[*framework.Container][2]string{}
		var mu sync.Mutex
		errs := parallel(2, func(i int) error {
			res, err := n.Add(cs[i], "eth0", nil)
			if err != nil {
				return fmt.Errorf("ADD %s: %w", cs[i].ID, err)
			}
			mu.Lock()
			own[cs[i]] = [2]string{res.Interfaces[1].Mac, framework.AddrOf(t, res, false)}
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
			if err := n.Check(c, "eth0", nil); err != nil {
				t.Errorf("round %d: CHECK %s: %v", r, c.ID, err)
			}
		}
		if r == rounds-1 {
			spoofBlocked(t, br, cs, own)
		}
		if err := errors.Join(parallel(2, func(i int) error { return n.Del(cs[i], "eth0", nil) })...); err != nil {
			t.Fatalf("round %d: DEL: %v", r, err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	// Nothing of the attachments is left in flight.
	if ids := framework.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids"); strings.Contains(ids, "ovsflow.io/ofport.") || strings.Contains(ids, "ovsflow.io/deleting.") {
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
	br := framework.NewBridge(t, "e2ebr")
	framework.Vsctl(t, "set-fail-mode", br, "secure")
	n := framework.NewCNI(t, conflist("1.0.0", uniq("busy"), framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	total, callers := 200, 16
	if framework.Slowdown > 1 {
		total = 64 // software emulation (hack/ovs-vm.sh): behaviour, not load
	}
	// In pairs that meet on their home ofport, the two of a pair started
	// at the same moment (by callers k and k+1).
	cs := make([]*framework.Container, total)
	for i := 0; i < total; i += 2 {
		cs[i], cs[i+1] = framework.NewContainer(t), framework.NewContainer(t)
		cs[i].ID, cs[i+1].ID = collidingPair(uniq("bn"))
	}
	t.Cleanup(func() { parallel(callers, func(k int) error { return delAll(n, cs, k, callers) }) })

	stop := make(chan struct{})
	var passes, failed, after atomic.Int64 // after: passes begun after the restart
	var restartedAt atomic.Int64
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
			begun := time.Now().UnixNano()
			if err := exec.Command(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr).Run(); err != nil {
				failed.Add(1)
			} else {
				passes.Add(1)
				if r := restartedAt.Load(); r != 0 && begun > r {
					after.Add(1)
				}
			}
			time.Sleep(20 * time.Millisecond) // time is the subject: the sweeper's pace, a pass every 20 ms through the burst
		}
	}()

	var done atomic.Int64
	var restarted sync.Once
	var restartErr error
	own := make([][2]string, total)
	retries := make([]int, total)
	errs := parallel(callers, func(k int) error {
		for i := k; i < total; i += callers {
			if done.Add(1) == int64(total/2) {
				restarted.Do(func() {
					restartErr = killAndStartVswitchd()
					restartedAt.Store(time.Now().UnixNano())
				})
			}
			var err error
			for try := 0; try < 5; try++ {
				res, aerr := n.Add(cs[i], "eth0", nil)
				if err = aerr; err == nil {
					own[i] = [2]string{res.Interfaces[1].Mac, framework.AddrOf(t, res, false)}
					break
				}
				retries[i]++
				_ = n.Del(cs[i], "eth0", nil)
				time.Sleep(200 * time.Millisecond) // time is the subject: a runtime's backoff between tries, which are counted
			}
			if err != nil {
				return fmt.Errorf("ADD %d (%s) after %d tries: %w", i, cs[i].ID, retries[i], err)
			}
		}
		return nil
	})
	// No pass after the last ADD: what the passes during the burst did is
	// what is judged.
	close(stop)
	wg.Wait()
	sum := 0
	for _, r := range retries {
		sum += r
	}
	t.Logf("%d ADDs, %d retried; reconcile: %d passes (%d begun after the restart), %d failed (ovs-vswitchd down)", total, sum, passes.Load(), after.Load(), failed.Load())
	if err := errors.Join(append(errs, restartErr)...); err != nil {
		t.Fatal(err)
	}
	if passes.Load() < 3 || after.Load() < 1 {
		t.Errorf("%d reconcile passes ran during the burst, %d of them after the restart; want several, and one after", passes.Load(), after.Load())
	}
	ownFlowsOnly(t, br, cs)
	for _, c := range cs {
		if err := n.Check(c, "eth0", nil); err != nil {
			t.Errorf("CHECK %s: %v", c.ID, err)
		}
	}
	m := map[*framework.Container][2]string{}
	for i, c := range cs {
		m[c] = own[i]
	}
	spoofBlocked(t, br, cs, m)
}

// delAll DELs every callers-th container from k on.
func delAll(n *framework.CNI, cs []*framework.Container, k, callers int) error {
	for i := k; i < len(cs); i += callers {
		_ = n.Del(cs[i], "eth0", nil)
	}
	return nil
}

// killAndStartVswitchd kills ovs-vswitchd with SIGKILL and starts it again, as
// restartVswitchd does, from any goroutine.
func killAndStartVswitchd() error {
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
	framework.Until(2*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
	if out, err := exec.Command(filepath.Join(repoRoot, "hack", "ovs-sandbox.sh"), "start-vswitchd", sandboxNS).CombinedOutput(); err != nil {
		return fmt.Errorf("start-vswitchd: %v: %s", err, out)
	}
	return nil
}

// Two attachments whose cookies meet (the low 40 bits of FNV-1a 64 of
// "cookie-14922038/eth0" and "cookie-20154016/eth0" are equal): the second
// ADD is refused with a CNI error naming both, and leaves nothing; the
// first keeps its flows, through the second's DEL too.
func TestBusyCookieCollision(t *testing.T) {
	requireSandbox(t)
	const idA, idB = "cookie-14922038", "cookie-20154016"
	ca, cb := flows.AttachmentCookie(idA, "eth0"), flows.AttachmentCookie(idB, "eth0")
	if ca != cb {
		t.Fatalf("cookies %s and %s differ: the pair no longer collides", ca, cb)
	}
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", uniq("busy"), framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	a, b := framework.NewContainer(t), framework.NewContainer(t)
	a.ID, b.ID = idA, idB
	n.MustAdd(t, a, "eth0", nil)
	t.Cleanup(func() { n.Del(a, "eth0", nil) })
	_, err := n.Add(b, "eth0", nil)
	if code := cniCode(err); code != 4 || !strings.Contains(err.Error(), idA) || !strings.Contains(err.Error(), "cookie") {
		t.Fatalf("second ADD: got code %d, %v; want code 4 naming %s and the cookie", code, err, idA)
	}
	if veths := framework.OurVeths(t); slices.Contains(veths, b.HostVeth("eth0")) {
		t.Errorf("the refused ADD left its veth %s", b.HostVeth("eth0"))
	}
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, idB); len(ports) > 0 {
		t.Errorf("the refused ADD left ports %v", ports)
	}
	if err := n.Del(b, "eth0", nil); err != nil {
		t.Fatalf("DEL of the refused attachment: %v", err)
	}
	ownFlowsOnly(t, br, []*framework.Container{a})
	if err := n.Check(a, "eth0", nil); err != nil {
		t.Errorf("CHECK of the first after the second's ADD and DEL: %v", err)
	}
}

// reconcile and what is in flight, each made to happen mid-way: the flows
// of an ADD that claimed and has no port yet stay through a reconcile pass
// (and go once its claim is given up); those of a DEL under way are not
// restored (and are, without the mark: the control); a claim waits while a
// sweep is under way, and an insert after a sweep fails with ErrSweeping.
func TestBusyInFlight(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", uniq("busy"), framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, ovsdbEP)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	h := &framework.OVSHost{Bridge: br}
	reconcile := func() {
		t.Helper()
		if out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr); err != nil {
			t.Fatalf("reconcile: %v: %s", err, out)
		}
	}

	// An ADD in flight: claimed, one flow in, no port.
	inflight := ovsdb.Attachment{ContainerID: uniq("ctr-"), IfName: "eth0"}
	c := flows.AttachmentCookie(inflight.ContainerID, inflight.IfName).WithKind(flows.CookieKindPortSecurity)
	res, err := cli.Reserve(ctx, inflight, ovsdb.HomeOFPort(inflight), c.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "add-flow", h.OFTarget(),
		fmt.Sprintf("cookie=%s,table=0,priority=400,in_port=%d,actions=drop", c, res.OFPort)); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if got := h.FlowsOf(t, c); len(got) != 1 {
		t.Errorf("the flow of an ADD in flight after reconcile: %v, want it kept", got)
	}
	if err := cli.Release(ctx, res); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if got := h.FlowsOf(t, c); len(got) != 0 {
		t.Errorf("the flow of an ADD that gave up its claim after reconcile: %v, want it removed", got)
	}

	// A DEL under way (its mark set, its flows cut off): not restored.
	// Without the mark (the control): restored.
	x := framework.NewContainer(t)
	n.MustAdd(t, x, "eth0", nil)
	t.Cleanup(func() { n.Del(x, "eth0", nil) })
	xc := flows.AttachmentCookie(x.ID, "eth0")
	del, err := cli.BeginDelete(ctx, ovsdb.Attachment{ContainerID: x.ID, IfName: "eth0"})
	if err != nil || len(del.Ports) != 1 {
		t.Fatalf("BeginDelete: %d ports, %v", len(del.Ports), err)
	}
	if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "del-flows", h.OFTarget(), xc.AttachmentDelete().String()); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if got := h.FlowsOf(t, xc.WithKind(flows.CookieKindPortSecurity)); len(got) != 0 {
		t.Errorf("reconcile restored the flows of a DEL under way: %v", got)
	}
	if _, err := run("ovs-vsctl", "--db="+ovsdbAddr, "remove", "Open_vSwitch", ".", "external_ids", "ovsflow.io/deleting."+x.ID+"/eth0"); err != nil {
		t.Fatal(err)
	}
	reconcile()
	if got := h.FlowsOf(t, xc.WithKind(flows.CookieKindPortSecurity)); len(got) == 0 {
		t.Errorf("control: reconcile did not restore the flows of a port with no DEL under way")
	}

	// A claim waits for a sweep; an insert after a sweep fails.
	sweep, err := cli.BeginSweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := ovsdb.Attachment{ContainerID: uniq("ctr-"), IfName: "eth0"}
	claimed := make(chan error, 1)
	var res2 ovsdb.Reservation
	go func() {
		cli2, err := ovsdb.Dial(ctx, ovsdbEP)
		if err == nil {
			defer cli2.Close()
			res2, err = cli2.Reserve(ctx, other, ovsdb.HomeOFPort(other), "")
		}
		claimed <- err
	}()
	select {
	case err := <-claimed:
		t.Fatalf("a claim went through during a sweep: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := cli.EndSweep(ctx, sweep); err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatalf("the claim after the sweep: %v", err)
	}
	sweep, err = cli.BeginSweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sweep.Adding[other]; !ok {
		t.Errorf("the sweep does not see the ADD in flight %s: %v", other, sweep.Adding)
	}
	if err := cli.EndSweep(ctx, sweep); err != nil {
		t.Fatal(err)
	}
	b, err := cli.Bridge(ctx, br)
	if err != nil {
		t.Fatal(err)
	}
	spec := ovsdb.PortSpec{Name: uniq("bi"), OFPort: res2.OFPort, Reservation: &res2, ExternalIDs: map[string]string{}}
	if _, err := cli.AttachPort(ctx, b.UUID, spec); !errors.Is(err, ovsdb.ErrSweeping) {
		t.Fatalf("insert after a sweep: got %v, want ErrSweeping", err)
	}
	if err := cli.AfterSweep(ctx, res2); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AttachPort(ctx, b.UUID, spec); err != nil {
		t.Fatalf("insert after AfterSweep: %v", err)
	}
	if ids := framework.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids"); strings.Contains(ids, "ovsflow.io/ofport."+strconv.Itoa(res2.OFPort)) {
		t.Errorf("the insert left its claim: %s", ids)
	}

	// A claim that a sweep expired (removed here by hand): the insert fails.
	third := ovsdb.Attachment{ContainerID: uniq("ctr-"), IfName: "eth0"}
	res3, err := cli.Reserve(ctx, third, ovsdb.HomeOFPort(third), "")
	if err != nil {
		t.Fatal(err)
	}
	framework.Vsctl(t, "remove", "Open_vSwitch", ".", "external_ids", "ovsflow.io/ofport."+strconv.Itoa(res3.OFPort))
	spec = ovsdb.PortSpec{Name: uniq("bi"), OFPort: res3.OFPort, Reservation: &res3, ExternalIDs: map[string]string{}}
	if _, err := cli.AttachPort(ctx, b.UUID, spec); !errors.Is(err, ovsdb.ErrClaimLost) {
		t.Fatalf("insert with its claim gone: got %v, want ErrClaimLost", err)
	}
}

// CHECK compares the port's flows with its record: a flow missing, or a
// flow of another attachment on its ofport, fails CHECK with an error that
// names it; after reconcile CHECK passes again.
func TestBridgeCheckFlows(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", uniq("chk"), framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	c := framework.NewContainer(t)
	n.MustAdd(t, c, "eth0", nil)
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	h := &framework.OVSHost{Bridge: br}
	p := ofportOf(t, c)
	reconcile := func() {
		t.Helper()
		if out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr); err != nil {
			t.Fatalf("reconcile: %v: %s", err, out)
		}
	}
	if err := n.Check(c, "eth0", nil); err != nil {
		t.Fatalf("CHECK after ADD: %v", err)
	}
	// The catch-all drop of the port goes.
	if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "--strict", "del-flows", h.OFTarget(), fmt.Sprintf("table=0,priority=390,in_port=%d,reg1=0/0x1", p)); err != nil {
		t.Fatal(err)
	}
	if err := n.Check(c, "eth0", nil); err == nil || !strings.Contains(err.Error(), "priority=390") {
		t.Errorf("CHECK with the port's drop flow gone: %v, want an error naming it", err)
	}
	reconcile()
	if err := n.Check(c, "eth0", nil); err != nil {
		t.Errorf("CHECK after reconcile: %v", err)
	}
	// A flow of another attachment on its ofport.
	other := flows.AttachmentCookie(uniq("ctr-"), "eth0").WithKind(flows.CookieKindPortSecurity)
	if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "add-flow", h.OFTarget(),
		fmt.Sprintf("cookie=%s,table=0,priority=400,in_port=%d,ip,actions=NORMAL", other, p)); err != nil {
		t.Fatal(err)
	}
	if err := n.Check(c, "eth0", nil); err == nil || !strings.Contains(err.Error(), "another attachment") {
		t.Errorf("CHECK with another attachment's flow on its ofport: %v, want an error saying so", err)
	}
	reconcile()
	if err := n.Check(c, "eth0", nil); err != nil {
		t.Errorf("CHECK after reconcile removed the stale flow: %v", err)
	}
}

// A reconcile pass goes on past an OpenFlow endpoint that does not answer:
// the other bridge's flows are rebuilt, and the pass reports the one.
func TestReconcilePastDeadEndpoint(t *testing.T) {
	requireSandbox(t)
	var cs []*framework.Container
	var hs []*framework.OVSHost
	for i := 0; i < 2; i++ {
		br := framework.NewBridge(t, "e2ebr")
		n := framework.NewCNI(t, conflist("1.0.0", uniq("dead"), framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
		c := framework.NewContainer(t)
		n.MustAdd(t, c, "eth0", nil)
		t.Cleanup(func() { n.Del(c, "eth0", nil) })
		cs, hs = append(cs, c), append(hs, &framework.OVSHost{Bridge: br})
	}
	for i, h := range hs {
		if _, err := run("ovs-ofctl", "-O", "OpenFlow14", "del-flows", h.OFTarget(), flows.AttachmentCookie(cs[i].ID, "eth0").AttachmentDelete().String()); err != nil {
			t.Fatal(err)
		}
	}
	dead := strings.TrimPrefix(hs[1].OFTarget(), "unix:")
	if err := os.Rename(dead, dead+".away"); err != nil {
		t.Fatal(err)
	}
	out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr)
	if rerr := os.Rename(dead+".away", dead); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil || !strings.Contains(out, hs[1].Bridge) {
		t.Errorf("reconcile with %s not answering: %v, %q; want a failure naming it", hs[1].Bridge, err, out)
	}
	if got := hs[0].FlowsOf(t, flows.AttachmentCookie(cs[0].ID, "eth0").WithKind(flows.CookieKindPortSecurity)); len(got) == 0 {
		t.Errorf("reconcile gave up before the bridge that answers: %s has no port security flows", hs[0].Bridge)
	}
	if got := hs[1].FlowsOf(t, flows.AttachmentCookie(cs[1].ID, "eth0").WithKind(flows.CookieKindPortSecurity)); len(got) != 0 {
		t.Errorf("flows on the bridge that did not answer: %v", got)
	}
}

// The dhcp path claims its ofport like the static one. Two dhcp ADDs whose
// attachments hash to the same home ofport, started at the same moment:
// each port ends on an ofport of its own that it requested (one on its
// home), with its own flows alone, and CHECK passes for both.
func TestBusyDHCPOFPort(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", uniq("busydhcp"), dhcpConf(br, dhcpServer(t, br))), nil)
	for r := 0; r < 3; r++ {
		idA, idB := collidingPair(uniq("dh"))
		a, b := framework.NewContainer(t), framework.NewContainer(t)
		a.ID, b.ID = idA, idB
		cs := []*framework.Container{a, b}
		if err := errors.Join(parallel(2, func(i int) error {
			if _, err := n.Add(cs[i], "eth0", nil); err != nil {
				return fmt.Errorf("ADD %s: %w", cs[i].ID, err)
			}
			return nil
		})...); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		home := ovsdb.HomeOFPort(ovsdb.Attachment{ContainerID: idA, IfName: "eth0"})
		pa, pb := ofportOf(t, a), ofportOf(t, b)
		if pa == pb || (pa != home && pb != home) || pa < ovsdb.RequestedOFPortMin || pb < ovsdb.RequestedOFPortMin {
			t.Errorf("round %d: ofports %d and %d; want two requested ones (from %d), one of them the home ofport %d", r, pa, pb, ovsdb.RequestedOFPortMin, home)
		}
		ownFlowsOnly(t, br, cs)
		for _, c := range cs {
			if err := n.Check(c, "eth0", nil); err != nil {
				t.Errorf("round %d: CHECK %s: %v", r, c.ID, err)
			}
		}
		if err := errors.Join(parallel(2, func(i int) error { return n.Del(cs[i], "eth0", nil) })...); err != nil {
			t.Fatalf("round %d: DEL: %v", r, err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

// The dhcp path claims its cookie like the static one: a dhcp ADD whose
// cookie is another attachment's is refused with code 4 and leaves the
// holder's flows as they were, through its DEL too.
func TestBusyDHCPCookie(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", uniq("busydhcp"), dhcpConf(br, dhcpServer(t, br))), nil)
	const idA, idB = "cookie-14922038", "cookie-20154016" // see TestBusyCookieCollision
	a, b := framework.NewContainer(t), framework.NewContainer(t)
	a.ID, b.ID = idA, idB
	n.MustAdd(t, a, "eth0", nil)
	t.Cleanup(func() { n.Del(a, "eth0", nil) })
	h := &framework.OVSHost{Bridge: br}
	sec := flows.AttachmentCookie(idA, "eth0").WithKind(flows.CookieKindPortSecurity)
	before := h.FlowsOf(t, sec)
	if len(before) == 0 {
		t.Fatalf("the holder %s has no port security flows", idA)
	}
	_, err := n.Add(b, "eth0", nil)
	if code := cniCode(err); code != 4 || !strings.Contains(err.Error(), idA) {
		t.Errorf("dhcp ADD whose cookie is %s's: got code %d, %v; want code 4 naming it", idA, code, err)
	}
	if got := h.FlowsOf(t, sec); !slices.Equal(got, before) {
		t.Errorf("the holder's flows after the refused ADD: %v, want %v", got, before)
	}
	if err := n.Del(b, "eth0", nil); err != nil {
		t.Fatalf("DEL of the refused attachment: %v", err)
	}
	if got := h.FlowsOf(t, sec); !slices.Equal(got, before) {
		t.Errorf("the holder's flows after the refused attachment's DEL: %v, want %v", got, before)
	}
	ownFlowsOnly(t, br, []*framework.Container{a})
	if err := n.Check(a, "eth0", nil); err != nil {
		t.Errorf("CHECK of the holder: %v", err)
	}
}

// attachmentFlows dumps every flow of the attachment id/eth0, any kind.
func attachmentFlows(t *testing.T, br, id string) []string {
	t.Helper()
	out, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows",
		(&framework.OVSHost{Bridge: br}).OFTarget(), flows.AttachmentCookie(id, "eth0").AttachmentDelete().String())
	if err != nil {
		t.Fatalf("dump-flows: %v", err)
	}
	var fl []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "cookie=") {
			fl = append(fl, strings.TrimSpace(l))
		}
	}
	return fl
}

// GC marks what it removes as DEL does. Rounds of: attachments with host
// ports added, then a GC (the plugins' own: libcni's DELs of what it has
// cached are left out) that keeps half of them and two more whose ADDs run
// at the same time as the GC, with one-shot reconcile passes running until
// the GC returns. After each round (no pass begun since the GC returned):
// nothing of a GC'd attachment is left (flow of any kind, port, veth,
// in-flight record), and every kept one has its own flows alone and passes
// CHECK.
func TestBusyGC(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	br := h.Bridge
	n := h.PortmapList(t, "1.1.0", uniq("busygc"), nil)
	rounds := 15
	if framework.Slowdown > 1 {
		rounds = 5 // software emulation (hack/ovs-vm.sh): behaviour, not load
	}
	var passes atomic.Int64
	for r := 0; r < rounds; r++ {
		old := make([]*framework.Container, 12) // even: kept, odd: GC'd
		caps := map[*framework.Container]map[string]any{}
		for i := range old {
			old[i] = framework.NewContainer(t)
			caps[old[i]] = mappings(pm(20000+100*r+2*i, 80, "tcp", ""), pm(20001+100*r+2*i, 53, "udp", ""))
		}
		if err := errors.Join(parallel(len(old), func(i int) error {
			_, err := n.Add(old[i], "eth0", caps[old[i]])
			return err
		})...); err != nil {
			t.Fatalf("round %d: ADD: %v", r, err)
		}
		racing := []*framework.Container{framework.NewContainer(t), framework.NewContainer(t)}
		var kept, gone []*framework.Container
		var valid []types.GCAttachment
		for i, c := range append(old, racing...) {
			if i < len(old) && i%2 == 1 {
				gone = append(gone, c)
				continue
			}
			kept = append(kept, c)
			valid = append(valid, types.GCAttachment{ContainerID: c.ID, IfName: "eth0"})
		}
		t.Cleanup(func() {
			for _, c := range kept {
				n.Del(c, "eth0", caps[c])
			}
		})

		stop := make(chan struct{})
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
				if exec.Command(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr).Run() == nil {
					passes.Add(1)
				}
			}
		}()
		errs := parallel(1+len(racing), func(i int) error {
			if i == 0 {
				// With a cache of its own, libcni DELs nothing first: the
				// plugins' GC does all the work.
				gcCfg := libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil)
				err := gcCfg.GCNetworkList(context.Background(), n.List, &libcni.GCArgs{ValidAttachments: valid})
				// No pass begins after the GC: a pass would remove what
				// an earlier one wrote back.
				close(stop)
				if err != nil {
					return fmt.Errorf("GC: %w", err)
				}
				return nil
			}
			if _, err := n.Add(racing[i-1], "eth0", nil); err != nil {
				return fmt.Errorf("ADD %s during the GC: %w", racing[i-1].ID, err)
			}
			return nil
		})
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}

		for _, c := range gone {
			if fl := attachmentFlows(t, br, c.ID); len(fl) > 0 {
				t.Errorf("round %d: flows of the GC'd attachment %s: %v", r, c.ID, fl)
			}
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) > 0 {
				t.Errorf("round %d: ports of the GC'd attachment %s: %v", r, c.ID, ports)
			}
			if slices.Contains(framework.OurVeths(t), c.HostVeth("eth0")) {
				t.Errorf("round %d: the veth of the GC'd attachment %s is left", r, c.ID)
			}
		}
		if ids := framework.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids"); strings.Contains(ids, "ovsflow.io/deleting.") ||
			strings.Contains(ids, "ovsflow.io/ofport.") {
			t.Errorf("round %d: in-flight records left: %s", r, ids)
		}
		ownFlowsOnly(t, br, kept)
		for _, c := range kept {
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 1 {
				t.Errorf("round %d: the kept attachment %s has ports %v, want one", r, c.ID, ports)
			}
			if err := n.Check(c, "eth0", caps[c]); err != nil {
				t.Errorf("round %d: CHECK of the kept attachment %s: %v", r, c.ID, err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
		if err := errors.Join(parallel(len(kept), func(i int) error { return n.Del(kept[i], "eth0", caps[kept[i]]) })...); err != nil {
			t.Fatalf("round %d: DEL: %v", r, err)
		}
	}
	t.Logf("%d rounds, %d reconcile passes", rounds, passes.Load())
	if passes.Load() < int64(rounds) {
		t.Errorf("%d reconcile passes in %d rounds; want one a round at least", passes.Load(), rounds)
	}
}

// GC leaves an ADD in flight to it. A retried ADD of x has removed x's old
// port and created its new veth, and holds its claims (as between its
// Reserve and its insert): a GC that does not keep x leaves the veth and
// the claims. Once the claims are given up (the ADD died), the same GC
// removes the veth: the control.
func TestBusyGCLeavesADDInFlight(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.1.0", uniq("busygcadd"), framework.BridgeConf(br, ovsdbAddr, t.TempDir(), nil)), nil)
	x := framework.NewContainer(t)
	n.MustAdd(t, x, "eth0", nil)
	t.Cleanup(func() { n.Del(x, "eth0", nil) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, ovsdbEP)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	framework.Vsctl(t, "del-port", br, x.HostVeth("eth0"))
	att := ovsdb.Attachment{ContainerID: x.ID, IfName: "eth0"}
	res, err := cli.Reserve(ctx, att, ovsdb.HomeOFPort(att), flows.AttachmentCookie(x.ID, "eth0").String())
	if err != nil {
		t.Fatal(err)
	}
	gc := func() {
		t.Helper()
		gcCfg := libcni.NewCNIConfigWithCacheDir([]string{binDir}, t.TempDir(), nil)
		if err := gcCfg.GCNetworkList(ctx, n.List, &libcni.GCArgs{}); err != nil {
			t.Fatalf("GC: %v", err)
		}
	}
	gc()
	if !slices.Contains(framework.OurVeths(t), x.HostVeth("eth0")) {
		t.Errorf("GC removed the veth of an ADD in flight")
	}
	if ids := framework.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids"); !strings.Contains(ids, "ovsflow.io/ofport."+strconv.Itoa(res.OFPort)) {
		t.Errorf("GC removed the claims of an ADD in flight: %s", ids)
	}
	if err := cli.Release(ctx, res); err != nil {
		t.Fatal(err)
	}
	gc()
	if slices.Contains(framework.OurVeths(t), x.HostVeth("eth0")) {
		t.Errorf("control: GC left the veth of an attachment with no port and no ADD in flight")
	}
}

// ovs-portmap withdraws host ports under a deleting mark, as ovs-bridge's
// DEL does. Rounds of: an attachment with host ports added, then
// ovs-portmap's DEL alone with one-shot reconcile passes running until it
// returns: after it (no pass begun since), no host port flow of the
// attachment is left, and its port security flows are there.
func TestBusyPortmapDel(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	network := uniq("busypm")
	n := h.PortmapList(t, "1.1.0", network, nil)
	pmOnly := framework.NewCNI(t, conflist("1.1.0", network,
		map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"portMappings": true}}), nil)

	rounds := 20
	if framework.Slowdown > 1 {
		rounds = 5 // software emulation (hack/ovs-vm.sh): behaviour, not load
	}
	var passes atomic.Int64
	for r := 0; r < rounds; r++ {
		c := framework.NewContainer(t)
		caps := mappings(pm(21000+2*r, 80, "tcp", ""), pm(21001+2*r, 53, "udp", ""))
		n.MustAdd(t, c, "eth0", caps)
		t.Cleanup(func() { n.Del(c, "eth0", caps) })
		stop := make(chan struct{})
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
				if exec.Command(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr).Run() == nil {
					passes.Add(1)
				}
			}
		}()
		time.Sleep(time.Duration(r%4) * 20 * time.Millisecond) // time is the subject: DEL meets the sweeper at a different point each round
		err := pmOnly.Del(c, "eth0", caps)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: ovs-portmap DEL: %v", r, err)
		}
		if fl := h.FlowsOf(t, flows.AttachmentCookie(c.ID, "eth0")); len(fl) > 0 {
			t.Errorf("round %d: host port flows of %s after ovs-portmap's DEL: %v", r, c.ID, fl)
		}
		if fl := h.FlowsOf(t, flows.AttachmentCookie(c.ID, "eth0").WithKind(flows.CookieKindPortSecurity)); len(fl) == 0 {
			t.Errorf("round %d: %s lost its port security flows to ovs-portmap's DEL", r, c.ID)
		}
		if t.Failed() {
			t.FailNow()
		}
		if err := n.Del(c, "eth0", caps); err != nil {
			t.Fatalf("round %d: DEL: %v", r, err)
		}
	}
	t.Logf("%d rounds, %d reconcile passes", rounds, passes.Load())
}
