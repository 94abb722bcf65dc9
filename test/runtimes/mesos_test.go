package runtimes

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// Apache Mesos's network/cni isolator, emulated as it calls plugins (Mesos
// has no Debian package; the behaviour below is that of
// src/slave/containerizer/mesos/isolators/network/cni/cni.cpp):
//
//   - one network = one file in --network_cni_config_dir holding a SINGLE
//     plugin config (no conflist, so no chaining, no prevResult, no
//     capabilities and no runtimeConfig); it is parsed as
//     spec::NetworkConfig (name and type required, ipam.type if ipam is
//     set) and skipped when its plugin or IPAM binary is not in
//     --network_cni_plugins_dir;
//   - ADD: the config gets args["org.apache.mesos"] = {"network_info":
//     <the task's NetworkInfo protobuf as JSON>} (snake_case keys, such as
//     port_mappings[].host_port; refused when the file already has that
//     key), is checkpointed as <root>/<container>/<network>/network.conf,
//     and that file is the plugin's stdin;
//   - the environment is exactly CNI_COMMAND, CNI_CONTAINERID, CNI_PATH
//     (the plugins dir), CNI_IFNAME (eth0, eth1, ... in network order),
//     CNI_NETNS (<root>/<container>/ns, a bind mount of the executor's
//     netns) and PATH: nothing else, no CNI_ARGS;
//   - stdout is parsed as spec::NetworkInfo, the 0.2.0 result shape
//     ({"ip4": {"ip", "gateway", "routes"}, "ip6": ..., "dns": ...}) and
//     checkpointed as <root>/<container>/<network>/<ifname>/network.info;
//   - DEL: the same plugin, the same environment with CNI_COMMAND=DEL, and
//     the checkpointed network.conf as stdin, verbatim.

// mesosAgent holds the isolator's flags and root dir.
type mesosAgent struct {
	root      string // the isolator's root dir (/var/run/mesos/isolators/network/cni)
	configDir string // --network_cni_config_dir
	pluginDir string // --network_cni_plugins_dir
	networks  map[string]string
}

// mesosNetworkInfo is the NetworkInfo protobuf of mesos.proto, rendered by
// JSON::protobuf: field names as declared, only the fields that are set.
type mesosNetworkInfo struct {
	Name         string             `json:"name"`
	IPAddresses  []map[string]any   `json:"ip_addresses,omitempty"`
	Labels       map[string]any     `json:"labels,omitempty"`
	PortMappings []mesosPortMapping `json:"port_mappings,omitempty"`
}

type mesosPortMapping struct {
	HostPort      uint32 `json:"host_port"`
	ContainerPort uint32 `json:"container_port"`
	Protocol      string `json:"protocol,omitempty"`
}

// mesosResult is spec::NetworkInfo (spec.proto): what Mesos reads of a result.
type mesosResult struct {
	IP4 *mesosIPConfig `json:"ip4"`
	IP6 *mesosIPConfig `json:"ip6"`
	DNS *struct {
		Nameservers []string `json:"nameservers"`
		Domain      string   `json:"domain"`
		Search      []string `json:"search"`
		Options     []string `json:"options"`
	} `json:"dns"`
}

type mesosIPConfig struct {
	IP      *string `json:"ip"` // required
	Gateway string  `json:"gateway"`
	Routes  []struct {
		Dst *string `json:"dst"` // required
		GW  string  `json:"gw"`
	} `json:"routes"`
}

// parseMesosResult parses like stout's protobuf::parse: unknown keys are
// ignored, a missing required field or a wrong type is an error.
func parseMesosResult(out []byte) (*mesosResult, error) {
	var r mesosResult
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("Protobuf parse failed: %w", err)
	}
	for _, ipc := range []*mesosIPConfig{r.IP4, r.IP6} {
		if ipc == nil {
			continue
		}
		if ipc.IP == nil {
			return nil, fmt.Errorf("Protobuf parse failed: missing required field ip")
		}
		for _, rt := range ipc.Routes {
			if rt.Dst == nil {
				return nil, fmt.Errorf("Protobuf parse failed: missing required field routes.dst")
			}
		}
	}
	return &r, nil
}

func newMesosAgent(t *testing.T, dir string, networkFiles map[string]any) *mesosAgent {
	t.Helper()
	a := &mesosAgent{root: filepath.Join(dir, "isolators", "network", "cni"), configDir: filepath.Join(dir, "cni-config"),
		pluginDir: binDir, networks: map[string]string{}}
	for _, d := range []string{a.root, a.configDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for file, conf := range networkFiles {
		writeJSON(t, filepath.Join(a.configDir, file), conf)
	}
	// loadNetworkConfigs: every file, parsed as spec::NetworkConfig, kept
	// when its plugin and IPAM plugin are found.
	entries, err := os.ReadDir(a.configDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(a.configDir, e.Name())
		var c struct {
			Name *string `json:"name"`
			Type *string `json:"type"`
			IPAM *struct {
				Type *string `json:"type"`
			} `json:"ipam"`
		}
		b, _ := os.ReadFile(p)
		if err := json.Unmarshal(b, &c); err != nil || c.Name == nil || c.Type == nil || (c.IPAM != nil && c.IPAM.Type == nil) {
			t.Fatalf("Mesos would skip %s: not a spec::NetworkConfig (%v)", p, err)
		}
		if !a.which(*c.Type) || (c.IPAM != nil && !a.which(*c.IPAM.Type)) {
			t.Fatalf("Mesos would skip network %q: plugin %q or its IPAM not in %s", *c.Name, *c.Type, a.pluginDir)
		}
		a.networks[*c.Name] = p
	}
	return a
}

func (a *mesosAgent) which(name string) bool {
	for _, d := range filepath.SplitList(a.pluginDir) {
		if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// mesosContainer is one Mesos container joined to one CNI network.
type mesosContainer struct {
	id, network, ifname string
	netns               *netNS
	nsHandle            string // <root>/<id>/ns
	result              *mesosResult
	stdout              string
}

func mesosContainerID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// isolate does what NetworkCniIsolatorProcess::isolate and attach do for a
// container on one network.
func (a *mesosAgent) isolate(t *testing.T, info mesosNetworkInfo) *mesosContainer {
	t.Helper()
	c, err := a.tryIsolate(t, info)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tryIsolate is isolate that returns the plugin's failure.
func (a *mesosAgent) tryIsolate(t *testing.T, info mesosNetworkInfo) (*mesosContainer, error) {
	t.Helper()
	c := &mesosContainer{id: mesosContainerID(), network: info.Name, ifname: "eth0", netns: newNetNS(t)}
	containerDir := filepath.Join(a.root, c.id)
	if err := os.MkdirAll(containerDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.nsHandle = filepath.Join(containerDir, "ns")
	if err := os.WriteFile(c.nsHandle, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(c.netns.path(), c.nsHandle, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting the netns handle: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(c.nsHandle, syscall.MNT_DETACH) })

	path, ok := a.networks[info.Name]
	if !ok {
		t.Fatalf("unknown CNI network %q", info.Name)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	args, _ := conf["args"].(map[string]any)
	if args == nil {
		args = map[string]any{}
	}
	if _, ok := args["org.apache.mesos"]; ok {
		t.Fatalf("'org.apache.mesos' in 'args' should not be set in CNI network configuration file")
	}
	args["org.apache.mesos"] = map[string]any{"network_info": info}
	conf["args"] = args
	ifDir := filepath.Join(containerDir, info.Name, c.ifname)
	if err := os.MkdirAll(ifDir, 0o755); err != nil {
		t.Fatal(err)
	}
	checkpoint, err := json.Marshal(conf) // stout's stringify: compact, keys sorted, as here
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(containerDir, info.Name, "network.conf"), checkpoint, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := a.plugin(t, "ADD", c)
	if err != nil {
		return c, fmt.Errorf("The CNI plugin failed to attach container %s to CNI network %q: %w", c.id, info.Name, err)
	}
	c.stdout = string(out)
	if c.result, err = parseMesosResult(out); err != nil {
		t.Fatalf("Failed to parse the output of the CNI plugin: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(ifDir, "network.info"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return c, nil
}

// plugin runs the network's plugin with the checkpointed config as stdin
// and Mesos's environment, nothing more.
func (a *mesosAgent) plugin(t *testing.T, command string, c *mesosContainer) ([]byte, error) {
	t.Helper()
	confPath := filepath.Join(a.root, c.id, c.network, "network.conf")
	b, err := os.ReadFile(confPath)
	if err != nil {
		return nil, err
	}
	var conf struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		return nil, err
	}
	stdin, err := os.Open(confPath)
	if err != nil {
		return nil, err
	}
	defer stdin.Close()
	cmd := exec.Command(filepath.Join(a.pluginDir, conf.Type))
	cmd.Stdin = stdin
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + c.id, "CNI_PATH=" + a.pluginDir,
		"CNI_IFNAME=" + c.ifname, "CNI_NETNS=" + c.nsHandle, "PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s: %w: stdout='%s', stderr='%s'", command, err, stdout.String(), stderr.String())
	}
	return stdout.Bytes(), nil
}

// cleanup does what NetworkCniIsolatorProcess::cleanup and detach do.
func (a *mesosAgent) cleanup(t *testing.T, c *mesosContainer) error {
	t.Helper()
	if _, err := a.plugin(t, "DEL", c); err != nil {
		return fmt.Errorf("The CNI plugin failed to detach container %s from network %q: %w", c.id, c.network, err)
	}
	containerDir := filepath.Join(a.root, c.id)
	os.RemoveAll(filepath.Join(containerDir, c.network, c.ifname))
	syscall.Unmount(c.nsHandle, 0)
	return os.RemoveAll(containerDir)
}

func ipOf(t *testing.T, ipc *mesosIPConfig) string {
	t.Helper()
	if ipc == nil || ipc.IP == nil {
		t.Fatal("no address in the result")
	}
	a, _, _ := strings.Cut(*ipc.IP, "/")
	return a
}

// TestMesos: examples/mesos.conf, as Mesos's CNI isolator would use it, with
// port mappings that ovs-bridge publishes itself.
func TestMesos(t *testing.T) {
	requireSandbox(t)
	n := newNode(t)
	dir := suiteDir(t, "mesos")
	dataDir, logFile := filepath.Join(dir, "ipam"), filepath.Join(dir, "plugins.log")
	conf := example(t, "mesos.conf", n, dataDir, logFile)
	if _, ok := conf["plugins"]; ok {
		t.Fatal("examples/mesos.conf is a conflist; Mesos reads single plugin configs")
	}
	if v := conf["cniVersion"]; v != "0.2.0" {
		t.Errorf("examples/mesos.conf: cniVersion %v, want 0.2.0 (the result shape Mesos parses)", v)
	}
	net := conf["name"].(string)
	agent := newMesosAgent(t, dir, map[string]any{"ovsflow.conf": conf})

	web := agent.isolate(t, mesosNetworkInfo{Name: net,
		Labels: map[string]any{"labels": []any{map[string]any{"key": "app", "value": "web"}}},
		PortMappings: []mesosPortMapping{
			{HostPort: hostPortTCP, ContainerPort: ctrPortTCP, Protocol: "tcp"},
			{HostPort: hostPortUDP, ContainerPort: ctrPortUDP, Protocol: "udp"},
			{HostPort: hostPortTCP + 1, ContainerPort: ctrPortTCP}, // protocol is optional in mesos.proto
		}})
	t.Cleanup(func() { agent.plugin(t, "DEL", web) })
	client := agent.isolate(t, mesosNetworkInfo{Name: net, IPAddresses: []map[string]any{{"protocol": "IPv4"}}})
	t.Cleanup(func() { agent.plugin(t, "DEL", client) })
	t.Logf("web %s: %s", web.id, web.stdout)
	if !strings.Contains(web.stdout, `"cniVersion": "0.2.0"`) && !strings.Contains(web.stdout, `"cniVersion":"0.2.0"`) {
		t.Errorf("ADD result is not cniVersion 0.2.0: %s", web.stdout)
	}
	webV4, webV6, clientV4 := ipOf(t, web.result.IP4), ipOf(t, web.result.IP6), ipOf(t, client.result.IP4)
	if web.result.IP4.Gateway == "" {
		t.Errorf("ip4 has no gateway: %s", web.stdout)
	}
	n.assertAttached(t, web.id, "eth0", true)
	n.assertAttached(t, client.id, "eth0", false)
	web.netns.serve(t, "mesos-web", ctrPortTCP, ctrPortUDP)
	client.netns.serve(t, "mesos-client", ctrPortTCP, ctrPortUDP)

	t.Run("host ports", func(t *testing.T) {
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "mesos-web", outsideV4)
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV6, hostPortTCP), "mesos-web", outsideV6)
		expect(t, n.outside.path(), "udp", framework.HP(nodeV4, hostPortUDP), "mesos-web", outsideV4)
		expect(t, n.outside.path(), "udp", framework.HP(nodeV6, hostPortUDP), "mesos-web", outsideV6)
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP+1), "mesos-web", outsideV4)
		expect(t, client.netns.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "mesos-web", "")
		expect(t, web.netns.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "mesos-web", "") // hairpin
		expect(t, "", "tcp", framework.HP(nodeV4, hostPortTCP), "mesos-web", nodeV4)
	})
	t.Run("container to container", func(t *testing.T) {
		expect(t, client.netns.path(), "tcp", framework.HP(webV4, ctrPortTCP), "mesos-web", clientV4)
		expect(t, client.netns.path(), "tcp", framework.HP(webV6, ctrPortTCP), "mesos-web", "")
		expect(t, web.netns.path(), "udp", framework.HP(clientV4, ctrPortUDP), "mesos-client", webV4)
	})

	// A second task asking for the same host port: ADD fails (code 7, naming
	// the holder) and leaves nothing; Mesos then cleans up, which DELs.
	t.Run("host port conflict", func(t *testing.T) {
		c, err := agent.tryIsolate(t, mesosNetworkInfo{Name: net, PortMappings: []mesosPortMapping{
			{HostPort: hostPortTCP, ContainerPort: ctrPortTCP, Protocol: "tcp"}}})
		if err == nil || !strings.Contains(err.Error(), `"code": 7`) && !strings.Contains(err.Error(), `"code":7`) || !strings.Contains(err.Error(), web.id) {
			t.Errorf("ADD of a conflicting host port: got %v, want a code 7 error naming %s", err, web.id)
		}
		n.assertDetached(t, c.id, "eth0")
		if err := agent.cleanup(t, c); err != nil {
			t.Errorf("cleanup after the failed ADD: %v", err)
		}
		if got := allocations(t, dataDir, net); len(got) != 4 {
			t.Errorf("allocations after the failed ADD: %v, want the 4 of web and client", got)
		}
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "mesos-web", outsideV4)
	})

	// DEL with the very same checkpointed config: nothing of web is left.
	if _, err := agent.plugin(t, "DEL", web); err != nil {
		t.Fatal(err)
	}
	n.assertDetached(t, web.id, "eth0")
	expectNoAnswer(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP))
	expectNoAnswer(t, n.outside.path(), "udp", framework.HP(nodeV4, hostPortUDP))
	expectNoAnswer(t, "", "tcp", framework.HP(nodeV4, hostPortTCP))
	expect(t, n.outside.path(), "tcp", framework.HP(clientV4, ctrPortTCP), "mesos-client", outsideV4)
	// An agent that restarts before it removed the container dir DELs again
	// on recovery, with the same checkpoint: that must succeed too, even when
	// the netns handle is no netns any more (a reboot with
	// --network_cni_root_dir_persist: the file is there, its mount is not).
	if err := syscall.Unmount(web.nsHandle, 0); err != nil {
		t.Fatal(err)
	}
	if err := agent.cleanup(t, web); err != nil {
		t.Fatal(err)
	}
	if err := agent.cleanup(t, client); err != nil {
		t.Fatal(err)
	}
	n.assertClean(t, dataDir, net)
	if entries, _ := os.ReadDir(agent.root); len(entries) > 0 {
		t.Errorf("isolator root not empty: %v", entries)
	}

	t.Run("logFile", func(t *testing.T) {
		assertLogFile(t, logFile, map[string]int{"ADD": 1, "DEL": 2}, web.id)
	})
}
