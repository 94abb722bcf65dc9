package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/kubeconf"
)

// cmdNodeConfigs: node-configs -dir DIR -node NAME -runtime containerd|crio
// -pki DIR -cgroup-root PATH -cluster-cidrs C[,C] [-max-pods N]
// [-cluster-dns A[,A]] [-containerd BIN] [-metrics HOST:PORT]: a Kubernetes
// node's configs into DIR: kubelet.yaml, proxy.yaml, and containerd.toml
// (from the binary's defaults) or crio.conf (a node whose dir holds
// crio.conf boots CRI-O). The serving cert is PKI/kubelet-NAME.*,
// kube-proxy's kubeconfig PKI/proxy.kubeconfig.
func cmdNodeConfigs(_ env, args []string) error {
	fs := flags("node-configs")
	dir := fs.String("dir", "", "")
	node := fs.String("node", "", "")
	runtime := fs.String("runtime", "containerd", "")
	pkiDir := fs.String("pki", "", "")
	cgroupRoot := fs.String("cgroup-root", "", "")
	cidrs := fs.String("cluster-cidrs", "", "")
	maxPods := fs.Int("max-pods", 0, "")
	dns := fs.String("cluster-dns", "", "")
	containerd := fs.String("containerd", "/opt/ovsflow-kube/bin/containerd", "")
	metrics := fs.String("metrics", "", "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	for name, v := range map[string]string{"dir": *dir, "node": *node, "pki": *pkiDir, "cgroup-root": *cgroupRoot, "cluster-cidrs": *cidrs} {
		if v == "" {
			return usageError{"node-configs: -" + name + " is required"}
		}
	}
	return writeNodeConfigs(nodeConfigs{Dir: *dir, Node: *node, Runtime: *runtime, PKI: *pkiDir, CgroupRoot: *cgroupRoot,
		ClusterCIDRs: list(*cidrs), MaxPods: *maxPods, ClusterDNS: list(*dns), Containerd: *containerd, Metrics: *metrics})
}

// nodeConfigs is what a Kubernetes node's configs are written from.
type nodeConfigs struct {
	Dir, Node, Runtime, PKI, CgroupRoot string
	ClusterCIDRs, ClusterDNS            []string
	MaxPods                             int
	Containerd, Metrics                 string // containerd's binary (its defaults), its metrics' HOST:PORT
}

// writeNodeConfigs writes the node's configs into c.Dir (cmdNodeConfigs).
func writeNodeConfigs(c nodeConfigs) error {
	files := map[string][]byte{}
	var sock string
	var err error
	switch c.Runtime {
	case "containerd":
		sock = "/run/containerd/containerd.sock"
		files["containerd.toml"], err = kubeconf.ContainerdConfig(c.Containerd, kubeconf.Containerd{
			Root: "/var/lib/containerd", State: "/run/containerd", Socket: sock, Metrics: c.Metrics})
	case "crio":
		sock = "/var/run/crio/crio.sock"
		files["crio.conf"], err = kubeconf.CRIOConfig()
	default:
		return usageError{"node-configs: -runtime " + c.Runtime + ": want containerd or crio"}
	}
	if err != nil {
		return err
	}
	if files["kubelet.yaml"], err = kubeconf.KubeletConfig(kubeconf.Kubelet{PKI: c.PKI, Cert: "kubelet-" + c.Node, Runtime: sock,
		CgroupRoot: c.CgroupRoot, MaxPods: c.MaxPods, ClusterDNS: c.ClusterDNS}); err != nil {
		return err
	}
	if files["proxy.yaml"], err = kubeconf.ProxyConfig(filepath.Join(c.PKI, "proxy.kubeconfig"), c.Node, c.ClusterCIDRs); err != nil {
		return err
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), b, 0o644); err != nil {
			return fmt.Errorf("node-configs: %w", err)
		}
	}
	return nil
}

// list splits a comma-separated list ("": none).
func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
