package openflow_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/internal/ovstest"
	. "github.com/ovsflow/ovs-cni/pkg/openflow"
)

// The tests against a real Open vSwitch share one private sandbox
// (hack/ovs-sandbox.sh: ovsdb-server and ovs-vswitchd with the netdev
// datapath in a netns of their own, files under /run/ovsflow/NAME), started
// by the first test that needs it and stopped by TestMain.
var ovs struct {
	*ovstest.Sandbox
	seq atomic.Int64
}

func TestMain(m *testing.M) {
	code := m.Run()
	ovstest.Stop()
	os.Exit(code)
}

// requireOVS skips, loudly, without root or Open vSwitch, and otherwise
// starts the sandbox once.
func requireOVS(t testing.TB) {
	t.Helper()
	ovs.Sandbox = ovstest.Require(t, "ovsflow-openflow", "ovs-vsctl", "ovs-ofctl", "ovsdb-server", "ovs-vswitchd")
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
	run(t, "", "ovs-vsctl", "--db="+ovs.DB, "--timeout=10", "add-br", name, "--", "set", "bridge", name, "datapath_type=netdev")
	t.Cleanup(func() { exec.Command("ovs-vsctl", "--db="+ovs.DB, "--timeout=10", "del-br", name).Run() })
	return "unix:" + filepath.Join(ovs.RunDir, name+".mgmt")
}

// ep is the endpoint s names.
func ep(s string) endpoint.Endpoint {
	e, err := endpoint.Parse(s)
	if err != nil {
		panic(err)
	}
	return e
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

func ofctlApply(t testing.TB, target string, bundle Bundle) {
	t.Helper()
	run(t, bundle.String(), "ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--bundle", "add-flows", target, "-")
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
func ordered(t testing.TB) []namedBundle {
	t.Helper()
	c := corpus(t)
	var out []namedBundle
	for _, k := range slices.Sorted(maps.Keys(c)) {
		out = append(out, namedBundle{k, c[k]})
	}
	stale := flows.AttachmentCookie("gone", "eth0")
	var rec Bundle
	rec = append(append(append(append(rec, c["shared"]...), c["portsec_dual"]...), c["bundle_v6_snat"]...), stale.Delete())
	return append(out, namedBundle{"reconcile", rec})
}

type namedBundle struct {
	name   string
	bundle Bundle
}

// TestApplyEquivalence applies every bundle of the corpus, in turn and then
// all over again, to bridge A with ovs-ofctl and to bridge B with Apply, and
// compares the flows after each step.
func TestApplyEquivalence(t *testing.T) {
	requireOVS(t)
	a, b := newBridge(t), newBridge(t)
	for round := 1; round <= 2; round++ {
		for _, c := range ordered(t) {
			ofctlApply(t, a, c.bundle)
			if err := Apply(context.Background(), ep(b), c.bundle); err != nil {
				t.Fatalf("round %d, %s: %v", round, c.name, err)
			}
			sameFlows(t, fmt.Sprintf("round %d, %s", round, c.name), a, b)
		}
	}
	if err := Apply(context.Background(), ep(b), nil); err != nil {
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
		t.Run(c.name, func(t *testing.T) {
			a, b := newBridge(t), newBridge(t)
			ofctlApply(t, a, c.bundle)
			if err := Apply(context.Background(), ep(b), c.bundle); err != nil {
				t.Fatal(err)
			}
			sameFlows(t, c.name, a, b)
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
		ofctlApply(t, a, c.bundle)
		ofctlApply(t, b, c.bundle)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(dump(t, b))
			run(t, "", "ovs-ofctl", "--no-names", "-O", "OpenFlow14", "del-flows", a, fmt.Sprintf("cookie=%#x/%#x", tt.cookie, tt.mask))
			if err := DeleteFlows(context.Background(), ep(b), Delete{Cookie: tt.cookie, Mask: tt.mask}); err != nil {
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
		bad   Flow
		want  []string
	}{
		{
			name: "goto_table to a lower table (rejected on add)",
			bad: Flow{Cookie: 0x0fc50139c16eb78e, Table: 41, Priority: 1, Match: Match{}.EthType(EthIPv4),
				Actions: Actions{GotoTable{Table: 40}}},
			want: []string{"entry LAST", "goto_table:40", "OFPET_BAD_INSTRUCTION code 2"},
		},
		{
			name: "ct(nat) without an ip match (rejected on add)",
			bad: Flow{Cookie: 0x0fc50139c16eb78e, Table: 42, Priority: 7,
				Actions: Actions{CT{Zone: 1, NAT: &NAT{}, Table: Table(43)}}},
			want: []string{"entry LAST", "OFPT_ERROR"},
		},
		{
			name: "table 41 full (rejected on commit)",
			setup: func(t *testing.T, target string) {
				br := strings.TrimSuffix(filepath.Base(target), ".mgmt")
				run(t, "", "ovs-vsctl", "--db="+ovs.DB, "--timeout=10", "--", "--id=@ft", "create", "Flow_Table", "flow_limit=1", "overflow_policy=refuse",
					"--", "set", "Bridge", br, "flow_tables:41=@ft")
			},
			bad:  Flow{Cookie: 0x0fc50139c16eb78e, Table: 3, Priority: 1},
			want: []string{"OFPET_FLOW_MOD_FAILED code 1", "entry", "table=41", "bundle commit: OFPT_ERROR OFPET_BUNDLE_FAILED"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := newBridge(t)
			if tt.setup != nil {
				tt.setup(t, target)
			}
			// Some flows of ours to keep, then a bundle that would replace them.
			first := append(slices.Clone(c["portsec_dual"]), Flow{Cookie: 0x0fc50139c16eb78e, Priority: 1})
			if err := Apply(context.Background(), ep(target), first); err != nil {
				t.Fatal(err)
			}
			before := dump(t, target)
			bundle := append(slices.Clone(c["bundle_snat.golden"]), tt.bad)
			if !strings.HasPrefix(bundle.String(), "delete "+cookie.Delete().String()) {
				t.Fatalf("bundle_snat.golden does not start by deleting %s", cookie)
			}
			err := Apply(context.Background(), ep(target), bundle)
			if err == nil {
				t.Fatal("got no error, want one")
			}
			for _, w := range tt.want {
				w = strings.Replace(w, "LAST", strconv.Itoa(len(bundle)), 1) // the bad entry is the last
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if after := dump(t, target); !slices.Equal(before, after) {
				t.Errorf("flows changed\nbefore:\n%s\nafter:\n%s", strings.Join(before, "\n"), strings.Join(after, "\n"))
			}
			// ovs-ofctl agrees that the bundle is bad.
			cmd := exec.Command("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--bundle", "add-flows", target, "-")
			cmd.Stdin = strings.NewReader(bundle.String())
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("ovs-ofctl applied the bad bundle: %s", out)
			}
			t.Logf("error: %v", err)
		})
	}
}

// TestApplyBundleExpired: a bundle that ovs-vswitchd discards for its idle
// timeout before the commit (a node whose main loop was busy for that long)
// is sent again: the flows are in place, after two tries.
func TestApplyBundleExpired(t *testing.T) {
	requireOVS(t)
	target := newBridge(t)
	run(t, "", "ovs-vsctl", "--db="+ovs.DB, "--timeout=10", "set", "Open_vSwitch", ".", "other_config:bundle-idle-timeout=1")
	t.Cleanup(func() {
		run(t, "", "ovs-vsctl", "--db="+ovs.DB, "--timeout=10", "remove", "Open_vSwitch", ".", "other_config", "bundle-idle-timeout")
	})
	var tries int
	defer HoldFirstCommit(&tries)()
	bundle := corpus(t)["portsec_dual"]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Apply(ctx, ep(target), bundle); err != nil {
		t.Fatalf("Apply after an expired bundle: %v", err)
	}
	if tries != 2 {
		t.Errorf("got %d tries, want 2 (the first one's bundle expired)", tries)
	}
	ofctl := newBridge(t)
	ofctlApply(t, ofctl, bundle)
	sameFlows(t, "after a retried bundle", ofctl, target)
}

func TestApplyBridgeWithoutOpenFlow14(t *testing.T) {
	requireOVS(t)
	target := newBridge(t)
	br := strings.TrimSuffix(filepath.Base(target), ".mgmt")
	run(t, "", "ovs-vsctl", "--db="+ovs.DB, "--timeout=10", "set", "bridge", br, "protocols=OpenFlow10")
	err := Apply(context.Background(), ep(target), Bundle{Flow{Priority: 1}})
	if err == nil || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "OpenFlow 1.4") {
		t.Fatalf("got %v, want a version negotiation error", err)
	}
	t.Logf("error: %v", err)
}

// BenchmarkApply compares Apply with an exec of ovs-ofctl for
// bundle_snat.golden (one delete and 25 adds).
func BenchmarkApply(b *testing.B) {
	requireOVS(b)
	bundle := corpus(b)["bundle_snat.golden"]
	target := newBridge(b)
	b.Run("native", func(b *testing.B) {
		for b.Loop() {
			if err := Apply(context.Background(), ep(target), bundle); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(bundle)), "entries/op")
	})
	b.Run("ovs-ofctl", func(b *testing.B) {
		for b.Loop() {
			ofctlApply(b, target, bundle)
		}
		b.ReportMetric(float64(len(bundle)), "entries/op")
	})
	b.Run("dump-native", func(b *testing.B) {
		for b.Loop() {
			if _, err := Dump(context.Background(), ep(target), 0, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	flush := []CTFlush{{Zone: 64000, Proto: 17, Dst: node4, DstPort: 5353}, {Zone: 64002, Proto: 17, Dst: node4, DstPort: 5353}}
	b.Run("ct-flush-native", func(b *testing.B) {
		for b.Loop() {
			if err := FlushConntrack(context.Background(), ep(target), flush...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(flush)), "flushes/op")
	})
	b.Run("ct-flush-ovs-ofctl", func(b *testing.B) {
		for b.Loop() {
			for _, f := range flush {
				run(b, "", "ovs-ofctl", "-O", "OpenFlow14", "ct-flush", target, fmt.Sprintf("zone=%d", f.Zone), f.Tuple())
			}
		}
		b.ReportMetric(float64(len(flush)), "flushes/op")
	})
	b.Run("delete-native", func(b *testing.B) {
		for b.Loop() {
			if err := DeleteFlows(context.Background(), ep(target), Delete{Cookie: 1, Mask: ^uint64(0)}); err != nil {
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
		"Apply": func(ctx context.Context) error { return Apply(ctx, ep(target), Bundle{Flow{Priority: 1}}) },
		"DeleteFlows": func(ctx context.Context) error {
			return DeleteFlows(ctx, ep(target), Delete{Cookie: 1, Mask: ^uint64(0)})
		},
		"Dump": func(ctx context.Context) error { _, err := Dump(ctx, ep(target), 1, ^uint64(0)); return err },
		"FlushConntrack": func(ctx context.Context) error {
			return FlushConntrack(ctx, ep(target), CTFlush{Zone: 1, Proto: 17, DstPort: 53})
		},
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

// ApplyServed tries a bridge that no ovs-vswitchd serves (its socket
// missing, or refusing) for as long as its context lasts, and says so with
// ErrTimeout.
func TestApplyServedUntilDeadline(t *testing.T) {
	dir := t.TempDir()
	refusing := filepath.Join(dir, "refusing.mgmt")
	l, err := net.Listen("unix", refusing)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // the file of a dead ovs-vswitchd: connections are refused
	for name, target := range map[string]string{"missing": filepath.Join(dir, "missing.mgmt"), "refusing": refusing} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := ApplyServed(ctx, ep("unix:"+target), Bundle{Flow{Priority: 1}})
			if !errors.Is(err, ErrTimeout) || !NotServed(err) {
				t.Fatalf("got %v, want ErrTimeout saying the bridge is not served", err)
			}
			// (its deadline, not Err: Err lags the deadline on a loaded machine)
			if dl, _ := ctx.Deadline(); time.Now().Before(dl) {
				t.Errorf("returned %v before its context's deadline: %v", time.Until(dl), err)
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
// every entry is rejected (thousands of ERRORs while the bundle is still
// being written), which must fail promptly rather than deadlock.
func TestApplyLarge(t *testing.T) {
	requireOVS(t)
	good := Bundle{Delete{Cookie: 0x0fc5000000000000, Mask: 0xffff000000000000}}
	var bad Bundle
	for i := range 3000 {
		good = append(good, Flow{Cookie: 0x0fc5010000000001, Priority: 200,
			Match:   Match{}.Proto(EthIPv4, ProtoTCP).IPDst(Host(node4)).TPDst(uint16(10000 + i)),
			Actions: Actions{CT{Commit: true, Zone: 64000, NAT: &NAT{Dst: true, Addr: ctr4, Port: uint16(i + 1)}, Table: Table(40)}}})
		bad = append(bad, Flow{Cookie: 1, Table: 41, Priority: uint16(i), Match: Match{}.EthType(EthIPv4), Actions: Actions{GotoTable{Table: 40}}})
	}
	a, b := newBridge(t), newBridge(t)
	ofctlApply(t, a, good)
	start := time.Now()
	if err := Apply(context.Background(), ep(b), good); err != nil {
		t.Fatal(err)
	}
	t.Logf("3000 flows applied in %v", time.Since(start))
	sameFlows(t, "3000 flows", a, b)
	start = time.Now()
	got, err := Dump(context.Background(), ep(b), 0x0fc5010000000001, ^uint64(0))
	if err != nil || len(got) != 3000 {
		t.Fatalf("dump: got %d flows, %v; want 3000 (several multipart replies)", len(got), err)
	}
	t.Logf("3000 flows dumped in %v", time.Since(start))

	start = time.Now()
	err = Apply(context.Background(), ep(b), bad)
	if err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want 3000 OpenFlow errors", err)
	}
	if n := strings.Count(err.Error(), "OFPET_BAD_INSTRUCTION"); n != MaxErrors || !strings.Contains(err.Error(), "and 2995 more") {
		t.Errorf("got %d errors reported, want %d and 2995 more: %v", n, MaxErrors, err)
	}
	t.Logf("3000 rejected entries reported in %v", time.Since(start))
	sameFlows(t, "after the rejected bundle", a, b)
}

// TestDumpDecodesWhatWasApplied applies each bundle of the corpus to a new
// bridge and dumps it back: the flows decoded are the flows applied, value
// for value (Diff finds nothing), whatever OVS normalised on the way.
func TestDumpDecodesWhatWasApplied(t *testing.T) {
	requireOVS(t)
	for _, c := range ordered(t) {
		t.Run(c.name, func(t *testing.T) {
			target := newBridge(t)
			if err := Apply(context.Background(), ep(target), c.bundle); err != nil {
				t.Fatal(err)
			}
			all, err := Dump(context.Background(), ep(target), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got, want []Flow
			for _, f := range all {
				if f.Cookie != 0 { // the bridge's own NORMAL flow
					got = append(got, f)
				}
			}
			for _, m := range c.bundle {
				if f, ok := m.(Flow); ok {
					want = append(want, f)
				}
			}
			if len(got) == 0 {
				t.Fatal("dumped nothing")
			}
			if err := Diff(want, got); err != nil {
				t.Fatalf("%v\nby ovs-ofctl:\n%s", err, strings.Join(dump(t, target), "\n"))
			}
		})
	}
}

// TestDiffIsAsStrictAsDiffFlows changes installed flows behind the plugin's
// back with ovs-ofctl, one way at a time, and checks that Diff reports each
// change as ovs-ofctl diff-flows does: a flow removed, a flow added with the
// attachment's cookie, a flow whose actions or cookie differ.
func TestDiffIsAsStrictAsDiffFlows(t *testing.T) {
	requireOVS(t)
	a := goldenAttachments(t)["bundle_snat.golden"]
	p := flows.DefaultPipeline()
	want := p.AttachmentFlows(a)
	cookie := fmt.Sprintf("cookie=%s/-1", a.Cookie)
	tests := []struct {
		name    string
		change  func(target string)
		missing int
		extra   int
		changed int
	}{
		{"untouched", func(string) {}, 0, 0, 0},
		{"flow removed", func(target string) {
			run(t, "", "ovs-ofctl", "-O", "OpenFlow14", "del-flows", target, "table=41,"+cookie)
		}, 2, 0, 0},
		{"extra flow with our cookie", func(target string) {
			run(t, "", "ovs-ofctl", "-O", "OpenFlow14", "add-flow", target, fmt.Sprintf("cookie=%s,table=40,priority=7,ip,actions=drop", a.Cookie))
		}, 0, 1, 0},
		{"actions changed", func(target string) {
			run(t, "", "ovs-ofctl", "-O", "OpenFlow14", "mod-flows", target, "table=41,"+cookie+",ip,nw_dst=192.0.2.10,actions=drop")
		}, 0, 0, 1},
		{"extra flow with our cookie that the binding cannot decode", func(target string) {
			run(t, "", "ovs-ofctl", "-O", "OpenFlow14", "add-flow", target, fmt.Sprintf("cookie=%s,table=40,priority=8,tun_id=0x5,actions=drop", a.Cookie))
		}, 0, 1, 0},
		{"vlan_tci match widened", func(target string) {
			run(t, "", "ovs-ofctl", "-O", "OpenFlow14", "add-flow", target,
				fmt.Sprintf("cookie=%s,table=0,priority=200,tcp,nw_dst=198.51.100.1,tp_dst=8080,actions=drop", a.Cookie))
		}, 0, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := newBridge(t)
			if err := Apply(context.Background(), ep(target), p.Bundle(a)); err != nil {
				t.Fatal(err)
			}
			tt.change(target)
			got, err := Dump(context.Background(), ep(target), uint64(a.Cookie), ^uint64(0))
			if err != nil {
				t.Fatal(err)
			}
			err = Diff(want, got)
			var d *DiffError
			if tt.missing+tt.extra+tt.changed == 0 {
				if err != nil {
					t.Fatalf("got %v, want no difference", err)
				}
				return
			}
			if !errors.As(err, &d) {
				t.Fatalf("got %v, want a *DiffError", err)
			}
			if len(d.Missing) != tt.missing || len(d.Extra) != tt.extra || len(d.Changed) != tt.changed {
				t.Errorf("got %d missing, %d extra, %d changed; want %d, %d, %d:\n%v",
					len(d.Missing), len(d.Extra), len(d.Changed), tt.missing, tt.extra, tt.changed, err)
			}
			t.Logf("%v", err)
		})
	}
}

// TestFlushConntrack commits UDP and TCP conntrack entries with packet-outs
// and flushes the UDP entries of one host port in one zone, in each of the
// three ways the plugins send a flush (alone, after a bundle, with a cookie
// delete): those go, the others (another port, another protocol, another
// zone) stay, and the flows of the bundle or the delete are in or gone.
func TestFlushConntrack(t *testing.T) {
	requireOVS(t)
	flush := CTFlush{Zone: 64000, Proto: 17, Dst: node4, DstPort: 5353}
	flow := Flow{Cookie: 0x77, Table: 0, Priority: 5, Match: Match{}.Proto(EthIPv4, ProtoUDP).TPDst(5353)}
	for _, tt := range []struct {
		name   string
		before func(t *testing.T, target string)
		flush  func(target string) error
		flows  int // flows of cookie 0x77 afterwards
	}{
		{"FlushConntrack", nil, func(target string) error { return FlushConntrack(context.Background(), ep(target), flush) }, 0},
		{"Apply", nil, func(target string) error { return Apply(context.Background(), ep(target), Bundle{flow}, flush) }, 1},
		{"DeleteFlows", func(t *testing.T, target string) {
			if err := Apply(context.Background(), ep(target), Bundle{flow}); err != nil {
				t.Fatal(err)
			}
		}, func(target string) error {
			return DeleteFlows(context.Background(), ep(target), Delete{Cookie: 0x77, Mask: ^uint64(0)}, flush)
		}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			target := newBridge(t)
			ctl, err := filepath.Glob(filepath.Join(ovs.RunDir, "ovs-vswitchd.*.ctl"))
			if err != nil || len(ctl) != 1 {
				t.Fatalf("control socket: %v %v", ctl, err)
			}
			commit := func(proto uint8, dport uint16, zone uint16) {
				t.Helper()
				run(t, "", "ovs-ofctl", "-O", "OpenFlow14", "packet-out", target,
					fmt.Sprintf("in_port=LOCAL packet=%s actions=ct(commit,zone=%d)", packet(proto, dport), zone))
			}
			entries := func() []string {
				t.Helper()
				var out []string
				for _, l := range strings.Split(run(t, "", "ovs-appctl", "-t", ctl[0], "dpctl/dump-conntrack"), "\n") {
					if strings.Contains(l, "198.51.100.1") {
						out = append(out, strings.TrimSpace(l))
					}
				}
				slices.Sort(out)
				return out
			}
			run(t, "", "ovs-appctl", "-t", ctl[0], "dpctl/flush-conntrack")
			commit(17, 5353, 64000) // to flush
			commit(17, 5354, 64000) // another port
			commit(6, 5353, 64000)  // another protocol
			commit(17, 5353, 64002) // another zone
			before := entries()
			if len(before) != 4 {
				t.Fatalf("got %d conntrack entries, want 4:\n%s", len(before), strings.Join(before, "\n"))
			}
			if tt.before != nil {
				tt.before(t, target)
			}
			if err := tt.flush(target); err != nil {
				t.Fatal(err)
			}
			after := entries()
			var gone []string
			for _, e := range before {
				if !slices.Contains(after, e) {
					gone = append(gone, e)
				}
			}
			if len(after) != 3 || len(gone) != 1 || !strings.Contains(gone[0], "dport=5353") || !strings.Contains(gone[0], "zone=64000") || !strings.HasPrefix(gone[0], "udp") {
				t.Fatalf("flushed %q, left\n%s", gone, strings.Join(after, "\n"))
			}
			got, err := Dump(context.Background(), ep(target), 0x77, ^uint64(0))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.flows {
				t.Fatalf("got %d flows of cookie 0x77 after the flush, want %d: %v", len(got), tt.flows, got)
			}
		})
	}
}

// packet returns an Ethernet frame from 10.0.0.1:1234 to
// 198.51.100.1:dport, UDP or TCP (a SYN), in hexadecimal.
func packet(proto uint8, dport uint16) string {
	var l4 []byte
	if proto == 17 {
		l4 = binary.BigEndian.AppendUint16(nil, 1234)
		l4 = binary.BigEndian.AppendUint16(l4, dport)
		l4 = append(l4, 0, 12, 0, 0, 'a', 'b', 'c', 'd')
	} else {
		l4 = binary.BigEndian.AppendUint16(nil, 1234)
		l4 = binary.BigEndian.AppendUint16(l4, dport)
		l4 = append(l4, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0)
		// The checksum over the pseudo header: conntrack drops a bad one.
		pseudo := append([]byte{10, 0, 0, 1, 198, 51, 100, 1, 0, 6, 0, byte(len(l4))}, l4...)
		binary.BigEndian.PutUint16(l4[16:], checksum(pseudo))
	}
	ip := []byte{0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 198, 51, 100, 1}
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	eth := []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 8, 0}
	return hex.EncodeToString(append(append(eth, ip...), l4...))
}

// checksum is the Internet checksum of b (of even length).
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// TestClearPortEquivalence clears one port of two (tombstones, port
// security and reply flows on in_port 7 and 5 of the corpus), through
// ovs-ofctl and through Apply: the same flows remain, none on in_port 5.
func TestClearPortEquivalence(t *testing.T) {
	requireOVS(t)
	a, b := newBridge(t), newBridge(t)
	for _, c := range ordered(t) {
		ofctlApply(t, a, c.bundle)
		ofctlApply(t, b, c.bundle)
	}
	ofctlApply(t, a, flows.TombstoneBundle(5, 6))
	ofctlApply(t, b, flows.TombstoneBundle(5, 6))
	before := dump(t, b)
	clear := Bundle{flows.ClearPort(5)}
	ofctlApply(t, a, clear)
	if err := Apply(context.Background(), ep(b), clear); err != nil {
		t.Fatal(err)
	}
	sameFlows(t, clear.String(), a, b)
	after := dump(t, b)
	if len(after) != len(before)-1 {
		t.Fatalf("%d flows before, %d after, want one fewer (the tombstone of port 5)", len(before), len(after))
	}
	for _, f := range after {
		if strings.Contains(f, "in_port=5 ") || strings.Contains(f, "in_port=5,") {
			t.Errorf("flow on port 5 still there: %s", f)
		}
	}
	clear = Bundle{flows.ClearPort(7)}
	ofctlApply(t, a, clear)
	if err := Apply(context.Background(), ep(b), clear); err != nil {
		t.Fatal(err)
	}
	sameFlows(t, clear.String(), a, b)
	for _, f := range dump(t, b) {
		if strings.Contains(f, "in_port=7 ") || strings.Contains(f, "in_port=7,") {
			t.Errorf("flow on port 7 still there: %s", f)
		}
	}
	if n := len(dump(t, b)); n >= len(after) {
		t.Errorf("clearing port 7 removed nothing (%d flows, %d before)", n, len(after))
	}
}

// TestDumpStatsCounts sends three frames through a flow (packet-out to
// table 0) and checks that DumpStats reports them, and nothing for a flow
// that no frame matched, as ovs-ofctl dump-flows does.
func TestDumpStatsCounts(t *testing.T) {
	requireOVS(t)
	target := newBridge(t)
	c := uint64(flows.AttachmentCookie("stats", "eth0"))
	hit := Flow{Cookie: c, Priority: 100, Match: Match{}.EthType(EthARP), Actions: Actions{}}
	miss := Flow{Cookie: c, Priority: 90, Match: Match{}.EthType(EthIPv6), Actions: Actions{}}
	if err := Apply(context.Background(), ep(target), Bundle{hit, miss}); err != nil {
		t.Fatal(err)
	}
	// An ARP request of 60 bytes, in_port LOCAL, through the pipeline.
	arp := "ffffffffffff" + "020000000001" + "0806" + "0001080006040001" + "020000000001" + "c0000201" + "000000000000" + "c0000202" + strings.Repeat("00", 18)
	for range 3 {
		run(t, "", "ovs-ofctl", "-O", "OpenFlow14", "packet-out", target, "in_port=LOCAL,packet="+arp+",actions=resubmit(,0)")
	}
	got, err := DumpStats(context.Background(), ep(target), c, ^uint64(0))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[uint16][2]uint64{}
	for _, f := range got {
		counts[f.Priority] = [2]uint64{f.Packets, f.Bytes}
	}
	if want := [2]uint64{3, 180}; counts[100] != want {
		t.Errorf("flow %s: got packets, bytes %v, want %v\n%s", hit, counts[100], want, strings.Join(dump(t, target), "\n"))
	}
	if want := [2]uint64{0, 0}; counts[90] != want {
		t.Errorf("flow %s: got packets, bytes %v, want %v", miss, counts[90], want)
	}
}

// TestMeters: SetMeters installs what ovs-ofctl add-meter does, modifies a
// meter in place (the flow using it stays), a flow with a Meter applies and
// dumps back equal, and DeleteMeters removes the meter and its flow.
func TestMeters(t *testing.T) {
	requireOVS(t)
	target := newBridge(t)
	ctx := context.Background()
	meters := func() string {
		out := run(t, "", "ovs-ofctl", "-O", "OpenFlow14", "dump-meters", target)
		_, body, _ := strings.Cut(out, "\n") // the OFPST_METER_CONFIG line
		return strings.Join(strings.Fields(body), " ")
	}
	m := MeterBand{ID: 7, RateKbps: 20000, BurstKb: 2000}
	if err := SetMeters(ctx, ep(target), m); err != nil {
		t.Fatal(err)
	}
	if got, want := meters(), "meter=7 kbps burst stats bands= type=drop rate=20000 burst_size=2000"; got != want {
		t.Fatalf("meters: got %q, want %q", got, want)
	}
	f := Flow{Cookie: 0x0fc5040000000001, Priority: 430, Match: Match{}.InPort(3),
		Actions: Actions{Meter{7}, Load{Value: 1, Dst: Reg(1).Bit(2)}, Resubmit{0}}}
	if err := Apply(ctx, ep(target), Bundle{f}); err != nil {
		t.Fatal(err)
	}
	if got, want := dump(t, target), []string{"cookie=0xfc5040000000001, priority=430,in_port=3 actions=meter:7,load:0x1->NXM_NX_REG1[2],resubmit(,0)", "priority=0 actions=NORMAL"}; !slices.Equal(got, want) {
		t.Fatalf("flows: got %q, want %q", got, want)
	}
	got, err := Dump(ctx, ep(target), f.Cookie, ^uint64(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := Diff([]Flow{f}, got); err != nil {
		t.Fatalf("dump differs: %v", err)
	}
	if got, ok, err := DumpMeter(ctx, ep(target), 7); err != nil || !ok || got != m {
		t.Fatalf("DumpMeter: got %v, %v, %v; want %v", got, ok, err, m)
	}
	m.RateKbps = 10000
	if err := SetMeters(ctx, ep(target), m); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := DumpMeter(ctx, ep(target), 7); err != nil || !ok || got != m {
		t.Fatalf("DumpMeter after modify: got %v, %v, %v; want %v", got, ok, err, m)
	}
	if got, want := meters(), "meter=7 kbps burst stats bands= type=drop rate=10000 burst_size=2000"; got != want {
		t.Fatalf("meter after modify: got %q", got)
	}
	if got := dump(t, target); len(got) != 2 {
		t.Fatalf("flows after modify: got %q, want the flow", got)
	}
	pk := MeterBand{ID: 8, RateKbps: 50, BurstKb: 10, Pkts: true}
	if err := SetMeters(ctx, ep(target), pk); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := DumpMeter(ctx, ep(target), 8); err != nil || !ok || got != pk {
		t.Fatalf("DumpMeter (pktps): got %v, %v, %v; want %v", got, ok, err, pk)
	}
	if out := run(t, "", "ovs-ofctl", "-O", "OpenFlow14", "dump-meters", target, "meter=8"); !strings.Contains(strings.Join(strings.Fields(out), " "), "meter=8 pktps burst stats bands= type=drop rate=50 burst_size=10") {
		t.Fatalf("pktps meter: got %q", out)
	}
	if ids, err := MeterIDs(ctx, ep(target)); err != nil || !slices.Equal(ids, []uint32{7, 8}) {
		t.Fatalf("MeterIDs: got %v, %v; want [7 8]", ids, err)
	}
	if err := DeleteMeters(ctx, ep(target), 7, 8); err != nil {
		t.Fatal(err)
	}
	if ids, err := MeterIDs(ctx, ep(target)); err != nil || len(ids) != 0 {
		t.Fatalf("MeterIDs after delete: got %v, %v; want none", ids, err)
	}
	if got := meters(); got != "" {
		t.Fatalf("meters after delete: got %q, want none", got)
	}
	if got, ok, err := DumpMeter(ctx, ep(target), 7); err != nil || ok {
		t.Fatalf("DumpMeter after delete: got %v, %v, %v; want none", got, ok, err)
	}
	if got := dump(t, target); len(got) != 1 {
		t.Fatalf("flows after delete: got %q, want NORMAL only (a meter's flows go with it)", got)
	}
}
