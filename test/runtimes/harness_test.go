package runtimes

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// Shared with the other suites (test/framework).
var allocations = framework.Allocations

// The node of docs/design.md ("The node", framework.WireOVSHost): node
// addresses on the bridge's internal interface, an uplink port wired to an
// "outside" netns, containers attached by ovs-bridge with their gateways on
// the internal interface too.
const (
	nodeV4    = framework.NodeV4
	nodeV6    = framework.NodeV6
	outsideV4 = framework.OutsideV4
	outsideV6 = framework.OutsideV6
)

// The host ports every suite publishes: TCP 8080 -> 80 and UDP 5353 -> 53.
const (
	hostPortTCP = 8080
	hostPortUDP = 5353
	ctrPortTCP  = 80
	ctrPortUDP  = 53
)

// suiteDir is a scratch directory of one suite under the package's work dir
// (removed by TestMain), kept readable for the runtimes (a t.TempDir is 0700
// and goes away before a late cleanup could read it).
func suiteDir(t *testing.T, name string) string {
	t.Helper()
	d, err := os.MkdirTemp(workDir, name+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// cgroupParent is the cgroup a suite puts its containers under, named after
// the work dir so that sweep finds it: "/ovsflow-rt-XXXX-<suite>".
func cgroupParent(suite string) string { return "/" + filepath.Base(workDir) + "-" + suite }

// netNS is a network namespace made by a test: a container for cnitool and
// Mesos, or the outside.
type netNS struct {
	ns   ns.NetNS
	name string // under /run/netns
}

func newNetNS(t *testing.T) *netNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	recordNetNS(n.Path())
	t.Cleanup(func() {
		n.Close()
		_ = testutils.UnmountNS(n)
	})
	return &netNS{ns: n, name: filepath.Base(n.Path())}
}

// netnsRecord lists, in the work dir, the netns files the suites made under
// /run/netns, so that TestMain's outer process can remove what a crashed
// inner process left there (their mounts die with the inner mount
// namespace; the files stay, and are nobody else's).
const netnsRecord = "netns-files"

func recordNetNS(p string) {
	f, err := os.OpenFile(filepath.Join(workDir, netnsRecord), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintln(f, p)
		f.Close()
	}
}

// removeRecordedNetNS removes the recorded netns files that are still there.
func removeRecordedNetNS(work string) {
	b, _ := os.ReadFile(filepath.Join(work, netnsRecord))
	for _, p := range strings.Fields(string(b)) {
		if strings.HasPrefix(p, "/run/netns/") || strings.HasPrefix(p, "/var/run/netns/") {
			unmountRemove(p)
		}
	}
}

func (n *netNS) path() string { return n.ns.Path() }

func (n *netNS) exec(t *testing.T, args ...string) string {
	t.Helper()
	return framework.MustRun(t, "ip", append([]string{"netns", "exec", n.name}, args...)...)
}

// serve answers on TCP port tcp and UDP port udp inside the netns, as rt-echo
// does in the runtimes' containers: "hello from TAG to PEER".
func (n *netNS) serve(t *testing.T, tag string, tcp, udp int) {
	t.Helper()
	var l net.Listener
	var pc net.PacketConn
	err := n.ns.Do(func(ns.NetNS) error {
		var err error
		if l, err = net.Listen("tcp", fmt.Sprintf(":%d", tcp)); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", udp))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); pc.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "hello from %s to %s\n", tag, c.RemoteAddr())
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			_, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(fmt.Sprintf("hello from %s to %s\n", tag, addr)), addr)
		}
	}()
}

// dial connects from inside netns path (the node when ""), sends a datagram
// for UDP, and returns the first line the server said.
func dial(nsPath, network, addr string) (string, error) {
	var out string
	do := func(ns.NetNS) error {
		c, err := net.DialTimeout(network, addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if strings.HasPrefix(network, "udp") {
			if _, err := c.Write([]byte("ping")); err != nil {
				return err
			}
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		out = strings.TrimSpace(line)
		if err == io.EOF && out != "" {
			err = nil
		}
		return err
	}
	if nsPath == "" {
		return out, do(nil)
	}
	return out, ns.WithNetNSPath(nsPath, do)
}

// expect dials until the container tagged tag answers (a runtime's container
// may still be starting its server), and checks the client address it saw
// when src is set.
func expect(t *testing.T, fromNS, network, addr, tag, src string) {
	t.Helper()
	var got string
	var err error
	if !framework.Until(15*time.Second, func() bool {
		got, err = dial(fromNS, network, addr)
		return err == nil && strings.HasPrefix(got, "hello from "+tag+" ")
	}) {
		t.Errorf("%s %s from %s: got %q, %v; want an answer from %s", network, addr, nsLabel(fromNS), got, err, tag)
		return
	}
	if src != "" {
		if host, _, _ := net.SplitHostPort(strings.TrimPrefix(got, "hello from "+tag+" to ")); host != src {
			t.Errorf("%s %s from %s: %s saw client %q (%q), want %s", network, addr, nsLabel(fromNS), tag, host, got, src)
		}
	}
	t.Logf("%s %s from %s: %q", network, addr, nsLabel(fromNS), got)
}

// expectNoAnswer checks that addr does not answer (a host port after DEL).
func expectNoAnswer(t *testing.T, fromNS, network, addr string) {
	t.Helper()
	if got, err := dial(fromNS, network, addr); err == nil {
		t.Errorf("%s %s from %s: answered %q after teardown, want nothing", network, addr, nsLabel(fromNS), got)
	}
}

func nsLabel(p string) string {
	if p == "" {
		return "the node"
	}
	return filepath.Base(p)
}

// node is the sandbox netns set up as an OVS host for one suite: a netdev
// bridge with the node addresses, prepared as deploy/node-prep.sh prepares
// a node's, and the outside netns on an uplink port.
type node struct {
	bridge    string
	outside   *netNS
	nftBefore string
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{bridge: framework.NewBridge(t, "rtbr"), nftBefore: nftRuleset(t)}
	n.outside = newNetNS(t)
	t.Cleanup(func() { framework.LogOnFailure(t, n.bridge) })
	framework.WireOVSHost(t, n.bridge, n.outside.name, "rtupl")
	framework.PrepareBridge(t, n.bridge) // as an operator prepares a node
	return n
}

func (n *node) ofTarget() string { return framework.OFTarget(ovsdbAddr, n.bridge) }

// ourFlows dumps the flows carrying the suite tag; attachment flows are
// those whose cookie kind is CookieKindAttachment.
func (n *node) ourFlows(t *testing.T) (attachment, shared []string) {
	t.Helper()
	out := framework.MustRun(t, "ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows", n.ofTarget(), flows.SuiteDelete().String())
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		_, rest, ok := strings.Cut(l, "cookie=0x")
		if !ok {
			continue
		}
		hex, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			t.Fatalf("flow %q: cookie: %v", l, err)
		}
		if flows.Cookie(c).Kind() == flows.CookieKindAttachment {
			attachment = append(attachment, l)
		} else {
			shared = append(shared, l)
		}
	}
	return attachment, shared
}

// flowsOf lists the flows of one attachment.
func (n *node) flowsOf(t *testing.T, containerID, ifname string) []string {
	t.Helper()
	out := framework.MustRun(t, "ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows", n.ofTarget(),
		flows.AttachmentCookie(containerID, ifname).Delete().String())
	var fl []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "cookie=") {
			fl = append(fl, strings.TrimSpace(l))
		}
	}
	return fl
}

func nftRuleset(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		return ""
	}
	return strings.TrimSpace(framework.MustRun(t, "nft", "list", "ruleset"))
}

// nftTables splits a ruleset into its top-level table blocks, by header
// ("table ip ovsflow_hostport").
func nftTables(ruleset string) map[string]string {
	tables := map[string]string{}
	var name string
	var block []string
	for _, l := range strings.Split(ruleset, "\n") {
		switch {
		case name == "" && strings.HasPrefix(l, "table "):
			name, block = strings.TrimSuffix(strings.TrimSpace(l), " {"), []string{l}
		case name != "":
			block = append(block, l)
			if l == "}" {
				tables[name] = strings.Join(block, "\n")
				name = ""
			}
		}
	}
	return tables
}

// nftHostportTable is where the plugins keep node-local host ports: one map
// per family, whose elements belong to attachments (the table, its chain
// and the empty map are shared, like the shared flows).
const nftHostportTable = "ovsflow_hostport"

// assertNFTClean checks that the ruleset differs from before only by the
// plugins' own tables, and that their maps hold no element.
func assertNFTClean(t *testing.T, before string) {
	t.Helper()
	after := nftTables(nftRuleset(t))
	was := nftTables(before)
	for name, block := range after {
		if strings.HasSuffix(name, " "+nftHostportTable) {
			if strings.Contains(block, "elements =") {
				t.Errorf("nft: node-local host ports left:\n%s", block)
			}
			continue
		}
		if was[name] != block {
			t.Errorf("nft: table changed:\n%s\nwas:\n%s", block, was[name])
		}
	}
	for name := range was {
		if _, ok := after[name]; !ok {
			t.Errorf("nft: %s is gone", name)
		}
	}
}

// assertClean checks that nothing of ours is left on the node: no port with
// our owner tag, no attachment flow, no ovf* veth, no host-local allocation
// of network in dataDir, no nft rule or map element.
func (n *node) assertClean(t *testing.T, dataDir, network string) {
	t.Helper()
	if p := framework.OurPorts(t); len(p) > 0 {
		t.Errorf("ports of ours left in OVSDB: %q", p)
	}
	att, shared := n.ourFlows(t)
	if len(att) > 0 {
		t.Errorf("attachment flows left on %s:\n%s", n.bridge, strings.Join(att, "\n"))
	}
	if len(shared) > 0 {
		t.Logf("shared flows (per bridge, not per attachment) on %s: %d", n.bridge, len(shared))
	}
	// A veth left to its netns ("leaveVethToNetns") goes once the runtime
	// has deleted the netns, as the kernel's cleanup of it runs.
	var v []string
	if !framework.Until(10*time.Second, func() bool { v = framework.OurVeths(t); return len(v) == 0 }) {
		t.Errorf("host veths left: %q", v)
	}
	if a := allocations(t, dataDir, network); len(a) > 0 {
		t.Errorf("host-local allocations left in %s: %q", filepath.Join(dataDir, network), a)
	}
	assertNFTClean(t, n.nftBefore)
}

// assertAttached checks the state of one live attachment.
func (n *node) assertAttached(t *testing.T, containerID, ifname string, wantFlows bool) {
	t.Helper()
	veth := link.HostVethName(containerID, ifname)
	if !link.Exists(veth) {
		t.Errorf("attachment %s/%s: host veth %s missing", containerID, ifname, veth)
	}
	owner := framework.Vsctl(t, "--no-headings", "-f", "csv", "--columns=name", "find", "Port",
		"external_ids:ovsflow.io/container-id="+containerID, "external_ids:ovsflow.io/ifname="+ifname,
		"external_ids:ovsflow.io/owner=ovsflow-cni")
	if owner != veth {
		t.Errorf("attachment %s/%s: ports by external_ids: got %q, want %s", containerID, ifname, owner, veth)
	}
	if fl := n.flowsOf(t, containerID, ifname); wantFlows && len(fl) == 0 {
		t.Errorf("attachment %s/%s: no flows under cookie %s", containerID, ifname, flows.AttachmentCookie(containerID, ifname))
	} else if !wantFlows && len(fl) > 0 {
		t.Errorf("attachment %s/%s: flows without host ports: %q", containerID, ifname, fl)
	}
}

// assertDetached checks that one attachment left nothing behind.
func (n *node) assertDetached(t *testing.T, containerID, ifname string) {
	t.Helper()
	if veth := link.HostVethName(containerID, ifname); !framework.Until(10*time.Second, func() bool { return !link.Exists(veth) }) {
		t.Errorf("attachment %s/%s: host veth %s left", containerID, ifname, veth)
	}
	if p := framework.Vsctl(t, "--no-headings", "-f", "csv", "--columns=name", "find", "Port",
		"external_ids:ovsflow.io/container-id="+containerID, "external_ids:ovsflow.io/ifname="+ifname); p != "" {
		t.Errorf("attachment %s/%s: port left: %q", containerID, ifname, p)
	}
	if fl := n.flowsOf(t, containerID, ifname); len(fl) > 0 {
		t.Errorf("attachment %s/%s: flows left:\n%s", containerID, ifname, strings.Join(fl, "\n"))
	}
}

// example reads examples/NAME and points it at this node: the sandbox's OVSDB,
// the suite's bridge, a private IPAM dataDir and, on every ovs-* plugin, a
// logFile. Nothing else of the example changes.
func example(t *testing.T, name string, n *node, dataDir, logFile string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatalf("examples/%s: %v", name, err)
	}
	patch := func(p map[string]any) {
		typ, _ := p["type"].(string)
		if !strings.HasPrefix(typ, "ovs-") {
			return
		}
		p["ovsdb"] = ovsdbAddr
		p["logFile"] = logFile
		if _, ok := p["bridge"]; ok {
			p["bridge"] = n.bridge
		}
		if ipam, ok := p["ipam"].(map[string]any); ok {
			ipam["dataDir"] = dataDir
		}
	}
	if plugins, ok := conf["plugins"].([]any); ok {
		for _, p := range plugins {
			patch(p.(map[string]any))
		}
	} else {
		patch(conf)
	}
	return conf
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// assertLogFile checks the plugins' logFile: one line per command, naming
// the command and the container ID.
func assertLogFile(t *testing.T, logFile string, want map[string]int, containerID string) {
	t.Helper()
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Errorf("logFile: %v", err)
		return
	}
	got := map[string]int{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, containerID) {
			continue
		}
		for cmd := range want {
			if strings.Contains(l, cmd) {
				got[cmd]++
			}
		}
	}
	for cmd, n := range want {
		if got[cmd] < n {
			t.Errorf("logFile %s: %d lines with %s and %s, want at least %d:\n%s", logFile, got[cmd], cmd, containerID, n, b)
		}
	}
}

// proc is a daemon or long-running command started by a suite.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// start runs a long-lived command with its output in logPath and stops it
// (SIGTERM, then SIGKILL) at cleanup.
func start(t *testing.T, logPath string, env []string, name string, args ...string) *proc {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatal(err)
	}
	p := &proc{name: filepath.Base(name), cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log (last lines):\n%s", p.name, lastLines(string(b), 40))
		}
	})
	return p
}

func (p *proc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Logf("%s (pid %d) ignored SIGTERM for 10 s: killing it", p.name, p.cmd.Process.Pid)
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// sweep removes what a suite may have left, even after a crash: processes
// whose command line names the work dir (daemons, shims, conmon) or that sit
// in the suites' cgroups (container processes), those cgroups, and mounts
// under the work dir in this mount namespace.
func sweep(work string) {
	if work == "" {
		return
	}
	self, parent := os.Getpid(), os.Getppid()
	for _, pid := range pidsWithArg(work) {
		if pid != self && pid != parent {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	groups := suiteCgroups(work)
	for _, g := range groups {
		for _, pid := range cgroupPIDs(g) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	for _, g := range groups { // deepest first
		framework.Until(5*time.Second, func() bool { // until its killed processes are gone
			err := syscall.Rmdir(g)
			return err == nil || errors.Is(err, syscall.ENOENT)
		})
	}
	unmountUnder(work)
}

// pidsWithArg lists the processes with an argument that contains s.
func pidsWithArg(s string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// suiteCgroups lists, deepest first, the cgroup directories in every
// hierarchy at or below the suites' cgroup parents.
func suiteCgroups(work string) []string {
	prefix := filepath.Base(work) + "-"
	var dirs []string
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	hierarchies = append(hierarchies, "/sys/fs/cgroup")
	for _, h := range hierarchies {
		tops, _ := filepath.Glob(filepath.Join(h, prefix+"*"))
		for _, top := range tops {
			filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
		}
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

func cgroupPIDs(dir string) []int {
	var pids []int
	for _, f := range []string{"cgroup.procs", "tasks"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(l); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// unmountUnder detaches every mount at or below dir, deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// mountsUnder lists the mount points at or below dir (leftover check).
func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 5 {
			if p := unescapeMount(f[4]); p == dir || strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
	}
	return points
}

// dirSnapshot lists the paths below dir (nil when it does not exist), to
// tell what a runtime added outside our work dir.
func dirSnapshot(dir string) map[string]bool {
	if _, err := os.Lstat(dir); err != nil {
		return nil
	}
	m := map[string]bool{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			m[p] = true
		}
		return nil
	})
	return m
}

// unmountRemove detaches whatever is mounted on p and removes it.
func unmountRemove(p string) {
	syscall.Unmount(p, syscall.MNT_DETACH)
	os.Remove(p)
}
