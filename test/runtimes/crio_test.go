package runtimes

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// crioConfig is CRI-O's private configuration: its own storage (vfs, which
// podman fills with the suite's images), socket, state files, namespace
// pins, runc root and CNI dirs; cgroupfs (no systemd here); no NRI (it
// would listen on /var/run/nri); private signature-policy and auth dirs
// (CRI-O creates them at start). Everything else is CRI-O's default, the
// dropped infra container included: a pod whose PID namespace is not shared
// has no pause process (the pause image is there for those that share one),
// pinns holds its namespaces.
const crioConfig = `[crio]
root = "%[1]s/root"
runroot = "%[1]s/run"
storage_driver = "vfs"
log_dir = "%[1]s/logs"
version_file = "%[1]s/version"
version_file_persist = "%[1]s/version-persist"
clean_shutdown_file = "%[1]s/clean.shutdown"

[crio.api]
listen = "%[1]s/crio.sock"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
namespaces_dir = "%[1]s/ns"
pinns_path = "%[2]s"
container_exits_dir = "%[1]s/exits"
container_attach_socket_dir = "%[1]s/attach"
hooks_dir = []
irqbalance_config_restore_file = "disable"

[crio.runtime.runtimes.runc]
runtime_path = "%[3]s"
runtime_type = "oci"
runtime_root = "%[1]s/runc"
monitor_path = "%[4]s"
monitor_cgroup = "pod"
monitor_env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]

[crio.image]
pause_image = "%[5]s"
pause_command = "/pause"
signature_policy_dir = "%[1]s/policies"
namespaced_auth_dir = "%[1]s/auth"

[crio.network]
network_dir = "%[6]s"
plugin_dirs = ["%[7]s"]

[crio.nri]
enable_nri = false
`

// crioNodePaths are CRI-O's node-wide defaults that crioConfig moves into
// the suite's dir: nothing may appear there.
var crioNodePaths = []string{"/run/crio", "/var/lib/crio", "/etc/crio", "/var/log/crio", "/run/nri", "/var/lib/containers/storage"}

// ociImageID is the ID containers/storage gives the image of an OCI
// image-layout tar (hack/install-runtimes.sh's): its config's digest.
func ociImageID(t *testing.T, tarPath string) string {
	t.Helper()
	f, err := os.Open(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", tarPath, err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatalf("%s: %v", tarPath, err)
		}
	}
	type descriptor struct {
		Digest string `json:"digest"`
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	var manifest struct {
		Config descriptor `json:"config"`
	}
	blob := func(d string) []byte { return files["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] }
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("%s: index.json: %v", tarPath, err)
	}
	if err := json.Unmarshal(blob(index.Manifests[0].Digest), &manifest); err != nil || manifest.Config.Digest == "" {
		t.Fatalf("%s: manifest: %v", tarPath, err)
	}
	return strings.TrimPrefix(manifest.Config.Digest, "sha256:")
}

// loadCRIOImages puts the suite's images into CRI-O's store (CRI-O pulls
// only from registries, and none is reachable): podman, on the same root
// and driver, loads each tar and names the image as the tar does.
func loadCRIOImages(t *testing.T, dir string, images map[string]string) {
	t.Helper()
	pm := &podman{args: []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"--storage-driver", "vfs", "--tmpdir", filepath.Join(dir, "podman-tmp"),
		"--cgroup-manager", "cgroupfs", "--events-backend", "none"}}
	for name, tarPath := range images {
		pm.must(t, "load", "-q", "-i", tarPath)
		pm.must(t, "tag", ociImageID(t, tarPath), name)
	}
}

// pluginRequest is the part of a plugin's stdin the suite asserts on.
type pluginRequest struct {
	CNIVersion       string           `json:"cniVersion"`
	RuntimeConfig    map[string]any   `json:"runtimeConfig"`
	PrevResult       json.RawMessage  `json:"prevResult"`
	ValidAttachments []map[string]any `json:"cni.dev/valid-attachments"`
}

func decodeRequest(t *testing.T, c call) pluginRequest {
	t.Helper()
	var r pluginRequest
	if err := json.Unmarshal([]byte(c.stdin), &r); err != nil {
		t.Fatalf("%s: stdin: %v: %s", c, err, c.stdin)
	}
	return r
}

// TestCRIO: CRI-O (built by hack/install-runtimes.sh) runs the plugins of
// examples/containerd.conflist, the conflist docs/operations.md gives it,
// for pod sandboxes made with crictl.
func TestCRIO(t *testing.T) {
	inst := installed(t, "crio")
	for _, k := range []string{"CRIO", "PINNS", "CONMON", "RUNC", "CRICTL"} {
		if _, err := os.Stat(inst[k]); inst[k] == "" || err != nil {
			t.Fatalf("hack/install-runtimes.sh crio: %s=%q: %v", k, inst[k], err)
		}
	}
	n := newNode(t)
	dir := suiteDir(t, "crio")
	dataDir, logFile := filepath.Join(dir, "ipam"), filepath.Join(dir, "plugins.log")
	conf := example(t, "containerd.conflist", n, dataDir, logFile)
	network := conf["name"].(string)
	shimBin, calls := newShimDir(t, filepath.Join(dir, "cni"))
	logCallsOnFailure(t, calls)
	confDir, dropIns := filepath.Join(dir, "net.d"), filepath.Join(dir, "crio.conf.d")
	for _, d := range []string{confDir, dropIns} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON(t, filepath.Join(confDir, "10-ovsflow.conflist"), conf)

	nodeBefore := map[string]map[string]bool{}
	for _, p := range crioNodePaths {
		nodeBefore[p] = dirSnapshot(p)
	}
	t.Cleanup(func() { sweep(dir) }) // last: conmon, container processes, cgroups, mounts
	cgroups := cgroupParent("crio")
	t.Cleanup(func() {
		for _, g := range suiteCgroups(workDir) {
			if _, below, _ := strings.Cut(g, cgroups+"/"); below != "" {
				t.Errorf("cgroup left after the pods were removed: %s", g)
			}
		}
		for _, p := range crioNodePaths {
			for q := range dirSnapshot(p) {
				if !nodeBefore[p][q] {
					t.Errorf("CRI-O wrote outside its dirs: %s", q)
					os.RemoveAll(q)
				}
			}
		}
	})

	cfg := filepath.Join(dir, "crio.conf")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(crioConfig, dir, inst["PINNS"], inst["RUNC"], inst["CONMON"],
		inst["PAUSE_IMAGE"], confDir, shimBin)), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "crio.sock")
	crictlCfg := filepath.Join(dir, "crictl.yaml")
	if err := os.WriteFile(crictlCfg, []byte(fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n", sock, sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Pods as kubelet makes them: without a shared PID namespace, CRI-O
	// runs no infra container (drop_infra_ctr), whose oom_score_adj of -998
	// runc could not set here (no CAP_SYS_RESOURCE).
	cri := &crictl{bin: inst["CRICTL"], config: crictlCfg, cgroupParent: cgroups, containerPID: true}

	began := time.Now()
	loadCRIOImages(t, dir, map[string]string{inst["PAUSE_IMAGE"]: inst["PAUSE_TAR"], inst["APP_IMAGE"]: inst["APP_TAR"]})
	daemon := start(t, filepath.Join(dir, "crio.log"), nil, inst["CRIO"], "--config", cfg, "--config-dir", dropIns, "--log-level", "info")
	if err := framework.Wait(60*time.Second, func() error {
		if !daemon.running() {
			return fmt.Errorf("crio exited")
		}
		out, err := cri.run("info")
		if err != nil {
			return err
		}
		var info struct {
			Status struct {
				Conditions []struct {
					Type   string `json:"type"`
					Status bool   `json:"status"`
				} `json:"conditions"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			return fmt.Errorf("crictl info: %w", err)
		}
		for _, c := range info.Status.Conditions {
			if c.Type == "NetworkReady" && c.Status {
				return nil
			}
		}
		return fmt.Errorf("network not ready: %s", out)
	}); err != nil {
		t.Fatalf("crio did not come up: %v", err)
	}
	// Remove the pods at the end whatever happened (the DELs run here), before crio stops.
	t.Cleanup(func() {
		out, _ := cri.run("pods", "-q")
		for _, id := range strings.Fields(out) {
			cri.run("stopp", id)
			cri.run("rmp", "-f", id)
		}
	})
	for _, img := range []string{inst["PAUSE_IMAGE"], inst["APP_IMAGE"]} {
		cri.must(t, "inspecti", img)
	}
	t.Logf("CRI-O up and images loaded in %v: %s", time.Since(began).Round(time.Millisecond),
		strings.Join(strings.Fields(cri.must(t, "version")), " "))

	a := cri.runPod(t, dir, "crio-a", inst["APP_IMAGE"], []map[string]any{
		{"protocol": 0, "container_port": ctrPortTCP, "host_port": hostPortTCP}, // TCP
		{"protocol": 1, "container_port": ctrPortUDP, "host_port": hostPortUDP}, // UDP
	})
	b := cri.runPod(t, dir, "crio-b", inst["APP_IMAGE"], nil)
	// No flows of ours for pod a either: CRI-O does not pass its port
	// mappings to the plugins (below).
	n.assertAttached(t, a.id, "eth0", false)
	n.assertAttached(t, b.id, "eth0", false)

	t.Run("container to container", func(t *testing.T) {
		expect(t, b.netns, "tcp", framework.HP(a.ip, ctrPortTCP), "crio-a", b.ip)
		expect(t, a.netns, "udp", framework.HP(b.ip, ctrPortUDP), "crio-b", a.ip)
		expect(t, n.outside.path(), "tcp", framework.HP(b.ip, ctrPortTCP), "crio-b", outsideV4)
		if a.ip6 != "" && b.ip6 != "" {
			expect(t, b.netns, "tcp", framework.HP(a.ip6, ctrPortTCP), "crio-a", b.ip6)
		}
	})

	var atStart []call // what CRI-O sent before the first pod's ADD
	for _, c := range readCalls(t, calls) {
		if c.command == "ADD" {
			break
		}
		atStart = append(atStart, c)
	}
	t.Run("what CRI-O sent", func(t *testing.T) {
		// At start, before any pod: STATUS (until the network is ready) and
		// GC (its restore of the known pods: none) to every plugin of the
		// conflist, at the highest version both it and libcni support.
		for _, p := range []string{"ovs-bridge", "ovs-portmap"} {
			if st := filterCalls(atStart, p, "STATUS"); len(st) == 0 {
				t.Errorf("%s: no STATUS before the first pod", p)
			}
			gc := filterCalls(atStart, p, "GC")
			if len(gc) != 1 {
				t.Errorf("%s: got %d GCs at start, want 1", p, len(gc))
				continue
			}
			r := decodeRequest(t, gc[0])
			if r.CNIVersion != "1.1.0" || len(r.ValidAttachments) != 0 {
				t.Errorf("%s GC at start: cniVersion %q, valid-attachments %v; want 1.1.0 and none", p, r.CNIVersion, r.ValidAttachments)
			}
			t.Logf("CRI-O at start: %s STATUS x%d, GC %s", p, len(filterCalls(atStart, p, "STATUS")), strings.TrimSpace(gc[0].stdin))
		}
		cs := readCalls(t, calls)
		for _, p := range []*criPod{a, b} {
			for _, plugin := range []string{"ovs-bridge", "ovs-portmap"} {
				var adds, checks []call
				for _, c := range cs {
					if c.plugin == plugin && c.env["CNI_CONTAINERID"] == p.id {
						switch c.command {
						case "ADD":
							adds = append(adds, c)
						case "CHECK":
							checks = append(checks, c)
						}
					}
				}
				if len(adds) != 1 {
					t.Errorf("%s: got %d ADDs for pod %s, want 1", plugin, len(adds), p.name)
					continue
				}
				r := decodeRequest(t, adds[0])
				if r.CNIVersion != "1.1.0" {
					t.Errorf("%s ADD: cniVersion %q, want 1.1.0 (the highest of the conflist's cniVersions)", plugin, r.CNIVersion)
				}
				// CRI-O publishes host ports itself (its hostport manager,
				// nftables) and gives the plugins no portMappings: the
				// runtimeConfig of a plugin that declares the capability is
				// absent, for pod a as for pod b.
				if plugin == "ovs-portmap" && r.RuntimeConfig != nil {
					t.Errorf("ovs-portmap ADD of pod %s: runtimeConfig %v, want none (CRI-O keeps host ports to itself)", p.name, r.RuntimeConfig)
				}
				// After the ADD, CRI-O reads the pod's status with CHECK.
				if len(checks) == 0 {
					t.Errorf("%s: no CHECK for pod %s", plugin, p.name)
				}
				t.Logf("CRI-O ADD %s of pod %s: CNI_ARGS=%s, CNI_NETNS=%s, %d CHECK(s)", plugin, p.name,
					adds[0].env["CNI_ARGS"], adds[0].env["CNI_NETNS"], len(checks))
				if plugin == "ovs-portmap" {
					t.Logf("CRI-O ADD ovs-portmap of pod %s, stdin: %s", p.name, strings.TrimSpace(adds[0].stdin))
				}
			}
		}
		if lo := filterCalls(cs, "loopback", ""); len(lo) != 0 {
			t.Errorf("got %d loopback calls, want none (CRI-O brings lo up itself)", len(lo))
		}
		assertAllSucceeded(t, cs)
	})

	// Host ports: CRI-O's own hostport manager (the tables crio-hostports:
	// DNAT in the node's prerouting and output hooks to the pod's address,
	// masquerade of a pod reaching itself), not ovs-portmap. What answers,
	// and the client address the pod sees, as measured here. UDP from
	// outside to the node's IPv6 address answers because the node sends the
	// pod no ICMPv6 redirects (the base flows drop them; Linux has no
	// sysctl to stop them): the client is on the bridge's link, so the
	// node, forwarding the pod's answers back out of the interface they came
	// in by, would redirect the pod, which then answered the client directly,
	// from its own address, past the node's NAT (no answer, on a bridge
	// without the base flows). One path does not answer:
	//   - a pod through its own host port (hairpin): CRI-O's masquerade rule
	//     ("ct status & dnat|snat == dnat") is compiled by Debian 12's nft
	//     1.0.6 as "ct status & (snat | dnat) | snat == dnat", which never
	//     holds: the pod gets a packet from its own address and drops it.
	t.Run("host ports", func(t *testing.T) {
		t.Logf("nft, CRI-O's tables:\n%s", crioNFT(t))
		for _, c := range []struct {
			from, network, addr string
			src                 string // the client address the pod sees; "" when nothing answers
		}{
			{n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP), outsideV4},
			{n.outside.path(), "tcp", framework.HP(nodeV6, hostPortTCP), outsideV6},
			{n.outside.path(), "udp", framework.HP(nodeV4, hostPortUDP), outsideV4},
			{n.outside.path(), "udp", framework.HP(nodeV6, hostPortUDP), outsideV6},
			{b.netns, "tcp", framework.HP(nodeV4, hostPortTCP), b.ip},
			{a.netns, "tcp", framework.HP(nodeV4, hostPortTCP), ""}, // hairpin
			{"", "tcp", framework.HP(nodeV4, hostPortTCP), nodeV4},
		} {
			got, err := answer(c.from, c.network, c.addr, "crio-a")
			t.Logf("%s %s from %s: %q, %v", c.network, c.addr, nsLabel(c.from), got, err)
			host, _, _ := net.SplitHostPort(strings.TrimPrefix(got, "hello from crio-a to "))
			switch {
			case c.src == "":
				// CRI-O's path, not the plugins': what it did is recorded,
				// not asserted.
				t.Logf("%s %s from %s: CRI-O's hostport manager, measured: answered %v (no answer so far)", c.network, c.addr, nsLabel(c.from), err == nil)
			case err != nil:
				t.Errorf("%s %s from %s: %v, want an answer from crio-a", c.network, c.addr, nsLabel(c.from), err)
			case host != c.src:
				t.Errorf("%s %s from %s: crio-a saw client %q, want %s", c.network, c.addr, nsLabel(c.from), host, c.src)
			}
		}
	})

	// stopp, then rmp, of each pod.
	cri.must(t, "stopp", a.id)
	n.assertDetached(t, a.id, "eth0")
	expectNoAnswer(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP))
	expectNoAnswer(t, "", "tcp", framework.HP(nodeV4, hostPortTCP))
	expect(t, n.outside.path(), "tcp", framework.HP(b.ip, ctrPortTCP), "crio-b", outsideV4)
	afterStop := len(readCalls(t, calls))
	cri.must(t, "rmp", a.id)
	for _, p := range []*criPod{b} {
		cri.must(t, "stopp", p.id)
		cri.must(t, "rmp", p.id)
	}

	cs := readCalls(t, calls)
	for _, p := range []*criPod{a, b} {
		for _, plugin := range []string{"ovs-bridge", "ovs-portmap"} {
			var dels []call
			for _, c := range filterCalls(cs, plugin, "DEL") {
				if c.env["CNI_CONTAINERID"] == p.id {
					dels = append(dels, c)
				}
			}
			for _, d := range dels {
				r := decodeRequest(t, d)
				t.Logf("CRI-O DEL %s of pod %s: CNI_NETNS=%q, prevResult %t, runtimeConfig %v", plugin, p.name,
					d.env["CNI_NETNS"], len(r.PrevResult) > 0, r.RuntimeConfig)
			}
			// One DEL per pod, at stopp (rmp of a stopped pod calls no
			// plugin), with the pinned netns and the cached prevResult.
			if len(dels) != 1 {
				t.Errorf("%s: got %d DELs of pod %s, want 1 (stopp)", plugin, len(dels), p.name)
				continue
			}
			if r := decodeRequest(t, dels[0]); dels[0].env["CNI_NETNS"] != p.netns || len(r.PrevResult) == 0 {
				t.Errorf("%s DEL of pod %s: netns %q, prevResult %t; want %s and a prevResult", plugin, p.name,
					dels[0].env["CNI_NETNS"], len(r.PrevResult) > 0, p.netns)
			}
		}
	}
	for _, c := range filterCalls(cs[afterStop:], "", "DEL") {
		if c.env["CNI_CONTAINERID"] == a.id {
			t.Errorf("rmp of the stopped pod a called a plugin again: %s", c)
		}
	}
	assertAllSucceeded(t, cs)
	if pods, _ := cri.run("pods", "-q"); pods != "" {
		t.Errorf("pods left: %s", pods)
	}
	daemon.stop(t)
	if daemon.running() {
		t.Errorf("crio still running")
	}
	// CRI-O leaves its (empty) hostport tables behind: none of it may name a
	// pod, then it goes, so that the node's ruleset is as before.
	if left := crioNFT(t); strings.Contains(left, a.ip) || strings.Contains(left, fmt.Sprint(hostPortTCP)) {
		t.Errorf("CRI-O's host ports left in nft:\n%s", left)
	}
	deleteCRIONFT(t)
	n.assertClean(t, dataDir, network)
	if left, _ := filepath.Glob("/var/lib/cni/results/*"); len(left) > 0 {
		t.Errorf("libcni cache entries left: %v", left)
	}
	if m := mountsUnder(dir); len(m) > 0 {
		t.Errorf("mounts left: %q", m)
	}

	t.Run("logFile", func(t *testing.T) {
		assertLogFile(t, logFile, map[string]int{"ADD": 2, "DEL": 2}, a.id) // one DEL (stopp), two plugins
	})
}

// answer dials addr until tag answers or 5 s have passed: the container is
// known to be up (container to container answered), so this measures the
// path, not a start.
func answer(fromNS, network, addr, tag string) (string, error) {
	var got string
	var err error
	framework.Until(5*time.Second, func() bool {
		got, err = dial(fromNS, network, addr)
		if err == nil && !strings.HasPrefix(got, "hello from "+tag+" ") {
			err = fmt.Errorf("answered by someone else")
		}
		return err == nil
	})
	return got, err
}

// crioNFTTables are the tables CRI-O's hostport manager adds.
var crioNFTTables = []string{"ip crio-hostports", "ip6 crio-hostports"}

func crioNFT(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	tables := nftTables(nftRuleset(t))
	for _, name := range crioNFTTables {
		if block, ok := tables["table "+name]; ok {
			b.WriteString(block + "\n")
		}
	}
	return b.String()
}

func deleteCRIONFT(t *testing.T) {
	t.Helper()
	tables := nftTables(nftRuleset(t))
	for _, name := range crioNFTTables {
		if _, ok := tables["table "+name]; ok {
			framework.MustRun(t, "nft", append([]string{"delete", "table"}, strings.Fields(name)...)...)
		}
	}
}
