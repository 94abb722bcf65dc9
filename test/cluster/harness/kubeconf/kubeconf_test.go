package kubeconf

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	proxy "k8s.io/kube-proxy/config/v1alpha1"
	kubelet "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

func TestKubeletConfigDecodesAsKubeletReadsIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    Kubelet
	}{
		{"dns and max pods", Kubelet{PKI: "/run/p/pki", Cert: "kubelet-n1", Runtime: "/run/containerd/containerd.sock",
			CgroupRoot: "/p/n1", MaxPods: 120, ClusterDNS: []string{"203.0.113.202", "2001:db8:10:ffff::a"}}},
		{"defaults", Kubelet{PKI: "/run/p/pki", Cert: "kubelet-n2", Runtime: "/var/run/crio/crio.sock", CgroupRoot: "/p/n2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := KubeletConfig(tc.k)
			if err != nil {
				t.Fatal(err)
			}
			var c kubelet.KubeletConfiguration
			if err := yaml.UnmarshalStrict(b, &c); err != nil {
				t.Fatalf("%v:\n%s", err, b)
			}
			if c.Kind != "KubeletConfiguration" || c.APIVersion != "kubelet.config.k8s.io/v1beta1" {
				t.Errorf("type %q %q", c.APIVersion, c.Kind)
			}
			if c.ContainerRuntimeEndpoint != "unix://"+tc.k.Runtime || c.TLSCertFile != tc.k.PKI+"/"+tc.k.Cert+".crt" ||
				c.Authentication.X509.ClientCAFile != tc.k.PKI+"/ca.crt" || c.CgroupRoot != tc.k.CgroupRoot {
				t.Errorf("paths: %+v", c)
			}
			if c.Authentication.Anonymous.Enabled == nil || *c.Authentication.Anonymous.Enabled || c.FailSwapOn == nil || *c.FailSwapOn ||
				c.FailCgroupV1 == nil || *c.FailCgroupV1 || c.ReadOnlyPort != 0 || c.SyncFrequency.Duration != 10*time.Second {
				t.Errorf("settings: %s", b)
			}
			if int(c.MaxPods) != tc.k.MaxPods || strings.Join(c.ClusterDNS, ",") != strings.Join(tc.k.ClusterDNS, ",") {
				t.Errorf("maxPods %d clusterDNS %v", c.MaxPods, c.ClusterDNS)
			}
			if (c.ClusterDomain == "cluster.local") != (len(tc.k.ClusterDNS) > 0) {
				t.Errorf("clusterDomain %q with clusterDNS %v", c.ClusterDomain, c.ClusterDNS)
			}
			if tc.k.MaxPods == 0 && bytes.Contains(b, []byte("maxPods")) {
				t.Errorf("maxPods written without one: %s", b)
			}
		})
	}
}

func TestProxyConfigDecodesAsKubeProxyReadsIt(t *testing.T) {
	b, err := ProxyConfig("/run/p/pki/proxy.kubeconfig", "n1", []string{"198.51.100.0/24", "2001:db8:10:100::/56"})
	if err != nil {
		t.Fatal(err)
	}
	var c proxy.KubeProxyConfiguration
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if c.Mode != "iptables" || c.HostnameOverride != "n1" || c.ClusterCIDR != "198.51.100.0/24,2001:db8:10:100::/56" ||
		c.ClientConnection.Kubeconfig != "/run/p/pki/proxy.kubeconfig" {
		t.Errorf("%s", b)
	}
	ct := c.Conntrack
	if ct.MaxPerCore == nil || *ct.MaxPerCore != 0 || ct.Min == nil || *ct.Min != 0 ||
		ct.TCPEstablishedTimeout == nil || ct.TCPEstablishedTimeout.Duration != 0 || ct.TCPCloseWaitTimeout == nil {
		t.Errorf("conntrack not left alone (explicit zeros): %s", b)
	}
	if c.IPTables.LocalhostNodePorts == nil || *c.IPTables.LocalhostNodePorts {
		t.Errorf("localhostNodePorts: %s", b)
	}
}

// testdata/containerd-default.toml is `containerd config default` of the
// harness's containerd (kubebuild.Containerd, v2.4.2).
func TestEditContainerdSetsTheNodesKeysOnly(t *testing.T) {
	def, err := os.ReadFile("testdata/containerd-default.toml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := EditContainerd(def, Containerd{Root: "/var/lib/containerd", State: "/run/containerd",
		Socket: "/run/containerd/containerd.sock", Metrics: "203.0.113.162:1338"})
	if err != nil {
		t.Fatal(err)
	}
	var got, was map[string]any
	if err := toml.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	toml.Unmarshal(def, &was)
	at := func(m map[string]any, path ...string) any {
		var v any = m
		for _, k := range path {
			mm, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = mm[k]
		}
		return v
	}
	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{"plugins", "io.containerd.server.v1.ttrpc", "address"}, "/run/containerd/containerd.sock.ttrpc"},
		{[]string{"plugins", "io.containerd.server.v1.metrics", "address"}, "203.0.113.162:1338"},
		{[]string{"imports"}, []any{}},
		{[]string{"plugins", "io.containerd.cri.v1.images", "pinned_images", "sandbox"}, PauseImage},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "restrict_oom_score_adj"}, true},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "netns_mounts_under_state_dir"}, false},
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "cni", "max_conf_num"}, int64(1)},
		{[]string{"plugins", "io.containerd.grpc.v1.cri", "stream_server_address"}, "127.0.0.1"},
		{[]string{"plugins", "io.containerd.nri.v1.nri", "disable"}, true},
		// a default not the harness's: as the binary wrote it
		{[]string{"plugins", "io.containerd.cri.v1.runtime", "cni", "bin_dirs"}, at(was, "plugins", "io.containerd.cri.v1.runtime", "cni", "bin_dirs")},
		{[]string{"version"}, at(was, "version")},
	} {
		if g := at(got, c.path...); !equal(g, c.want) {
			t.Errorf("%s = %#v, want %#v", strings.Join(c.path, "."), g, c.want)
		}
	}
	// A containerd whose defaults lack a key the harness sets: an error, not a dead setting.
	moved := bytes.Replace(def, []byte("\n      max_conf_num ="), []byte("\n      max_conf_count ="), 1)
	if _, err := EditContainerd(moved, Containerd{}); err == nil || !strings.Contains(err.Error(), "max_conf_num") {
		t.Errorf("a moved key: %v, want an error naming it", err)
	}
}

func equal(a, b any) bool {
	x, _ := toml.Marshal(map[string]any{"v": a})
	y, _ := toml.Marshal(map[string]any{"v": b})
	return a != nil && bytes.Equal(x, y)
}

func TestCRIOConfigAsCRIOReadsIt(t *testing.T) {
	b, err := CRIOConfig()
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		CRIO struct {
			Root    string `toml:"root"`
			Runtime struct {
				Default  string `toml:"default_runtime"`
				Runtimes map[string]struct {
					Path    string `toml:"runtime_path"`
					Monitor string `toml:"monitor_path"`
				} `toml:"runtimes"`
			} `toml:"runtime"`
			Image struct {
				Pause string `toml:"pause_image"`
			} `toml:"image"`
			Network struct {
				Grace string   `toml:"cni_status_grace_period"`
				Dirs  []string `toml:"plugin_dirs"`
			} `toml:"network"`
			NRI struct {
				Enable *bool `toml:"enable_nri"`
			} `toml:"nri"`
		} `toml:"crio"`
	}
	if err := toml.Unmarshal(b, &c); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	r := c.CRIO.Runtime.Runtimes[c.CRIO.Runtime.Default]
	if r.Path != "/usr/local/sbin/oid-runc" || r.Monitor != "/usr/bin/conmon" || c.CRIO.Image.Pause != PauseImage ||
		c.CRIO.Network.Grace != "10s" || len(c.CRIO.Network.Dirs) != 1 || c.CRIO.NRI.Enable == nil || *c.CRIO.NRI.Enable {
		t.Errorf("%+v:\n%s", c, b)
	}
}
