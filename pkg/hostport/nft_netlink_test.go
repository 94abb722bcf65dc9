package hostport

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

func rule(proto flows.Protocol, node string, hostPort uint16, ctr string, ctrPort uint16) flows.Rule {
	return flows.Rule{Protocol: proto, NodeIP: netip.MustParseAddr(node), HostPort: hostPort, ContainerIP: netip.MustParseAddr(ctr), ContainerPort: ctrPort}
}

func TestNftKeyData(t *testing.T) {
	tests := []struct {
		r         flows.Rule
		key, data string // hex
	}{
		{rule(flows.TCP, "198.51.100.1", 8080, "192.0.2.10", 80),
			"c6336401" + "06000000" + "1f900000", "c000020a" + "00500000"},
		{rule(flows.SCTP, "198.51.100.1", 65535, "192.0.2.10", 1),
			"c6336401" + "84000000" + "ffff0000", "c000020a" + "00010000"},
		{rule(flows.UDP, "2001:db8:100::1", 53, "2001:db8:c::10", 5353),
			"20010db8010000000000000000000001" + "11000000" + "00350000", "20010db8000c00000000000000000010" + "14e90000"},
	}
	for _, tt := range tests {
		t.Run(tt.r.String(), func(t *testing.T) {
			if got := hex.EncodeToString(nftKey(tt.r)); got != tt.key {
				t.Errorf("key: got %s, want %s", got, tt.key)
			}
			if got := hex.EncodeToString(nftData(tt.r)); got != tt.data {
				t.Errorf("data: got %s, want %s", got, tt.data)
			}
		})
	}
}

// Root tests. Each runs in private network namespaces (nftables state is per
// netns), never in the host's.

func needRootNft(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("SKIPPED: needs root (private netns, nftables)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		tb.Skip("SKIPPED: needs the nft binary")
	}
}

// newNetNS returns a descriptor of a fresh network namespace, closed at
// cleanup (the namespace goes with its last reference).
func newNetNS(tb testing.TB) int {
	tb.Helper()
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result)
	go func() {
		// Never unlocked: the thread, now in the new netns, exits with the
		// goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{-1, fmt.Errorf("unshare: %w", err)}
			return
		}
		fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		tb.Fatalf("new netns: %v", r.err)
	}
	tb.Cleanup(func() { unix.Close(r.fd) })
	return r.fd
}

// inNetNS runs fn on a thread in netns fd, so that what it executes (nft) runs
// there too.
func inNetNS(fd int, fn func() error) error {
	errc := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked, as in newNetNS
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// nodeLocal is applyNodeLocal in netns fd, with the netlink connection
// pointed at fd explicitly.
func nodeLocal(fd int, rules []flows.Rule, remove bool) error {
	return inNetNS(fd, func() error {
		return applyNodeLocal(context.Background(), rules, remove, nftables.WithNetNSFd(fd))
	})
}

// runNft is the reference: the same declarations and elements through nft -f.
func runNft(script string) error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, out)
	}
	return nil
}

// execElements is the former hot path: the elements alone through nft -f.
func execElements(fd int, rules []flows.Rule, remove bool) error {
	return inNetNS(fd, func() error { return runNft(nftElements(rules, remove)) })
}

// coldPath declares both families' tables, as the first use on a node does
// (over netlink).
func coldPath(tb testing.TB, fd int) {
	tb.Helper()
	if err := inNetNS(fd, func() error { return RebuildNodeLocal(context.Background(), nil) }); err != nil {
		tb.Fatalf("cold path: %v", err)
	}
}

// coldPathNft declares them through nft -f, as the plugins did before.
func coldPathNft(tb testing.TB, fd int) {
	tb.Helper()
	if err := inNetNS(fd, func() error { return runNft(nftScript(nil, false, true)) }); err != nil {
		tb.Fatalf("cold path (nft): %v", err)
	}
}

// nftIn runs nft with args in netns fd and returns its output.
func nftIn(tb testing.TB, fd int, args ...string) string {
	tb.Helper()
	var out []byte
	err := inNetNS(fd, func() error {
		var err error
		out, err = exec.Command("nft", args...).CombinedOutput()
		return err
	})
	if err != nil {
		tb.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nftMaps are the maps of ours, family and name.
var nftMaps = [][2]string{{"ip", "hostports"}, {"ip", "localhost"}, {"ip6", "hostports"}}

// listing is what nft shows of both maps, text and JSON (the JSON carries the
// handles too, so it also shows that no object was declared again).
func listing(tb testing.TB, fd int) string {
	tb.Helper()
	var b strings.Builder
	for _, m := range nftMaps {
		b.WriteString(nftIn(tb, fd, "list", "map", m[0], nftTable, m[1]))
		b.WriteString(nftIn(tb, fd, "-j", "list", "map", m[0], nftTable, m[1]))
		b.WriteString("\n")
	}
	return b.String()
}

// elements returns the elements of both maps, as nft -j shows them, rendered
// like nftElements and sorted.
func elements(tb testing.TB, fd int) []string {
	tb.Helper()
	var got []string
	for _, m := range nftMaps {
		fam := m[0]
		var doc struct {
			Nftables []struct {
				Map *struct {
					Elem [][2]struct {
						Concat []any `json:"concat"`
					} `json:"elem"`
				} `json:"map"`
			} `json:"nftables"`
		}
		out := nftIn(tb, fd, "-j", "list", "map", fam, nftTable, m[1])
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			tb.Fatalf("nft -j list map %s: %v: %s", fam, err, out)
		}
		for _, o := range doc.Nftables {
			if o.Map == nil {
				continue
			}
			for _, e := range o.Map.Elem {
				k, v := e[0].Concat, e[1].Concat
				if len(k) != 3 || len(v) != 2 {
					tb.Fatalf("nft -j list map %s: element %v, want 3 key and 2 data components", fam, e)
				}
				got = append(got, fmt.Sprintf("%v . %v . %v : %v . %v", k[0], k[1], k[2], v[0], v[1]))
			}
		}
	}
	slices.Sort(got)
	return got
}

func elementsOf(rules []flows.Rule) []string {
	var want []string
	for _, r := range rules {
		want = append(want, fmt.Sprintf("%s . %s . %d : %s . %d", r.NodeIP, r.Protocol, r.HostPort, r.ContainerIP, r.ContainerPort))
	}
	slices.Sort(want)
	return want
}

var testRules = []flows.Rule{
	rule(flows.TCP, "198.51.100.1", 8080, "192.0.2.10", 80),
	rule(flows.UDP, "198.51.100.1", 53, "192.0.2.10", 5353),
	rule(flows.SCTP, "198.51.100.2", 65535, "192.0.2.11", 1),
	rule(flows.TCP, "2001:db8:100::1", 443, "2001:db8:c::10", 8443),
	rule(flows.UDP, "2001:db8:100::1", 53, "2001:db8:c::10", 5353),
	rule(flows.SCTP, "2001:db8:100::2", 1, "2001:db8:c::11", 65535),
	rule(flows.TCP, "127.0.0.1", 8080, "192.0.2.10", 80),
	rule(flows.UDP, "127.0.0.2", 53, "192.0.2.10", 5353),
}

func TestNodeLocalNetlink(t *testing.T) {
	needRootNft(t)
	kept, gone := testRules[:4], testRules[4:]

	t.Run("cold path creates the tables", func(t *testing.T) {
		ns, ref := newNetNS(t), newNetNS(t)
		coldPath(t, ns)
		coldPathNft(t, ref)
		for _, fam := range []string{"ip", "ip6"} {
			out := nftIn(t, ns, "list", "table", fam, nftTable)
			// Declared over netlink, they are what nft declares from the script.
			if want := nftIn(t, ref, "list", "table", fam, nftTable); out != want {
				t.Errorf("table %s %s over netlink:\n%s\nby nft -f:\n%s", fam, nftTable, out, want)
			}
			if got, want := nftIn(t, ns, "-j", "list", "table", fam, nftTable), nftIn(t, ref, "-j", "list", "table", fam, nftTable); got != want {
				t.Errorf("table %s %s as JSON over netlink:\n%s\nby nft -f:\n%s", fam, nftTable, got, want)
			}
			for _, want := range []string{"map hostports", "chain output", "type nat hook output priority -100", "dnat " + fam + " to " + fam + " daddr . meta l4proto . th dport map @hostports"} {
				if !strings.Contains(out, want) {
					t.Errorf("table %s %s: got\n%s\nwant it to contain %q", fam, nftTable, out, want)
				}
			}
			// The loopback host ports and their guards: IPv4 only.
			for _, want := range []string{"map localhost", "th dport map @localhost", "type nat hook postrouting priority srcnat",
				`ip saddr 127.0.0.0/8 oif != "lo" ct status dnat masquerade`, "type filter hook prerouting priority raw",
				`iif != "lo" ip daddr 127.0.0.0/8 drop`, `iif != "lo" ip saddr 127.0.0.0/8 drop`,
				"type filter hook postrouting priority 300", `oif != "lo" ip saddr 127.0.0.0/8 drop`} {
				if strings.Contains(out, want) != (fam == "ip") {
					t.Errorf("table %s %s: got\n%s\nwant %q in table ip only", fam, nftTable, out, want)
				}
			}
		}
	})

	// The netlink path (ns) and the former exec path (ref) are run on the same
	// steps, each in its own fresh netns; nft must show the same maps after
	// every step.
	ns, ref := newNetNS(t), newNetNS(t)
	coldPath(t, ns)
	coldPathNft(t, ref)
	empty := listing(t, ns)
	steps := []struct {
		name   string
		rules  []flows.Rule
		remove bool
		want   []flows.Rule // the elements after the step
	}{
		{"add v4 and v6", testRules, false, testRules},
		{"add again", testRules, false, testRules},
		{"remove", gone, true, kept},
		{"remove already gone", gone, true, kept},
		{"remove the rest", kept, true, nil},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := nodeLocal(ns, s.rules, s.remove); err != nil {
				t.Fatalf("netlink: %v", err)
			}
			if err := execElements(ref, s.rules, s.remove); err != nil {
				t.Fatalf("nft exec: %v", err)
			}
			if got, want := listing(t, ns), listing(t, ref); got != want {
				t.Errorf("got\n%s\nwant (nft exec)\n%s", got, want)
			}
			if got, want := elements(t, ns), elementsOf(s.want); !slices.Equal(got, want) {
				t.Errorf("elements: got %q, want %q", got, want)
			}
		})
	}
	if got := listing(t, ns); got != empty {
		t.Errorf("after removing everything: got\n%s\nwant\n%s", got, empty)
	}
	if got := elements(t, ns); len(got) != 0 {
		t.Errorf("after removing everything: got %q, want no elements", got)
	}

	t.Run("missing table: declared in the batch", func(t *testing.T) {
		ns, ref := newNetNS(t), newNetNS(t)
		if err := sendElements(testRules, false, false, false, nftables.WithNetNSFd(ns)); !errors.Is(err, unix.ENOENT) {
			t.Fatalf("netlink batch without the tables: got %v, want ENOENT", err)
		}
		if err := nodeLocal(ns, testRules, false); err != nil {
			t.Fatalf("got %v, want the fallback to succeed", err)
		}
		coldPathNft(t, ref)
		if err := execElements(ref, testRules, false); err != nil {
			t.Fatal(err)
		}
		if got, want := listing(t, ns), listing(t, ref); got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
		// One family missing fails the whole batch; the retry declares it.
		nftIn(t, ns, "delete", "table", "ip6", nftTable)
		if err := nodeLocal(ns, gone, true); err != nil {
			t.Fatalf("got %v, want the fallback to succeed", err)
		}
		if err := execElements(ref, gone, true); err != nil {
			t.Fatal(err)
		}
		if got, want := nftIn(t, ns, "list", "map", "ip", nftTable, "hostports"), nftIn(t, ref, "list", "map", "ip", nftTable, "hostports"); got != want {
			t.Errorf("ip map: got\n%s\nwant\n%s", got, want)
		}
		if got := nftIn(t, ns, "list", "map", "ip6", nftTable, "hostports"); strings.Contains(got, "elements") {
			t.Errorf("ip6 map after the fallback: got\n%s\nwant no elements", got)
		}
		if got := nftIn(t, ns, "list", "chain", "ip6", nftTable, "output"); !strings.Contains(got, "map @hostports") {
			t.Errorf("ip6 chain after the fallback: got\n%s\nwant the dnat rule", got)
		}
	})

	t.Run("no nft on the node: served all the same", func(t *testing.T) {
		ns := newNetNS(t)
		path := os.Getenv("PATH")
		t.Setenv("PATH", t.TempDir())
		if err := nodeLocal(ns, testRules, false); err != nil {
			t.Fatalf("without nft in PATH: %v", err)
		}
		t.Setenv("PATH", path)
		if got, want := elements(t, ns), elementsOf(testRules); !slices.Equal(got, want) {
			t.Errorf("elements: got %q, want %q", got, want)
		}
	})

	t.Run("foreign element survives", func(t *testing.T) {
		ns := newNetNS(t)
		coldPath(t, ns)
		nftIn(t, ns, "add", "element", "ip", nftTable, "hostports", "{ 203.0.113.9 . tcp . 9999 : 192.0.2.99 . 99 }")
		nftIn(t, ns, "add", "element", "ip6", nftTable, "hostports", "{ 2001:db8:ffff::9 . udp . 9999 : 2001:db8:c::99 . 99 }")
		before := listing(t, ns)
		if err := nodeLocal(ns, testRules, false); err != nil {
			t.Fatal(err)
		}
		if err := nodeLocal(ns, testRules, true); err != nil {
			t.Fatal(err)
		}
		if got := listing(t, ns); got != before {
			t.Errorf("got\n%s\nwant\n%s", got, before)
		}
	})

	t.Run("other errors are returned", func(t *testing.T) {
		ns := newNetNS(t)
		coldPath(t, ns)
		taken := testRules[0]
		if err := nodeLocal(ns, []flows.Rule{taken}, false); err != nil {
			t.Fatal(err)
		}
		// The same key with other data: the kernel refuses (EEXIST, or EBUSY
		// before Linux 6.x), as it does for nft.
		other := taken
		other.ContainerPort++
		err := nodeLocal(ns, []flows.Rule{other}, false)
		if !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EBUSY) || !strings.HasPrefix(err.Error(), "nft (node-local host ports): ") {
			t.Errorf("got %v, want EEXIST or EBUSY wrapped as nft (node-local host ports): ...", err)
		}
		if got, want := elements(t, ns), elementsOf([]flows.Rule{taken}); !slices.Equal(got, want) {
			t.Errorf("elements: got %q, want %q", got, want)
		}
		if eerr := execElements(ns, []flows.Rule{other}, false); eerr == nil {
			t.Errorf("nft exec: got success, want an error like %v", err)
		}
	})
}

// BenchmarkNodeLocal compares one ADD and one DEL of the node-local elements
// (two rules, IPv4 and IPv6) through netlink with the former nft exec, in a
// private netns. Each iteration times one call and undoes it untimed, so that
// every add adds and every remove removes. cpu-ns/op counts the CPU of this
// process and of its children (nft) during the timed call.
//
// A transaction that deletes an element waits in the kernel for an RCU grace
// period (milliseconds, and idle), with either path; the remove figures are
// dominated by it.
//
//	go test -run '^$' -bench NodeLocal -benchtime 300x ./pkg/hostport/   # as root
func BenchmarkNodeLocal(b *testing.B) {
	needRootNft(b)
	rules := []flows.Rule{testRules[0], testRules[3]}
	paths := []struct {
		name  string
		apply func(remove bool) error
	}{
		// The plugin's path: the current netns, no WithNetNSFd.
		{"netlink", func(remove bool) error { return applyNodeLocal(context.Background(), rules, remove) }},
		{"nft-exec", func(remove bool) error { return runNft(nftElements(rules, remove)) }},
	}
	for _, p := range paths {
		for _, remove := range []bool{false, true} {
			name := p.name + "/add"
			if remove {
				name = p.name + "/remove"
			}
			b.Run(name, func(b *testing.B) {
				ns := newNetNS(b)
				coldPath(b, ns)
				err := inNetNS(ns, func() error {
					var cpu int64
					b.ResetTimer()
					for range b.N {
						b.StopTimer()
						if remove {
							if err := p.apply(false); err != nil {
								return err
							}
						}
						c0 := cpuTime()
						b.StartTimer()
						if err := p.apply(remove); err != nil {
							return err
						}
						b.StopTimer()
						cpu += cpuTime() - c0
						if !remove {
							if err := p.apply(true); err != nil {
								return err
							}
						}
						b.StartTimer()
					}
					b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				if got := elements(b, ns); len(got) != 0 {
					b.Errorf("after the benchmark: got %q, want no elements", got)
				}
			})
		}
	}
}

// cpuTime is the user and system time of this process and its waited-for
// children, in nanoseconds.
func cpuTime() int64 {
	var self, children unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &children)
	return self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano()
}
