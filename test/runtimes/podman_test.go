package runtimes

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// podmanConfig is podman 4.3's private configuration: the CNI backend on
// our conf and bin dirs; runc (Debian's crun refuses this host's hybrid
// cgroups); cgroupfs and file events (no systemd); rlimits the sandbox may
// set (it lacks CAP_SYS_RESOURCE, and podman's defaults are higher).
const podmanConfig = `[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
[network]
network_backend = "cni"
cni_plugin_dirs = ["%[1]s"]
network_config_dir = "%[2]s"
default_network = "%[3]s"
`

// podman runs podman with private storage and run dirs.
type podman struct {
	args []string
	env  []string
}

func (p *podman) run(args ...string) (string, error) {
	cmd := exec.Command("podman", append(append([]string{}, p.args...), args...)...)
	cmd.Env = append(os.Environ(), p.env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("podman %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func (p *podman) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := p.run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// podmanContainer is one container started with --rootfs.
type podmanContainer struct {
	name, id string
	ip, ip6  string
	netns    string
}

// runContainer starts rt-echo, tagged with the container's name, on network
// net with the given -p flags. --rootfs takes the first positional argument
// as the rootfs, so every option comes before it.
func (p *podman) runContainer(t *testing.T, dir, rootfsTemplate, name, net string, publish ...string) *podmanContainer {
	t.Helper()
	rootfs := filepath.Join(dir, "rootfs-"+name)
	framework.MustRun(t, "cp", "-a", rootfsTemplate, rootfs)
	args := []string{"run", "-d", "--name", name, "--network", net, "--cgroup-parent", cgroupParent("podman"),
		"--env", "RT_TAG=" + name}
	for _, pub := range publish {
		args = append(args, "-p", pub)
	}
	args = append(args, "--rootfs", rootfs, "/rt-echo", "-tcp", fmt.Sprint(ctrPortTCP), "-udp", fmt.Sprint(ctrPortUDP))
	c := &podmanContainer{name: name, id: p.must(t, args...)}
	var inspect []struct {
		NetworkSettings struct {
			SandboxKey string `json:"SandboxKey"`
			Networks   map[string]struct {
				IPAddress         string `json:"IPAddress"`
				GlobalIPv6Address string `json:"GlobalIPv6Address"`
			} `json:"Networks"`
		} `json:"NetworkSettings"`
	}
	out := p.must(t, "inspect", "--format", "json", c.id)
	if err := json.Unmarshal([]byte(out), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman inspect: %v: %s", err, out)
	}
	c.netns = inspect[0].NetworkSettings.SandboxKey
	recordNetNS(c.netns)
	nw := inspect[0].NetworkSettings.Networks[net]
	c.ip, c.ip6 = nw.IPAddress, nw.GlobalIPv6Address
	if c.ip == "" || c.netns == "" {
		t.Fatalf("container %s: no IP or netns in podman inspect: %s", name, out)
	}
	t.Logf("container %s: %s, ip %s %s, netns %s", name, c.id, c.ip, c.ip6, c.netns)
	return c
}

// TestPodman: podman 4.3 with its CNI backend on examples/podman.conflist,
// containers from a rootfs dir, -p 8080:80 and -p 5353:53/udp.
func TestPodman(t *testing.T) {
	inst := installed(t, "podman")
	n := newNode(t)
	dir := suiteDir(t, "podman")
	dataDir, logFile := filepath.Join(dir, "ipam"), filepath.Join(dir, "plugins.log")
	conf := example(t, "podman.conflist", n, dataDir, logFile)
	if v := conf["cniVersion"]; v != "1.0.0" {
		t.Errorf("examples/podman.conflist: cniVersion %v, want 1.0.0 (podman 4.3 refuses 1.1.0 results)", v)
	}
	net := conf["name"].(string)
	shimBin, calls := newShimDir(t, filepath.Join(dir, "cni"))
	logCallsOnFailure(t, calls)
	confDir := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(confDir, net+".conflist"), conf)
	containersConf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(containersConf, []byte(fmt.Sprintf(podmanConfig, shimBin, confDir, net)), 0o644); err != nil {
		t.Fatal(err)
	}
	pm := &podman{
		args: []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
			"--tmpdir", filepath.Join(dir, "tmp"), "--storage-driver", "vfs"},
		env: []string{"CONTAINERS_CONF=" + containersConf},
	}
	netnsBefore := dirSnapshot("/run/netns")

	t.Cleanup(func() { sweep(dir) })
	t.Cleanup(func() {
		for p := range dirSnapshot("/run/netns") {
			if !netnsBefore[p] && strings.HasPrefix(filepath.Base(p), "netns-") {
				t.Errorf("netns left by podman: %s", p)
				unmountRemove(p)
			}
		}
		for _, g := range suiteCgroups(workDir) {
			if _, below, _ := strings.Cut(g, cgroupParent("podman")+"/"); below != "" && below != "conmon" { // conmon: podman's, for all containers
				t.Errorf("cgroup left after the containers were removed: %s", g)
			}
		}
	})
	t.Cleanup(func() { pm.run("rm", "-a", "-f", "-t", "0") })

	if out := pm.must(t, "network", "ls", "--format", "{{.Name}} {{.Driver}}"); !strings.Contains(out, net+" ovs-bridge") {
		t.Fatalf("podman network ls does not show %s: %s", net, out)
	}
	a := pm.runContainer(t, dir, inst["APP_ROOTFS"], "podman-a", net,
		fmt.Sprintf("%d:%d", hostPortTCP, ctrPortTCP), fmt.Sprintf("%d:%d/udp", hostPortUDP, ctrPortUDP))
	b := pm.runContainer(t, dir, inst["APP_ROOTFS"], "podman-b", net)
	n.assertAttached(t, a.id, "eth0", true)
	n.assertAttached(t, b.id, "eth0", false)

	t.Run("host ports", func(t *testing.T) {
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "podman-a", outsideV4)
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV6, hostPortTCP), "podman-a", outsideV6)
		expect(t, n.outside.path(), "udp", framework.HP(nodeV4, hostPortUDP), "podman-a", outsideV4)
		expect(t, n.outside.path(), "udp", framework.HP(nodeV6, hostPortUDP), "podman-a", outsideV6)
		expect(t, b.netns, "tcp", framework.HP(nodeV4, hostPortTCP), "podman-a", "")
		expect(t, a.netns, "tcp", framework.HP(nodeV4, hostPortTCP), "podman-a", "") // hairpin
		expect(t, "", "tcp", framework.HP(nodeV4, hostPortTCP), "podman-a", nodeV4)
	})
	t.Run("container to container", func(t *testing.T) {
		expect(t, b.netns, "tcp", framework.HP(a.ip, ctrPortTCP), "podman-a", b.ip)
		expect(t, a.netns, "udp", framework.HP(b.ip, ctrPortUDP), "podman-b", a.ip)
		expect(t, n.outside.path(), "tcp", framework.HP(b.ip, ctrPortTCP), "podman-b", outsideV4)
	})
	t.Run("what podman sent", func(t *testing.T) {
		cs := readCalls(t, calls)
		adds := filterCalls(cs, "ovs-portmap", "ADD")
		if len(adds) != 2 {
			t.Fatalf("got %d ovs-portmap ADDs, want 2", len(adds))
		}
		if !strings.Contains(adds[0].stdin+adds[1].stdin, `"hostPort":8080`) {
			t.Errorf("podman no longer sends lowercase portMappings keys: %s", adds[0].stdin)
		}
		assertAllSucceeded(t, cs)
	})

	// restart = DEL then ADD of the same container ID; network reload the same
	// without stopping it: the host ports come back each time.
	for _, args := range [][]string{{"restart", "-t", "0", a.id}, {"network", "reload", a.id}} {
		pm.must(t, args...)
		n.assertAttached(t, a.id, "eth0", true)
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "podman-a", outsideV4)
		expect(t, n.outside.path(), "udp", framework.HP(nodeV6, hostPortUDP), "podman-a", outsideV6)
	}
	if p := framework.OurPorts(t); len(p) != 2 {
		t.Errorf("ports after restart and reload: %q, want two", p)
	}
	if got := allocations(t, dataDir, net); len(got) != 4 {
		t.Errorf("allocations after restart and reload: %v, want 4", got)
	}

	// rm -f: one DEL per plugin, the host ports go at once.
	pm.must(t, "rm", "-f", "-t", "0", a.id)
	n.assertDetached(t, a.id, "eth0")
	expectNoAnswer(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP))
	expectNoAnswer(t, n.outside.path(), "udp", framework.HP(nodeV4, hostPortUDP))
	expectNoAnswer(t, "", "tcp", framework.HP(nodeV4, hostPortTCP))
	expect(t, n.outside.path(), "tcp", framework.HP(b.ip, ctrPortTCP), "podman-b", outsideV4)
	pm.must(t, "rm", "-f", "-t", "0", b.id)

	cs := readCalls(t, calls)
	assertAllSucceeded(t, cs)
	n.assertClean(t, dataDir, net)
	if left := pm.must(t, "ps", "-a", "-q"); left != "" {
		t.Errorf("containers left: %s", left)
	}
	if left, _ := filepath.Glob("/var/lib/cni/results/*"); len(left) > 0 {
		t.Errorf("libcni cache entries left: %v", left)
	}
	if m := mountsUnder(dir); len(m) > 0 {
		t.Errorf("mounts left: %q", m)
	}

	t.Run("logFile", func(t *testing.T) {
		assertLogFile(t, logFile, map[string]int{"ADD": 6, "DEL": 6}, a.id) // run, restart, reload, rm: two plugins
	})
}
