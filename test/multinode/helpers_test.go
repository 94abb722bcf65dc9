package multinode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

const (
	// commandTimeout bounds one command in a node, so that a hung docker
	// exec fails its test instead of the run.
	commandTimeout = 3 * time.Minute
	// connectTimeout bounds one connection and its answer (the bash
	// clients' `timeout 5`).
	connectTimeout = 5 * time.Second
	// bootTimeout: a node's boot (OVS, node prep, containerd and its
	// images, install-cni, reconcile) on a loaded machine.
	bootTimeout = 3 * time.Minute
	// tombstoneTimeout: flows.TombstoneTimeout (the flows' hard timeout),
	// plus the time ovs-vswitchd takes to expire them.
	tombstoneTimeout = (flows.TombstoneTimeout + 5) * time.Second
)

// ---- commands ---------------------------------------------------------------

// run runs a command in a node (hack/ovs-in-docker.sh exec NODE CMD...) and
// returns its standard output; its standard error is in the error.
func run(nodeName string, args ...string) (string, error) {
	return runIn(nodeName, nil, args...)
}

// runIn is run with stdin as the command's standard input.
func runIn(nodeName string, stdin *strings.Reader, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, harness, append([]string{"exec", nodeName}, args...)...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("on %s: %s: %w: %s", nodeName, strings.Join(args, " "),
			err, strings.TrimSpace(stdout.String()+"\n"+stderr.String()))
	}
	return stdout.String(), nil
}

// docker runs the Docker CLI against the harness's engine.
func docker(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// container is the Docker container of a node.
func container(nodeName string) string { return prefix + "-" + nodeName }

// lines splits output into its non-empty lines.
func lines(out string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			ls = append(ls, l)
		}
	}
	return ls
}

// waitBooted waits until node-init.sh has booted the node again (it marks
// /run/oid/ready, on a /run that each start of the container empties).
func waitBooted(t *testing.T, nodeName string) {
	t.Helper()
	framework.Eventually(t, bootTimeout, nodeName+" booted (node-init.sh ready)", func() error {
		_, err := run(nodeName, "test", "-f", "/run/oid/ready")
		return err
	})
}

// ---- pods -------------------------------------------------------------------

// pod is a pod of the test app ("hello from NAME to PEER" on TCP 80),
// started through a node's CRI.
type pod struct {
	Name, Node string
	IPv4, IPv6 netip.Addr
	NetNS      string // its network namespace, a path on its node
}

// addr is the pod's address of the family of dst.
func (p pod) addr(dst netip.Addr) netip.Addr {
	if dst.Is6() {
		return p.IPv6
	}
	return p.IPv4
}

// podSpec is a pod to start: its node, its name, its host ports
// ("HOSTPORT:PORT").
type podSpec struct {
	Node, Name string
	HostPorts  []string
}

// runPods starts pods (oid-pod run: crictl runp, so containerd calls CNI
// ADD; then the app's container) and waits until each app listens; the
// pods of one node one after the other, the nodes at once. It returns the
// pods in the order of specs.
func runPods(t *testing.T, specs ...podSpec) []pod {
	t.Helper()
	pods := make([]pod, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, s := range specs {
				if s.Node != n.Name {
					continue
				}
				if pods[i], errs[i] = startPod(s.Node, s.Name, s.HostPorts...); errs[i] != nil {
					return
				}
				errs[i] = framework.Wait(time.Minute, func() error { return listening(pods[i]) })
				if errs[i] != nil {
					errs[i] = fmt.Errorf("pod %s on %s: its app listening on TCP 80: %w", s.Name, s.Node, errs[i])
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return pods
}

// listening: crictl start returns before the app listens, and the callers'
// first connection must meet a listening app, since a refused first
// connection is what they look for.
func listening(p pod) error {
	out, err := run(p.Node, "nsenter", "--net="+p.NetNS, "ss", "-Hltn", "sport = :80")
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) == "" {
		return errors.New("nothing listens")
	}
	return nil
}

// runPod is runPods of one pod.
func runPod(t *testing.T, nodeName, name string, hostPorts ...string) pod {
	t.Helper()
	return runPods(t, podSpec{nodeName, name, hostPorts})[0]
}

// startPod is oid-pod run, its output parsed: "ID IPV4 IPV6 NETNS".
func startPod(nodeName, name string, hostPorts ...string) (pod, error) {
	out, err := run(nodeName, append([]string{"oid-pod", "run", name}, hostPorts...)...)
	if err != nil {
		return pod{}, fmt.Errorf("pod %s on %s: %w", name, nodeName, err)
	}
	ls := lines(out)
	var f []string
	if len(ls) > 0 {
		f = strings.Fields(ls[len(ls)-1])
	}
	if len(f) != 4 {
		return pod{}, fmt.Errorf("pod %s on %s: oid-pod run printed %q, want ID IPV4 IPV6 NETNS", name, nodeName, out)
	}
	p := pod{Name: name, Node: nodeName, NetNS: f[3]}
	if p.IPv4, err = parseAddr(f[1], false); err != nil {
		return p, fmt.Errorf("pod %s on %s: IPv4: %w", name, nodeName, err)
	}
	if p.IPv6, err = parseAddr(f[2], true); err != nil {
		return p, fmt.Errorf("pod %s on %s: IPv6: %w", name, nodeName, err)
	}
	return p, nil
}

// leaveNodesClean makes the test end (whatever its outcome) with every pod
// of every node removed (oid-pod rm --all: CNI DEL of each) and checks that
// nothing of the plugins is left on any node (clean).
func leaveNodesClean(t *testing.T) {
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := run(n.Name, "oid-pod", "rm", "--all"); err != nil {
					t.Errorf("removing every pod of %s: %v", n.Name, err)
					return
				}
				if err := clean(n.Name); err != nil {
					t.Errorf("after every pod was removed: %v", err)
				}
			}()
		}
		wg.Wait()
	})
}

// ---- calls --------------------------------------------------------------------

// client is where a TCP connection comes from.
type client interface {
	fmt.Stringer
	// hello connects to dst:port and returns the first line of the
	// answer, and the client's own address, which the server must see.
	hello(dst netip.AddrPort) (answer string, self netip.Addr, err error)
}

// fromHost: this host, the test's own process (the Docker host, on the
// nodes' Docker network).
type fromHost struct{}

func (fromHost) String() string { return "the Docker host" }

func (fromHost) hello(dst netip.AddrPort) (string, netip.Addr, error) {
	c, err := net.DialTimeout("tcp", dst.String(), connectTimeout)
	if err != nil {
		return "", netip.Addr{}, err
	}
	defer c.Close()
	self := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	if err := c.SetDeadline(time.Now().Add(connectTimeout)); err != nil {
		return "", self, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return "", self, fmt.Errorf("reading the answer: %w", err)
	}
	return strings.TrimSpace(line), self, nil
}

// fromNode: a node's own network namespace.
type fromNode node

func (n fromNode) String() string { return n.Name + "'s own netns" }

func (n fromNode) hello(dst netip.AddrPort) (string, netip.Addr, error) {
	out, err := run(n.Name, "timeout", fmt.Sprint(connectTimeout.Seconds()), "bash", "-c", helloScript(dst))
	return strings.TrimSpace(out), node(n).addr(dst.Addr()), err
}

// fromPod: a pod's network namespace, entered on its node (with the
// node's bash: the app image has none).
type fromPod pod

func (p fromPod) String() string { return "pod " + p.Name + " on " + p.Node }

func (p fromPod) hello(dst netip.AddrPort) (string, netip.Addr, error) {
	out, err := run(p.Node, "timeout", fmt.Sprint(connectTimeout.Seconds()), "nsenter", "--net="+p.NetNS, "bash", "-c", helloScript(dst))
	return strings.TrimSpace(out), pod(p).addr(dst.Addr()), err
}

func helloScript(dst netip.AddrPort) string {
	return fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && head -1 <&3", dst.Addr(), dst.Port())
}

// call is one connection and the answer it must get.
type call struct {
	Name   string // what it proves, a subtest's name
	From   client
	To     netip.Addr
	Port   uint16
	Server string // the pod that must answer
	// Peer: the answer names the client's own address (the server sees
	// the client, not a translation of it); false where any address will
	// do (hairpin, a node to itself).
	Peer bool
}

func (c call) String() string {
	return fmt.Sprintf("%v -> %v", c.From, netip.AddrPortFrom(c.To, c.Port))
}

// check makes the call once.
func (c call) check() error {
	ans, self, err := c.From.hello(netip.AddrPortFrom(c.To, c.Port))
	want := "hello from " + c.Server + " to "
	if c.Peer { // "ADDR:" or "[ADDR]:", then the client's port
		if self.Is6() {
			want += "[" + self.String() + "]:"
		} else {
			want += self.String() + ":"
		}
	}
	if err != nil {
		return fmt.Errorf("%v: got %q, want %q...: %w", c, ans, want, err)
	}
	if !strings.HasPrefix(ans, want) {
		return fmt.Errorf("%v: got %q, want %q...", c, ans, want)
	}
	return nil
}

// checkCalls runs each call as a subtest, once (a connection that does
// not answer right the first time is a failure).
func checkCalls(t *testing.T, calls []call) {
	t.Helper()
	for _, c := range calls {
		t.Run(c.Name, func(t *testing.T) {
			if err := c.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

// allAnswer makes every call, and returns the first failure.
func allAnswer(calls []call) error {
	for _, c := range calls {
		if err := c.check(); err != nil {
			return err
		}
	}
	return nil
}

// ---- state --------------------------------------------------------------------

// cniState is what a CNI ADD or DEL on a node changes: its OVS interfaces
// and host-local's allocation files (names and modification times).
func cniState(t *testing.T, nodeName string) string {
	t.Helper()
	out, err := run(nodeName, "bash", "-c", `set -eo pipefail
ovs-vsctl --bare --columns=_uuid,name,external_ids list Interface | sort
ls -l --time-style=+%s.%N /var/lib/cni/networks/ovsflow | { grep -v last_reserved_ip || true; }`)
	if err != nil {
		t.Fatalf("the CNI state of %s: %v", nodeName, err)
	}
	return out
}

// clean checks that nothing of the plugins is left on a node: no port but
// the uplink on br0, no port of ours anywhere, no veth but the uplink, no
// flow of an attachment, no nft host port element, no IP allocation, no
// pod sandbox. A listing that fails is a failure. The tombstones of deleted
// ports go by their hard timeout: it waits for that, so that a clean node
// proves they do go.
func clean(nodeName string) error {
	var l listings
	var err error
	framework.Until(tombstoneTimeout, func() bool {
		if l, err = list(nodeName); err != nil {
			return true
		}
		// Done when no attachment flow is left, or one that is no tombstone.
		left, tombstones := l.attachmentFlows()
		return len(left) == 0 || len(left) > tombstones
	})
	if err != nil {
		return fmt.Errorf("%s: %w", nodeName, err)
	}
	var errs []error
	fail := func(format string, a ...any) { errs = append(errs, fmt.Errorf(nodeName+": "+format, a...)) }
	for what, msg := range l.failed {
		fail("listing %s: %s", what, msg)
	}
	if x := without(l.of["ports"], func(s string) bool { return s == "eth0" }); len(x) > 0 {
		fail("ports left on br0: %v", x)
	}
	if x := l.of["ours"]; len(x) > 0 {
		fail("ports of ours (external_ids:ovsflow.io/owner) left: %v", x)
	}
	// eth0: the uplink, Docker's veth.
	if x := without(l.of["veths"], func(s string) bool { return strings.Contains(s, ": eth0@") }); len(x) > 0 {
		fail("veths left: %v", x)
	}
	if x, _ := l.attachmentFlows(); len(x) > 0 {
		fail("flows of ours left: %v", x)
	}
	for _, fam := range []string{"ip", "ip6"} {
		if m := strings.Join(l.of["nft-"+fam], "\n"); strings.Contains(m, "elements") {
			fail("nft %s host port elements left: %s", fam, m)
		}
	}
	if x := without(l.of["allocations"], func(s string) bool { return strings.HasPrefix(s, "last_reserved_ip") || s == "lock" }); len(x) > 0 {
		fail("IP allocations left: %v", x)
	}
	if x := l.of["sandboxes"]; len(x) > 0 {
		fail("pod sandboxes left: %v", x)
	}
	return errors.Join(errs...)
}

// listScript prints each listing of clean after a "== NAME" line, or a
// "!! ERROR" line when it fails. No nft table (never a host port on the
// node) is no element either.
var listScript = fmt.Sprintf(`section() {
	echo "== $1"; shift
	out=$("$@" 2>&1) || { echo "!! $(echo $out)"; return; }
	[ -z "$out" ] || echo "$out"
}
section ports ovs-vsctl list-ports br0
section ours ovs-vsctl --bare --columns=name find Port external_ids:ovsflow.io/owner=ovsflow-cni
section veths ip -o link show type veth
section flows ovs-ofctl dump-flows br0 cookie=%v/%#x
for fam in ip ip6; do
	nft list table $fam ovsflow_hostport >/dev/null 2>&1 || continue
	section nft-$fam nft list map $fam ovsflow_hostport hostports
done
section allocations sh -c '[ ! -d /var/lib/cni/networks/ovsflow ] || ls /var/lib/cni/networks/ovsflow'
section sandboxes crictl pods -q
`, flows.CookieSuite, uint64(flows.SuiteMask))

// listings is listScript's output: each listing's lines, and the
// listings that failed with their errors.
type listings struct {
	of     map[string][]string
	failed map[string]string
}

func list(nodeName string) (listings, error) {
	out, err := run(nodeName, "bash", "-c", listScript)
	if err != nil {
		return listings{}, err
	}
	l := listings{of: map[string][]string{}, failed: map[string]string{}}
	var cur string
	for _, s := range lines(out) {
		switch {
		case strings.HasPrefix(s, "== "):
			cur = strings.TrimPrefix(s, "== ")
		case strings.HasPrefix(s, "!! "):
			l.failed[cur] = strings.TrimPrefix(s, "!! ")
		default:
			l.of[cur] = append(l.of[cur], s)
		}
	}
	return l, nil
}

var cookieRE = regexp.MustCompile(`cookie=(0x[0-9a-f]+)`)

// attachmentFlows returns br0's flows of any attachment (host ports, port
// security, bandwidth, tombstones) and how many of them are tombstones; the
// bridge's shared flows (CookieKindShared) stay, as the nft tables do.
func (l listings) attachmentFlows() (left []string, tombstones int) {
	for _, s := range l.of["flows"] {
		m := cookieRE.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		v, err := strconv.ParseUint(m[1], 0, 64)
		if err != nil {
			left = append(left, strings.TrimSpace(s)) // unreadable: shown
			continue
		}
		switch flows.Cookie(v).Kind() {
		case flows.CookieKindShared:
			continue
		case flows.CookieKindTombstone:
			tombstones++
		}
		left = append(left, strings.TrimSpace(s))
	}
	return left, tombstones
}

func without(ls []string, drop func(string) bool) []string {
	var kept []string
	for _, s := range ls {
		if !drop(s) {
			kept = append(kept, s)
		}
	}
	return kept
}
