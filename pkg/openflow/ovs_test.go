package openflow

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

// The tests against a real Open vSwitch share one private sandbox
// (hack/ovs-sandbox.sh: ovsdb-server and ovs-vswitchd with the netdev
// datapath in a netns of their own, files under /run/ovsflow/NAME), started
// by the first test that needs it and stopped by TestMain.
var ovs struct {
	once   sync.Once
	name   string
	db     string // unix:RUNDIR/db.sock
	rundir string
	skip   string // why the OVS tests cannot run here
	seq    atomic.Int64
}

func TestMain(m *testing.M) {
	code := m.Run()
	if ovs.name != "" {
		exec.Command("../../hack/ovs-sandbox.sh", "stop", ovs.name).Run()
	}
	os.Exit(code)
}

// requireOVS skips, loudly, without root or Open vSwitch, and otherwise
// starts the sandbox once.
func requireOVS(t testing.TB) {
	t.Helper()
	ovs.once.Do(func() {
		if os.Geteuid() != 0 {
			ovs.skip = "the Open vSwitch tests need root (network namespace, ovs-vswitchd)"
			return
		}
		for _, bin := range []string{"ovs-vsctl", "ovs-ofctl", "ovsdb-server", "ovs-vswitchd"} {
			if _, err := exec.LookPath(bin); err != nil {
				if _, err := os.Stat("/usr/sbin/" + bin); err != nil {
					ovs.skip = bin + " is not installed (apt-get install openvswitch-switch)"
					return
				}
			}
		}
		name := fmt.Sprintf("ovsflow-openflow-%d", os.Getpid())
		out, err := exec.Command("../../hack/ovs-sandbox.sh", "start", name).Output()
		if err != nil {
			ovs.skip = fmt.Sprintf("the Open vSwitch sandbox did not start: %v", err)
			if ee, ok := err.(*exec.ExitError); ok {
				ovs.skip += ": " + string(ee.Stderr)
			}
			exec.Command("../../hack/ovs-sandbox.sh", "stop", name).Run()
			return
		}
		ovs.name = name
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			switch k, v, _ := strings.Cut(sc.Text(), "="); k {
			case "OVSDB":
				ovs.db = v
			case "RUNDIR":
				ovs.rundir = v
			}
		}
	})
	if ovs.skip != "" {
		fmt.Fprintf(os.Stderr, "*** SKIPPING %s: %s ***\n", t.Name(), ovs.skip)
		t.Skipf("SKIPPED: %s", ovs.skip)
	}
}

func run(t testing.TB, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// newBridge adds a netdev bridge to the sandbox and returns its OpenFlow
// target.
func newBridge(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("ofb%d", ovs.seq.Add(1))
	run(t, "", "ovs-vsctl", "--db="+ovs.db, "--timeout=10", "add-br", name, "--", "set", "bridge", name, "datapath_type=netdev")
	t.Cleanup(func() { exec.Command("ovs-vsctl", "--db="+ovs.db, "--timeout=10", "del-br", name).Run() })
	return "unix:" + filepath.Join(ovs.rundir, name+".mgmt")
}

// dump returns the bridge's flows as ovs-ofctl prints them, sorted.
func dump(t testing.TB, target string) []string {
	t.Helper()
	out := run(t, "", "ovs-ofctl", "--no-names", "-O", "OpenFlow14", "dump-flows", "--no-stats", target)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "OFPST_FLOW") {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return lines
}

func ofctlApply(t testing.TB, target, bundle string) {
	t.Helper()
	run(t, bundle, "ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--bundle", "add-flows", target, "-")
}

func sameFlows(t *testing.T, what string, byOfctl, byApply string) {
	t.Helper()
	a, b := dump(t, byOfctl), dump(t, byApply)
	if !slices.Equal(a, b) {
		t.Fatalf("%s: flows differ\nby ovs-ofctl (%d):\n%s\nby openflow.Apply (%d):\n%s",
			what, len(a), strings.Join(a, "\n"), len(b), strings.Join(b, "\n"))
	}
}

// ordered returns the corpus in a fixed order, with a reconcile-style
// bundle (shared flows, several attachments, a stale delete) at the end.
func ordered(t testing.TB) [][2]string {
	t.Helper()
	c := corpus(t)
	var out [][2]string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range c {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, [2]string{k, c[k]})
	}
	stale := flows.AttachmentCookie("gone", "eth0")
	out = append(out, [2]string{"reconcile", c["shared"] + c["portsec_dual"] + c["bundle_v6_snat"] + "delete " + stale.Match() + "\n"})
	return out
}

// TestApplyEquivalence applies every bundle of the corpus, in turn and then
// all over again, to bridge A with ovs-ofctl and to bridge B with Apply, and
// compares the flows after each step.
func TestApplyEquivalence(t *testing.T) {
	requireOVS(t)
	a, b := newBridge(t), newBridge(t)
	for round := 1; round <= 2; round++ {
		for _, c := range ordered(t) {
			ofctlApply(t, a, c[1])
			if err := Apply(context.Background(), b, c[1]); err != nil {
				t.Fatalf("round %d, %s: %v", round, c[0], err)
			}
			sameFlows(t, fmt.Sprintf("round %d, %s", round, c[0]), a, b)
		}
	}
	if err := Apply(context.Background(), b, ""); err != nil {
		t.Errorf("empty bundle: %v", err)
	}
	if n := len(dump(t, b)); n < 30 {
		t.Errorf("got %d flows on the bridge, want the corpus (over 30)", n)
	}
}

// TestApplyEachOnFreshBridge applies each bundle alone to two new bridges.
func TestApplyEachOnFreshBridge(t *testing.T) {
	requireOVS(t)
	for _, c := range ordered(t) {
		t.Run(c[0], func(t *testing.T) {
			a, b := newBridge(t), newBridge(t)
			ofctlApply(t, a, c[1])
			if err := Apply(context.Background(), b, c[1]); err != nil {
				t.Fatal(err)
			}
			sameFlows(t, c[0], a, b)
		})
	}
}

func TestDeleteCookieEquivalence(t *testing.T) {
	requireOVS(t)
	c := flows.AttachmentCookie("ctr-dual_snat", "eth0")
	tests := []struct {
		name         string
		cookie, mask uint64
	}{
		{"one attachment, exact", uint64(c), ^uint64(0)},
		{"one attachment, any kind", uint64(c.WithKind(0)), uint64(flows.AttachmentMask)},
		{"port security of one attachment", uint64(flows.AttachmentCookie("ps-dual", "eth0").WithKind(flows.CookieKindPortSecurity)), ^uint64(0)},
		{"no such cookie", 0x0fc5_01ff_0000_0001, ^uint64(0)},
		{"the whole suite", uint64(flows.CookieSuite), uint64(flows.SuiteMask)},
		{"everything (mask 0)", 0, 0},
	}
	a, b := newBridge(t), newBridge(t)
	for _, c := range ordered(t) {
		ofctlApply(t, a, c[1])
		ofctlApply(t, b, c[1])
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(dump(t, b))
			run(t, "", "ovs-ofctl", "--no-names", "-O", "OpenFlow14", "del-flows", a, fmt.Sprintf("cookie=%#x/%#x", tt.cookie, tt.mask))
			if err := DeleteCookie(context.Background(), b, tt.cookie, tt.mask); err != nil {
				t.Fatal(err)
			}
			sameFlows(t, tt.name, a, b)
			t.Logf("%d flows before, %d after", before, len(dump(t, b)))
		})
	}
}

// TestApplyErrorIsAtomic sends bundles that OVS rejects, once when the
// flow_mod is added to the bundle and once at commit, and checks that the
// error names the line and the OpenFlow error and that nothing changed.
func TestApplyErrorIsAtomic(t *testing.T) {
	requireOVS(t)
	c := corpus(t)
	cookie := flows.AttachmentCookie("ctr-a", "eth0")
	tests := []struct {
		name  string
		setup func(t *testing.T, target string)
		bad   string
		want  []string
	}{
		{
			name: "goto_table to a lower table (rejected on add)",
			bad:  "add cookie=0x0fc50139c16eb78e,table=41,priority=1,ip,actions=goto_table:40\n",
			want: []string{"line 27", "goto_table:40", "OFPET_BAD_INSTRUCTION code 2"},
		},
		{
			name: "ct(nat) without an ip match (rejected on add)",
			bad:  "add cookie=0x0fc50139c16eb78e,table=42,priority=7,actions=ct(zone=1,nat,table=43)\n",
			want: []string{"line 27", "OFPT_ERROR"},
		},
		{
			name: "table 41 full (rejected on commit)",
			setup: func(t *testing.T, target string) {
				br := strings.TrimSuffix(filepath.Base(target), ".mgmt")
				run(t, "", "ovs-vsctl", "--db="+ovs.db, "--timeout=10", "--", "--id=@ft", "create", "Flow_Table", "flow_limit=1", "overflow_policy=refuse",
					"--", "set", "Bridge", br, "flow_tables:41=@ft")
			},
			want: []string{"OFPET_FLOW_MOD_FAILED code 1", "line", "table=41", "bundle commit: OFPT_ERROR OFPET_BUNDLE_FAILED"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := newBridge(t)
			if tt.setup != nil {
				tt.setup(t, target)
			}
			// Some flows of ours to keep, then a bundle that would replace them.
			first := c["portsec_dual"] + "add cookie=0x0fc50139c16eb78e,table=0,priority=1,actions=drop\n"
			if err := Apply(context.Background(), target, first); err != nil {
				t.Fatal(err)
			}
			before := dump(t, target)
			bundle := c["bundle_snat.golden"] + tt.bad
			if !strings.HasPrefix(bundle, "delete "+cookie.Match()) {
				t.Fatalf("bundle_snat.golden does not start by deleting %s", cookie)
			}
			err := Apply(context.Background(), target, bundle)
			if err == nil {
				t.Fatal("got no error, want one")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if after := dump(t, target); !slices.Equal(before, after) {
				t.Errorf("flows changed\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
			}
			// ovs-ofctl agrees that the bundle is bad.
			cmd := exec.Command("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--bundle", "add-flows", target, "-")
			cmd.Stdin = strings.NewReader(bundle)
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("ovs-ofctl applied the bad bundle: %s", out)
			}
			t.Logf("error: %v", err)
		})
	}
}

func TestApplyBridgeWithoutOpenFlow14(t *testing.T) {
	requireOVS(t)
	target := newBridge(t)
	br := strings.TrimSuffix(filepath.Base(target), ".mgmt")
	run(t, "", "ovs-vsctl", "--db="+ovs.db, "--timeout=10", "set", "bridge", br, "protocols=OpenFlow10")
	err := Apply(context.Background(), target, "add table=0,priority=1,actions=drop\n")
	if err == nil || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "OpenFlow 1.4") {
		t.Fatalf("got %v, want a version negotiation error", err)
	}
	t.Logf("error: %v", err)
}

// BenchmarkApply compares Apply with an exec of ovs-ofctl for
// bundle_snat.golden (one delete and 19 adds).
func BenchmarkApply(b *testing.B) {
	requireOVS(b)
	bundle, err := os.ReadFile("../flows/testdata/bundle_snat.golden")
	if err != nil {
		b.Fatal(err)
	}
	target := newBridge(b)
	b.Run("native", func(b *testing.B) {
		for b.Loop() {
			if err := Apply(context.Background(), target, string(bundle)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(strings.Count(string(bundle), "\n")), "lines/op")
	})
	b.Run("ovs-ofctl", func(b *testing.B) {
		for b.Loop() {
			ofctlApply(b, target, string(bundle))
		}
		b.ReportMetric(float64(strings.Count(string(bundle), "\n")), "lines/op")
	})
	b.Run("native+revalidation", func(b *testing.B) {
		for b.Loop() {
			w, err := StartRevalidation(context.Background(), target)
			if err != nil {
				b.Fatal(err)
			}
			if err := Apply(context.Background(), target, string(bundle)); err != nil {
				b.Fatal(err)
			}
			if err := w.Wait(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("delete-native", func(b *testing.B) {
		for b.Loop() {
			if err := DeleteCookie(context.Background(), target, 1, ^uint64(0)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("delete-ovs-ofctl", func(b *testing.B) {
		for b.Loop() {
			run(b, "", "ovs-ofctl", "--no-names", "-O", "OpenFlow14", "del-flows", target, "cookie=0x1/-1")
		}
	})
}

// A revalidation wait registered before a flow change reaches ovs-vswitchd's
// control socket beside the management socket and ends after the change; it
// is nil where there is no control socket.
func TestRevalidation(t *testing.T) {
	requireOVS(t)
	target := newBridge(t)
	ctx := context.Background()
	w, err := StartRevalidation(ctx, target)
	if err != nil || w == nil {
		t.Fatalf("beside %s: %v, %v", target, w, err)
	}
	if err := Apply(ctx, target, "add cookie=0x1,table=0,priority=1,tcp,tp_dst=1,actions=drop\n"); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("waiting for the round after a change: %v", err)
	}
	for _, target := range []string{"tcp:127.0.0.1:6653", "unix:" + filepath.Join(t.TempDir(), "br.mgmt")} {
		if w, err := StartRevalidation(ctx, target); w != nil || err != nil {
			t.Errorf("%s (no control socket): %v, %v, want nil, nil", target, w, err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ovs-vswitchd.pid"), []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := StartRevalidation(ctx, "unix:"+filepath.Join(dir, "br.mgmt")); err == nil {
		t.Errorf("a pidfile naming a control socket that does not exist: got nil, want an error")
	}
}

// TestTimeout talks to a socket that accepts and never answers.
func TestTimeout(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "mute.mgmt")
	l, err := netListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	target := "unix:" + sock
	calls := map[string]func(ctx context.Context) error{
		"Apply":        func(ctx context.Context) error { return Apply(ctx, target, "add table=0,priority=1,actions=drop\n") },
		"DeleteCookie": func(ctx context.Context) error { return DeleteCookie(ctx, target, 1, ^uint64(0)) },
	}
	for name, call := range calls {
		t.Run(name+" deadline", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := call(ctx)
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("got %v, want ErrTimeout", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("returned after %v, want about 200ms", d)
			}
		})
		t.Run(name+" cancel", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			if err := call(ctx); !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
		})
	}
}

// netListenUnix listens on sock and accepts connections that it never
// answers, until closed.
func netListenUnix(sock string) (net.Listener, error) {
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return l, nil
}

// TestApplyLarge applies a bundle of a few thousand flows, and one whose
// every line is rejected (thousands of ERRORs while the bundle is still
// being written), which must fail promptly rather than deadlock.
func TestApplyLarge(t *testing.T) {
	requireOVS(t)
	var good, bad strings.Builder
	good.WriteString("delete cookie=0x0fc5000000000000/0xffff000000000000\n")
	for i := range 3000 {
		fmt.Fprintf(&good, "add cookie=0x0fc5010000000001,table=0,priority=200,tcp,nw_dst=198.51.100.1,tp_dst=%d,actions=ct(commit,zone=64000,nat(dst=192.0.2.10:%d),table=40)\n", 10000+i, i+1)
		fmt.Fprintf(&bad, "add cookie=0x1,table=41,priority=%d,ip,actions=goto_table:40\n", i)
	}
	a, b := newBridge(t), newBridge(t)
	ofctlApply(t, a, good.String())
	start := time.Now()
	if err := Apply(context.Background(), b, good.String()); err != nil {
		t.Fatal(err)
	}
	t.Logf("3000 flows applied in %v", time.Since(start))
	sameFlows(t, "3000 flows", a, b)

	start = time.Now()
	err := Apply(context.Background(), b, bad.String())
	if err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want 3000 OpenFlow errors", err)
	}
	if n := strings.Count(err.Error(), "OFPET_BAD_INSTRUCTION"); n != maxErrors || !strings.Contains(err.Error(), "and 2995 more") {
		t.Errorf("got %d errors reported, want %d and 2995 more: %v", n, maxErrors, err)
	}
	t.Logf("3000 rejected lines reported in %v", time.Since(start))
	sameFlows(t, "after the rejected bundle", a, b)
}

// TestDeleteStrictEquivalence lifts one tombstone of two, through
// ovs-ofctl and through Apply, on top of the corpus: the same flows remain.
func TestDeleteStrictEquivalence(t *testing.T) {
	requireOVS(t)
	a, b := newBridge(t), newBridge(t)
	for _, c := range ordered(t) {
		ofctlApply(t, a, c[1])
		ofctlApply(t, b, c[1])
	}
	ofctlApply(t, a, flows.TombstoneBundle(5, 6))
	ofctlApply(t, b, flows.TombstoneBundle(5, 6))
	before := len(dump(t, b))
	lift := flows.TombstoneRemoval(5)
	ofctlApply(t, a, lift)
	if err := Apply(context.Background(), b, lift); err != nil {
		t.Fatal(err)
	}
	sameFlows(t, lift, a, b)
	after := dump(t, b)
	if len(after) != before-1 {
		t.Fatalf("%d flows before, %d after, want one fewer", before, len(after))
	}
	for _, f := range after {
		if strings.Contains(f, "priority=65000,in_port=5 ") {
			t.Errorf("tombstone on port 5 still there: %s", f)
		}
	}
}
