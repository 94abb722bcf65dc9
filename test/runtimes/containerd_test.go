package runtimes

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// containerdConfig is the private configuration of containerd 1.6 (Debian)
// with its CRI plugin: its own root, state, sockets, CNI dirs and runc root;
// restrict_oom_score_adj because the sandbox has no CAP_SYS_RESOURCE;
// netns_mounts_under_state_dir so that pod netns files stay in the state
// dir; cgroupfs (no systemd here); the opt plugin moved out of /opt.
const containerdConfig = `version = 2
root = "%[1]s/root"
state = "%[1]s/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "%[1]s/containerd.sock"
[ttrpc]
  address = "%[1]s/containerd-ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "%[1]s/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%[2]s"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "%[3]s"
    conf_dir = "%[4]s"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "%[1]s/runc"
`

// crictl runs crictl against a private CRI runtime (containerd or CRI-O),
// whose pods go under cgroupParent.
type crictl struct {
	bin, config, cgroupParent string
	// containerPID gives each container its own PID namespace (CRI
	// NamespaceMode CONTAINER), what kubelet asks for a pod without
	// shareProcessNamespace; crictl's default is one per pod (POD).
	containerPID bool
}

func (c *crictl) run(args ...string) (string, error) {
	cmd := exec.Command(c.bin, append([]string{"--config", c.config}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func (c *crictl) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// criPod is one pod sandbox with one app container.
type criPod struct {
	name, id, ctr string
	ip, ip6       string
	netns         string
}

// runPod starts a pod sandbox with the given port mappings and an rt-echo
// container tagged with the pod name.
func (c *crictl) runPod(t *testing.T, dir, name, appImage string, portMappings []map[string]any) *criPod {
	t.Helper()
	p := &criPod{name: name}
	linux, ctrLinux := map[string]any{"cgroup_parent": c.cgroupParent}, map[string]any{}
	if c.containerPID {
		sc := map[string]any{"namespace_options": map[string]any{"pid": 1}}
		linux["security_context"], ctrLinux["security_context"] = sc, sc
	}
	pod := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "ovsflow-rt", "uid": name + "-uid", "attempt": 1},
		"hostname":      name,
		"log_directory": filepath.Join(dir, "logs", name),
		"port_mappings": portMappings,
		"linux":         linux,
	}
	ctr := map[string]any{
		"metadata": map[string]any{"name": "app"},
		"image":    map[string]any{"image": appImage},
		"envs":     []any{map[string]any{"key": "RT_TAG", "value": name}},
		"log_path": "app.log",
		"linux":    ctrLinux,
	}
	podFile, ctrFile := filepath.Join(dir, name+"-pod.json"), filepath.Join(dir, name+"-ctr.json")
	writeJSON(t, podFile, pod)
	writeJSON(t, ctrFile, ctr)
	p.id = c.must(t, "runp", podFile)
	p.ctr = c.must(t, "create", p.id, ctrFile, podFile)
	c.must(t, "start", p.ctr)

	var inspect struct {
		Status struct {
			Network struct {
				IP            string `json:"ip"`
				AdditionalIPs []struct {
					IP string `json:"ip"`
				} `json:"additionalIps"`
			} `json:"network"`
		} `json:"status"`
		Info struct {
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct {
						Type string `json:"type"`
						Path string `json:"path"`
					} `json:"namespaces"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		} `json:"info"`
	}
	out := c.must(t, "inspectp", "-o", "json", p.id)
	if err := json.Unmarshal([]byte(out), &inspect); err != nil {
		t.Fatalf("crictl inspectp: %v: %s", err, out)
	}
	p.ip = inspect.Status.Network.IP
	for _, a := range inspect.Status.Network.AdditionalIPs {
		p.ip6 = a.IP
	}
	for _, n := range inspect.Info.RuntimeSpec.Linux.Namespaces {
		if n.Type == "network" {
			p.netns = n.Path
		}
	}
	if p.ip == "" || p.netns == "" {
		t.Fatalf("pod %s: no IP or netns in crictl inspectp: %s", name, out)
	}
	t.Logf("pod %s: sandbox %s, ip %s %s, netns %s", name, p.id, p.ip, p.ip6, p.netns)
	return p
}

// TestContainerd: the Kubernetes path. containerd 1.6's CRI plugin runs the
// plugins of examples/containerd.conflist for pod sandboxes made with crictl.
func TestContainerd(t *testing.T) {
	inst := installed(t, "containerd")
	n := newNode(t)
	dir := suiteDir(t, "ctrd")
	dataDir, logFile := filepath.Join(dir, "ipam"), filepath.Join(dir, "plugins.log")
	conf := example(t, "containerd.conflist", n, dataDir, logFile)
	if v := conf["cniVersion"]; v != "1.0.0" {
		t.Errorf("examples/containerd.conflist: cniVersion %v, want 1.0.0 (containerd 1.6/1.7 refuse 1.1.0 results)", v)
	}
	net := conf["name"].(string)
	shimBin, calls := newShimDir(t, filepath.Join(dir, "cni"))
	logCallsOnFailure(t, calls)
	confDir := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(confDir, "10-ovsflow.conflist"), conf)

	t.Cleanup(func() { sweep(dir) }) // last: shims, container processes, cgroups, mounts
	cgroups := cgroupParent("containerd")
	t.Cleanup(func() {
		for _, g := range suiteCgroups(workDir) {
			// The parent is ours to remove (sweep does); what is below it is the pods'.
			if _, below, _ := strings.Cut(g, cgroups+"/"); below != "" {
				t.Errorf("cgroup left after the pods were removed: %s", g)
			}
		}
	})
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(containerdConfig, dir, inst["PAUSE_IMAGE"], shimBin, confDir)), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "containerd.sock")
	crictlCfg := filepath.Join(dir, "crictl.yaml")
	if err := os.WriteFile(crictlCfg, []byte(fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 60\n", sock, sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	cri := &crictl{bin: inst["CRICTL"], config: crictlCfg, cgroupParent: cgroups}

	began := time.Now()
	daemon := start(t, filepath.Join(dir, "containerd.log"), nil, "containerd", "--config", cfg)
	if err := framework.Wait(30*time.Second, func() error {
		if !daemon.running() {
			return fmt.Errorf("containerd exited")
		}
		_, err := cri.run("info")
		return err
	}); err != nil {
		t.Fatalf("containerd did not come up: %v", err)
	}
	// Remove the pods at the end whatever happened (the DELs run here), before
	// containerd stops.
	t.Cleanup(func() {
		out, _ := cri.run("pods", "-q")
		for _, id := range strings.Fields(out) {
			cri.run("stopp", id)
			cri.run("rmp", "-f", id)
		}
	})
	for _, tar := range []string{inst["PAUSE_TAR"], inst["APP_TAR"]} {
		framework.MustRun(t, "ctr", "--address", sock, "-n", "k8s.io", "images", "import", tar)
	}
	t.Logf("containerd up and images imported in %v", time.Since(began).Round(time.Millisecond))

	a := cri.runPod(t, dir, "ctrd-a", inst["APP_IMAGE"], []map[string]any{
		{"protocol": 0, "container_port": ctrPortTCP, "host_port": hostPortTCP}, // TCP
		{"protocol": 1, "container_port": ctrPortUDP, "host_port": hostPortUDP}, // UDP
	})
	b := cri.runPod(t, dir, "ctrd-b", inst["APP_IMAGE"], nil)
	n.assertAttached(t, a.id, "eth0", true)
	n.assertAttached(t, b.id, "eth0", false)

	t.Run("host ports", func(t *testing.T) {
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "ctrd-a", outsideV4)
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV6, hostPortTCP), "ctrd-a", outsideV6)
		expect(t, n.outside.path(), "udp", framework.HP(nodeV4, hostPortUDP), "ctrd-a", outsideV4)
		expect(t, n.outside.path(), "udp", framework.HP(nodeV6, hostPortUDP), "ctrd-a", outsideV6)
		expect(t, b.netns, "tcp", framework.HP(nodeV4, hostPortTCP), "ctrd-a", "")
		expect(t, a.netns, "tcp", framework.HP(nodeV4, hostPortTCP), "ctrd-a", "") // hairpin
		expect(t, "", "tcp", framework.HP(nodeV4, hostPortTCP), "ctrd-a", nodeV4)
	})
	t.Run("container to container", func(t *testing.T) {
		expect(t, b.netns, "tcp", framework.HP(a.ip, ctrPortTCP), "ctrd-a", b.ip)
		expect(t, a.netns, "udp", framework.HP(b.ip, ctrPortUDP), "ctrd-b", a.ip)
		expect(t, n.outside.path(), "tcp", framework.HP(b.ip, ctrPortTCP), "ctrd-b", outsideV4)
	})
	t.Run("what containerd sent", func(t *testing.T) {
		cs := readCalls(t, calls)
		adds := filterCalls(cs, "ovs-portmap", "ADD")
		if len(adds) != 2 {
			t.Fatalf("got %d ovs-portmap ADDs, want 2", len(adds))
		}
		if !strings.Contains(adds[0].stdin+adds[1].stdin, `"HostPort":8080`) {
			t.Errorf("containerd no longer sends capitalised portMappings keys: %s", adds[0].stdin)
		}
		if lo := filterCalls(cs, "loopback", "ADD"); len(lo) != 2 {
			t.Errorf("got %d loopback ADDs, want one per pod", len(lo))
		}
		assertAllSucceeded(t, cs)
	})

	// A pod asking for a host port another pod holds: ovs-portmap refuses it,
	// containerd DELs at once, and nothing of the pod is left.
	t.Run("host port conflict", func(t *testing.T) {
		pod := map[string]any{
			"metadata":      map[string]any{"name": "ctrd-conflict", "namespace": "ovsflow-rt", "uid": "ctrd-conflict-uid", "attempt": 1},
			"log_directory": filepath.Join(dir, "logs", "ctrd-conflict"),
			"port_mappings": []any{map[string]any{"protocol": 0, "container_port": ctrPortTCP, "host_port": hostPortTCP}},
			"linux":         map[string]any{"cgroup_parent": cgroupParent("containerd")},
		}
		podFile := filepath.Join(dir, "ctrd-conflict-pod.json")
		writeJSON(t, podFile, pod)
		_, err := cri.run("runp", podFile)
		if err == nil || !strings.Contains(err.Error(), a.id) {
			t.Errorf("runp with a taken host port: got %v, want an error naming pod %s", err, a.id)
		}
		var failed []call
		for _, c := range filterCalls(readCalls(t, calls), "ovs-portmap", "ADD") {
			if c.rc != 0 {
				failed = append(failed, c)
			}
		}
		if len(failed) != 1 {
			t.Fatalf("got %d failed ovs-portmap ADDs, want 1", len(failed))
		}
		id := failed[0].env["CNI_CONTAINERID"]
		n.assertDetached(t, id, "eth0")
		if got := allocations(t, dataDir, net); len(got) != 4 {
			t.Errorf("allocations after the failed pod: %v, want the 4 of pods a and b", got)
		}
		if dels := filterCalls(readCalls(t, calls), "ovs-bridge", "DEL"); len(dels) == 0 || dels[len(dels)-1].env["CNI_CONTAINERID"] != id {
			t.Errorf("containerd did not DEL the failed sandbox %s", id)
		}
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "ctrd-a", outsideV4)
	})

	// stopp: the first DEL (with the netns and the cached prevResult).
	cri.must(t, "stopp", a.id)
	n.assertDetached(t, a.id, "eth0")
	expectNoAnswer(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP))
	expectNoAnswer(t, n.outside.path(), "udp", framework.HP(nodeV4, hostPortUDP))
	expectNoAnswer(t, "", "tcp", framework.HP(nodeV4, hostPortTCP))
	expect(t, n.outside.path(), "tcp", framework.HP(b.ip, ctrPortTCP), "ctrd-b", outsideV4)
	// rmp: the second DEL, with an empty netns and no prevResult.
	cri.must(t, "rmp", a.id)
	n.assertDetached(t, a.id, "eth0")
	// The host ports are free again.
	c := cri.runPod(t, dir, "ctrd-c", inst["APP_IMAGE"], []map[string]any{
		{"protocol": 0, "container_port": ctrPortTCP, "host_port": hostPortTCP},
		{"protocol": 1, "container_port": ctrPortUDP, "host_port": hostPortUDP},
	})
	expect(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "ctrd-c", outsideV4)
	expect(t, n.outside.path(), "udp", framework.HP(nodeV4, hostPortUDP), "ctrd-c", outsideV4)
	for _, p := range []*criPod{b, c} {
		cri.must(t, "stopp", p.id)
		cri.must(t, "rmp", p.id)
	}

	cs := readCalls(t, calls)
	for _, p := range []string{"ovs-bridge", "ovs-portmap"} {
		var dels []call
		for _, c := range filterCalls(cs, p, "DEL") {
			if c.env["CNI_CONTAINERID"] == a.id {
				dels = append(dels, c)
			}
		}
		if len(dels) != 2 {
			t.Errorf("%s: got %d DELs of pod a, want 2 (stopp, rmp)", p, len(dels))
			continue
		}
		if dels[1].env["CNI_NETNS"] != "" || strings.Contains(dels[1].stdin, "prevResult") {
			t.Logf("%s: containerd's second DEL now has netns %q / a prevResult", p, dels[1].env["CNI_NETNS"])
		}
	}
	var unexpected []call
	for _, c := range cs {
		if !(c.plugin == "ovs-portmap" && c.command == "ADD" && strings.Contains(c.env["CNI_ARGS"], "K8S_POD_NAME=ctrd-conflict")) {
			unexpected = append(unexpected, c)
		}
	}
	assertAllSucceeded(t, unexpected)
	n.assertClean(t, dataDir, net)
	if pods, _ := cri.run("pods", "-q"); pods != "" {
		t.Errorf("pods left: %s", pods)
	}
	if left, _ := filepath.Glob("/var/lib/cni/results/*"); len(left) > 0 {
		t.Errorf("libcni cache entries left: %v", left)
	}
	if m := mountsUnder(dir); len(m) > 0 {
		t.Errorf("mounts left: %q", m)
	}

	t.Run("logFile", func(t *testing.T) {
		assertLogFile(t, logFile, map[string]int{"ADD": 2, "DEL": 4}, a.id) // DELs: stopp and rmp, two plugins
	})
}
