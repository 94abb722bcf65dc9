// Package kubeconf makes a harness node's configs: kubelet's and
// kube-proxy's (their own API types, as YAML: what the components decode),
// and its runtime's: containerd's (its own default config, as the binary
// prints it, with the harness's settings in place) or CRI-O's (TOML). The
// values are the plan's; writing them is the caller's.
package kubeconf

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbase "k8s.io/component-base/config/v1alpha1"
	proxy "k8s.io/kube-proxy/config/v1alpha1"
	kubelet "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// PauseImage is the sandbox image of every node's runtime: the runtime
// suites' pause (hack/install-runtimes.sh builds its tar; no registry).
const PauseImage = "rt.local/ovsflow-pause:1"

// Kubelet is what a node's kubelet config says of that node.
type Kubelet struct {
	PKI        string   // the directory of ca.crt and the serving cert
	Cert       string   // the serving cert's name in PKI (NAME.crt, NAME.key)
	Runtime    string   // the CRI socket's path
	CgroupRoot string   // the pods' cgroups (/PREFIX/NODE)
	MaxPods    int      // 0: kubelet's default (110)
	ClusterDNS []string // the cluster DNS Service's addresses (none: no clusterDNS)
}

// KubeletConfig is the kubelet config that works on a harness node:
// cgroup v1 allowed, cgroupfs, no swap check, eviction thresholds a shared
// disk and memory do not trip, no read-only port, healthz on the loopback;
// with ClusterDNS, pods of dnsPolicy ClusterFirst get it as nameservers
// and cluster.local as their domain (without, kubelet warns
// MissingClusterDNS and gives them the node's resolv.conf).
func KubeletConfig(k Kubelet) ([]byte, error) {
	c := kubelet.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Authentication: kubelet.KubeletAuthentication{
			Anonymous: kubelet.KubeletAnonymousAuthentication{Enabled: ptr(false)},
			Webhook:   kubelet.KubeletWebhookAuthentication{Enabled: ptr(true)},
			X509:      kubelet.KubeletX509Authentication{ClientCAFile: k.PKI + "/ca.crt"},
		},
		Authorization:               kubelet.KubeletAuthorization{Mode: kubelet.KubeletAuthorizationModeWebhook},
		TLSCertFile:                 k.PKI + "/" + k.Cert + ".crt",
		TLSPrivateKeyFile:           k.PKI + "/" + k.Cert + ".key",
		ContainerRuntimeEndpoint:    "unix://" + k.Runtime,
		CgroupDriver:                "cgroupfs",
		CgroupRoot:                  k.CgroupRoot,
		FailCgroupV1:                ptr(false),
		FailSwapOn:                  ptr(false),
		HealthzBindAddress:          "127.0.0.1",
		ResolverConfig:              ptr("/etc/resolv.conf"),
		ImageGCHighThresholdPercent: ptr(int32(100)),
		EvictionHard:                map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
		SyncFrequency:               metav1.Duration{Duration: 10 * time.Second},
		MaxPods:                     int32(k.MaxPods),
	}
	if len(k.ClusterDNS) > 0 {
		c.ClusterDomain, c.ClusterDNS = "cluster.local", k.ClusterDNS
	}
	return yaml.Marshal(c)
}

// ProxyConfig is kube-proxy's config on a harness node: iptables mode, its
// endpoints on the loopback, the kernel-wide conntrack settings left
// alone (the kernel is the machine's), no NodePorts on 127.0.0.1.
func ProxyConfig(kubeconfig, node string, clusterCIDRs []string) ([]byte, error) {
	zero := &metav1.Duration{}
	c := proxy.KubeProxyConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration"},
		ClientConnection:   componentbase.ClientConnectionConfiguration{Kubeconfig: kubeconfig},
		HostnameOverride:   node,
		Mode:               "iptables",
		ClusterCIDR:        strings.Join(clusterCIDRs, ","),
		HealthzBindAddress: "127.0.0.1:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		IPTables:           proxy.KubeProxyIPTablesConfiguration{LocalhostNodePorts: ptr(false)},
		Conntrack: proxy.KubeProxyConntrackConfiguration{MaxPerCore: ptr(int32(0)), Min: ptr(int32(0)),
			TCPEstablishedTimeout: zero, TCPCloseWaitTimeout: zero},
	}
	return yaml.Marshal(c)
}

// Containerd is what a node's containerd config says of that node.
type Containerd struct {
	Root, State string // containerd's root and state dirs
	Socket      string // the gRPC socket (the ttrpc one beside it, .ttrpc)
	Metrics     string // HOST:PORT of its Prometheus metrics ("": none)
	// NetnsUnderState: the pods' netns files in containerd's state dir
	// (off this machine's /run/netns); false: /var/run/netns, containerd's
	// default, which the DaemonSet's agent mounts (its orphan sweep
	// replays a DEL only once the netns is gone).
	NetnsUnderState bool
}

// ContainerdConfig is the default config of the containerd binary at bin
// (`containerd config default`), with what a harness node needs: no
// imports, its dirs and sockets, its metrics, the pause image imported from
// a tar, restrict_oom_score_adj (no CAP_SYS_RESOURCE in the bounding set),
// one conflist and containerd's own loopback, the streaming server on the
// loopback, no NRI. A key the binary's defaults lack is an error: a
// containerd whose config moved is not silently given a dead setting.
func ContainerdConfig(bin string, c Containerd) ([]byte, error) {
	def, err := exec.Command(bin, "config", "default").Output()
	if err != nil {
		return nil, fmt.Errorf("%s config default: %w", bin, err)
	}
	return EditContainerd(def, c)
}

// EditContainerd puts a node's settings into containerd's default config.
func EditContainerd(def []byte, c Containerd) ([]byte, error) {
	var m map[string]any
	if err := toml.Unmarshal(def, &m); err != nil {
		return nil, fmt.Errorf("containerd's default config: %w", err)
	}
	const cri, images, runtime = "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime"
	sets := []struct {
		path []string
		v    any
	}{
		{[]string{"imports"}, []string{}},
		{[]string{"root"}, c.Root},
		{[]string{"state"}, c.State},
		{[]string{"plugins", "io.containerd.server.v1.grpc", "address"}, c.Socket},
		{[]string{"plugins", "io.containerd.server.v1.ttrpc", "address"}, c.Socket + ".ttrpc"},
		{[]string{"plugins", "io.containerd.server.v1.metrics", "address"}, c.Metrics},
		{[]string{"plugins", images, "pinned_images", "sandbox"}, PauseImage},
		{[]string{"plugins", runtime, "restrict_oom_score_adj"}, true},
		{[]string{"plugins", runtime, "netns_mounts_under_state_dir"}, c.NetnsUnderState},
		{[]string{"plugins", runtime, "cni", "use_internal_loopback"}, true},
		{[]string{"plugins", runtime, "cni", "max_conf_num"}, 1},
		{[]string{"plugins", cri, "stream_server_address"}, "127.0.0.1"},
		{[]string{"plugins", "io.containerd.nri.v1.nri", "disable"}, true},
	}
	for _, s := range sets {
		if err := set(m, s.path, s.v); err != nil {
			return nil, fmt.Errorf("containerd's default config: %w", err)
		}
	}
	var b bytes.Buffer
	enc := toml.NewEncoder(&b)
	enc.SetIndentTables(true)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// set puts v at path in m, where the last key must already be (or its
// table, for a top-level key).
func set(m map[string]any, path []string, v any) error {
	for i, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			return fmt.Errorf("no table %s", strings.Join(path[:i+1], "."))
		}
		m = next
	}
	last := path[len(path)-1]
	if _, ok := m[last]; !ok && len(path) > 1 {
		return fmt.Errorf("no key %s", strings.Join(path, "."))
	}
	m[last] = v
	return nil
}

// CRIOConfig is CRI-O's config for a harness node, on its default paths
// (socket /var/run/crio/crio.sock, the pods' netns files in /var/run/netns,
// where the DaemonSet's agent looks): overlay storage on the node's volume
// (/var/lib/containers, which podman fills: CRI-O pulls only from
// registries, and none is reachable), cgroupfs, runc (Debian's, through
// oid-runc: a pod's oom_score_adj no lower than the node's, as containerd's
// restrict_oom_score_adj) and conmon of Debian, pinns of
// hack/install-runtimes.sh in /usr/local/bin, the pause image imported from a
// tar, the node's CNI dirs, STATUS every 5 s (cni_status_grace_period: by
// default CRI-O asks STATUS only at its start, and a node whose
// ovs-vswitchd stopped would stay Ready; with it, the runtime's
// NetworkReady is false 10 s after STATUS began to fail, as on
// containerd), the streaming server on the loopback, no NRI.
func CRIOConfig() ([]byte, error) {
	type runtime struct {
		Path       string   `toml:"runtime_path"`
		Type       string   `toml:"runtime_type"`
		Monitor    string   `toml:"monitor_path"`
		MonitorCg  string   `toml:"monitor_cgroup"`
		MonitorEnv []string `toml:"monitor_env"`
	}
	c := map[string]any{"crio": map[string]any{
		"root": "/var/lib/containers/storage", "runroot": "/run/containers/storage", "storage_driver": "overlay",
		"api": map[string]any{"listen": "/var/run/crio/crio.sock", "stream_address": "127.0.0.1", "stream_port": "0"},
		"runtime": map[string]any{
			"default_runtime": "runc", "cgroup_manager": "cgroupfs", "pinns_path": "/usr/local/bin/pinns",
			"hooks_dir": []string{}, "irqbalance_config_restore_file": "disable",
			"runtimes": map[string]any{"runc": runtime{Path: "/usr/local/sbin/oid-runc", Type: "oci", Monitor: "/usr/bin/conmon",
				MonitorCg: "pod", MonitorEnv: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}},
		},
		"image":   map[string]any{"pause_image": PauseImage, "pause_command": "/pause"},
		"network": map[string]any{"network_dir": "/etc/cni/net.d", "plugin_dirs": []string{"/opt/cni/bin"}, "cni_status_grace_period": "10s"},
		"nri":     map[string]any{"enable_nri": false},
	}}
	return toml.Marshal(c)
}

func ptr[T any](v T) *T { return &v }
