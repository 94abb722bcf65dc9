package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/engine"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/filelock"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kube"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kubebuild"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kubeconf"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/nodes"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/pki"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/topology"
)

// kubeBin is where the containers find the cached build (mounted read-only).
const kubeBin = "/opt/ovsflow-kube/bin"

// containerdMetricsPort: containerd's metrics on each node's IPv4 address
// (its CRI plugin's timings of the sandbox's network set-up and teardown,
// the CNI chain, for bench -kube).
const containerdMetricsPort = 1338

// kubeletSysctls are the kernel-wide sysctls kubelet sets at start (the
// kernel defaults it wants): the kernel is this machine's, so the values
// from before the first kubelet of any harness are put back by the last
// harness down (sysctlsLock).
var kubeletSysctls = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}

// The saved sysctls and, in sysctlsSaved+".d", one file per prefix whose cluster is up.
const (
	sysctlsSaved = "/run/ovsflow-oid-kube.sysctls"
	sysctlsLock  = sysctlsSaved + ".lock"
)

// kubeBuild is what the cluster runs from the cached build.
type kubeBuild struct {
	Prefix, CoreDNS string // the cache (/opt/ovsflow-kube), CoreDNS's version
}

// cache is the harness's cached build (kubebuild).
func (e env) cache() kubebuild.Cache { return kubebuild.FromEnv(e.repo, logf) }

// build runs the cached builds (each under the cache's lock; a build
// already done is not done again): containerd, etcd, Kubernetes, CoreDNS
// with dns, Multus's thin plugin with multus.
func (e env) build(dns, multus bool) (kubeBuild, error) {
	c := e.cache()
	if err := c.Cluster(dns); err != nil {
		return kubeBuild{}, fmt.Errorf("up -kube: the build: %w", err)
	}
	if multus {
		if err := c.MultusPlugin(); err != nil {
			return kubeBuild{}, fmt.Errorf("up -kube: the build of Multus: %w", err)
		}
	}
	v, err := c.CoreDNSVersion()
	return kubeBuild{Prefix: c.Prefix, CoreDNS: v}, err
}

// upKube is `up -kube`: the images, the build, the PKI and every node's
// configs, the nodes' network, the control plane, n nodes on runtime
// (containerd or crio), until every Node is registered with its pod CIDRs;
// it returns the lines up prints (DATAPATH, a NODE line per node,
// KUBECONFIG=).
func (e env) upKube(n int, multus bool, runtime string) ([]string, error) {
	k, err := e.plan.KubeFromEnv(os.Getenv)
	if err != nil {
		return nil, usageError{"up -kube: " + err.Error()}
	}
	if err := e.plan.CheckNodes(n); err != nil {
		return nil, usageError{"up: " + err.Error()}
	}
	if err := k.CheckNodes(n); err != nil {
		return nil, usageError{"up -kube: " + err.Error()}
	}
	if runtime != "containerd" && runtime != "crio" {
		return nil, usageError{"up: -runtime " + runtime + ": want containerd or crio"}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("up -kube: needs root (the cached build, the PKI under " + e.plan.KubeState() + ")")
	}
	eng, err := e.startEngine()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := e.buildImages(eng); err != nil {
		return nil, err
	}
	if err := nodes.Remove(eng, e.plan, false); err != nil && !errors.Is(err, nodes.ErrCgroupsLeft) {
		return nil, err
	}
	b, err := e.build(k.DNS, multus)
	if err != nil {
		return nil, err
	}
	if err := e.kubeConfigs(k, b, n, multus, runtime); err != nil {
		return nil, err
	}
	if err := holdSysctls(e.plan.Prefix); err != nil {
		return nil, err
	}
	if err := e.network(eng); err != nil {
		return nil, err
	}
	t1 := time.Now()
	if err := e.controlPlane(eng, k, b); err != nil {
		return nil, err
	}
	for i := 1; i <= n; i++ {
		// The Node's pod CIDRs are node IPAM's; no routes (the node
		// agent's). IPv6 on in the node's netns ("all": kube-proxy programs
		// no IPv6 rules when it is off there; node-prep.sh turns it off on
		// the uplink again).
		s := nodes.Spec{Name: topology.Node(i), IPv4: e.plan.Node4(i).String(), IPv6: e.plan.Node6(i).String(), Subnet: e.plan.Subnet(i), Volume: true,
			Args: append(e.kubeMounts(b), "-e", "OID_NODE_IPS="+e.plan.Node4(i).String()+","+e.plan.Node6(i).String(),
				"--device", "/dev/kmsg", "--sysctl", "net.ipv6.conf.all.disable_ipv6=0")}
		if r := e.plan.UnderlayRoutes(i); r != "" {
			s.Args = append([]string{"-e", "OID_UNDERLAY_ROUTES=" + r}, s.Args...)
		}
		if err := nodes.Run(eng, e.plan, s); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := 1; i <= n; i++ {
		if err := nodes.WaitReady(ctx, eng, e.plan, topology.Node(i)); err != nil {
			return nil, fmt.Errorf("up failed: %w", err)
		}
	}
	c, err := kube.Client(e.adminKubeconfig())
	if err != nil {
		return nil, err
	}
	if err := kube.WaitNodes(ctx, c, n); err != nil {
		return nil, fmt.Errorf("up -kube failed: %w", err)
	}
	dp, note, subnets := nodes.Datapath(), "", ""
	if dp == "netdev" {
		note = " (no openvswitch kernel module on this host)"
	}
	if e.plan.Subnets > 1 {
		subnets = fmt.Sprintf(" on %d subnets", e.plan.Subnets)
	}
	logf("%d nodes up in %d s (%d s with the images)%s; datapath %s%s", n, int(time.Since(t1).Seconds()), int(time.Since(t0).Seconds()), subnets, dp, note)
	lines := []string{"DATAPATH " + dp}
	for i := 1; i <= n; i++ {
		nd, err := c.CoreV1().Nodes().Get(ctx, topology.Node(i), metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		lines = append(lines, fmt.Sprintf("NODE %s %s %s %s", topology.Node(i), e.plan.Node4(i), e.plan.Node6(i), strings.Join(nd.Spec.PodCIDRs, " ")))
	}
	return append(lines, "KUBECONFIG="+e.adminKubeconfig()), nil
}

func (e env) adminKubeconfig() string {
	return filepath.Join(e.plan.KubeState(), "pki", "admin.kubeconfig")
}

// kubeConfigs writes the cluster's state afresh: the PKI, every node's
// configs, and the marks deploy reads (dns: the cluster DNS goes in;
// multus: Multus goes in front).
func (e env) kubeConfigs(k topology.Kube, b kubeBuild, n int, multus bool, runtime string) error {
	st := e.plan.KubeState()
	if err := os.RemoveAll(st); err != nil {
		return err
	}
	d := filepath.Join(st, "pki")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(st, 0o755); err != nil {
		return err
	}
	marks := map[string]string{}
	if multus {
		marks["multus"] = kubebuild.Multus
	}
	if k.DNS {
		marks["dns"] = b.CoreDNS
	}
	for name, v := range marks {
		if err := os.WriteFile(filepath.Join(st, name), []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	if _, err := pki.NewCA(d, e.plan.Prefix); err != nil {
		return err
	}
	p, err := pki.Open(d)
	if err != nil {
		return err
	}
	cp6 := e.plan.ControlPlane6(0)
	sans := fmt.Sprintf("DNS:cp,IP:127.0.0.1,IP:%s,IP:%s,IP:%s,IP:%s", e.plan.ControlPlane4(), cp6, k.APIService4(), k.APIService6())
	if err := p.ControlPlane(e.plan.Prefix, sans, e.plan.APIServer()); err != nil {
		return err
	}
	// The control plane's command lines, which cp-init.sh sources. The
	// controllers' and the scheduler's API rates are raised from 20 and 50
	// requests per second to 100: at 20, the ReplicaSet controller alone
	// takes 28 s to create 330 pods (its POST and an event each), and a
	// benchmark of the nodes measured the controller's pace instead.
	mask4 := 0
	if k.Mask4Flag() != "" {
		mask4 = k.Mask4
	}
	cp := kubeconf.ControlPlane{Bin: kubeBin, PKI: d, EtcdData: "/var/lib/etcd", Name: "cp", Advertise: e.plan.ControlPlane4().String(),
		ClusterCIDRs: k.ClusterCIDRs(), ServiceCIDRs: k.ServiceCIDRs(), Mask4: mask4, Mask6: k.Mask6, APIQPS: 100}
	if err := os.WriteFile(filepath.Join(st, "control-plane.sh"), cp.Script(), 0o644); err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		me := topology.Node(i)
		if err := p.Node("kubelet-"+me, me, fmt.Sprintf("DNS:%s,IP:%s,IP:%s", me, e.plan.Node4(i), e.plan.Node6(i)), e.plan.APIServer(), e.plan.Prefix); err != nil {
			return err
		}
		// The pods' netns files in the node's own /var/run/netns, as on a
		// node with containerd's defaults (kubeconf).
		if err := writeNodeConfigs(nodeConfigs{Dir: filepath.Join(st, me), Node: me, Runtime: runtime, PKI: d,
			CgroupRoot: "/" + e.plan.Prefix + "/" + me, ClusterCIDRs: k.ClusterCIDRs(), MaxPods: k.MaxPods, ClusterDNS: k.ClusterDNS(),
			Containerd: filepath.Join(b.Prefix, "bin", "containerd"),
			Metrics:    fmt.Sprintf("%s:%d", e.plan.Node4(i), containerdMetricsPort)}); err != nil {
			return fmt.Errorf("up -kube: the configs of %s: %w", me, err)
		}
	}
	// The containers read the keys as root; nothing else on this machine needs them.
	return filepath.Walk(d, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(path, fi.Mode().Perm()&^0o077)
	})
}

// kubeMounts are the docker run arguments of every container of the cluster.
func (e env) kubeMounts(b kubeBuild) []string {
	st := e.plan.KubeState()
	return []string{"-v", filepath.Join(b.Prefix, "bin") + ":" + kubeBin + ":ro", "-v", st + ":" + st + ":ro", "-e", "OID_KUBE=" + st}
}

// controlPlane starts the control plane's container (cp-init.sh: etcd and
// the control plane's three processes; on both subnets' networks with two),
// until the API server is ready.
func (e env) controlPlane(eng *engine.Engine, k topology.Kube, b kubeBuild) error {
	c := e.plan.Container("cp")
	args := append([]string{"create", "--name", c, "--hostname", "cp", "--label", e.plan.Label(),
		"--network", e.plan.Network(), "--ip", e.plan.ControlPlane4().String(), "--ip6", e.plan.ControlPlane6(0).String()},
		e.kubeMounts(b)...)
	args = append(args, "--tmpfs", "/run:rw,exec,size=64m", "--cap-add", "NET_ADMIN",
		"-e", "OID_CP4="+e.plan.ControlPlane4().String(), "-e", "OID_CLUSTER_CIDRS="+strings.Join(k.ClusterCIDRs(), ","),
		"-e", "OID_SERVICE_CIDRS="+strings.Join(k.ServiceCIDRs(), ","),
		"--entrypoint", "/usr/local/sbin/cp-init.sh", images.Node(e.plan))
	if out, err := eng.Command(args...).CombinedOutput(); err != nil {
		return fmt.Errorf("creating the control plane: %w: %s", err, out)
	}
	if e.plan.Subnets > 1 {
		if err := nodes.Connect(eng, e.plan, "cp", 1, topology.ControlPlaneAt); err != nil {
			return err
		}
	}
	if _, err := eng.Run("start", c); err != nil {
		return fmt.Errorf("the control plane did not start: %w", err)
	}
	err := e.kubeWait(e.adminKubeconfig(), "cp", 0, 3*time.Minute)
	if err != nil {
		logs, _ := eng.Command("exec", c, "tail", "-n", "5", "/var/log/oid/etcd.log", "/var/log/oid/kube-apiserver.log").CombinedOutput()
		return fmt.Errorf("the API server %s did not become ready: %w\n%s", e.plan.APIServer(), err, logs)
	}
	return nil
}

// withSysctlsLock runs f under the lock of the saved sysctls (two
// harnesses of other prefixes may bring clusters up and down at once).
func withSysctlsLock(f func() error) error { return filelock.With(sysctlsLock, f) }

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// holdSysctls saves kubelet's sysctls unless a cluster up already did,
// and marks prefix's cluster as up.
func holdSysctls(prefix string) error {
	return withSysctlsLock(func() error {
		if _, err := os.Stat(sysctlsSaved); errors.Is(err, os.ErrNotExist) {
			var b bytes.Buffer
			for _, s := range kubeletSysctls {
				v, err := os.ReadFile(sysctlPath(s))
				if err != nil {
					return err
				}
				fmt.Fprintf(&b, "%s=%s\n", s, bytes.TrimSpace(v))
			}
			if err := os.WriteFile(sysctlsSaved, b.Bytes(), 0o644); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(sysctlsSaved+".d", 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(sysctlsSaved+".d", prefix), nil, 0o644)
	})
}

// releaseSysctls unmarks prefix's cluster; the last one down puts the
// saved sysctls back.
func releaseSysctls(prefix string) error {
	return withSysctlsLock(func() error {
		if err := os.Remove(filepath.Join(sysctlsSaved+".d", prefix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if left, _ := os.ReadDir(sysctlsSaved + ".d"); len(left) > 0 {
			return nil
		}
		f, err := os.Open(sysctlsSaved)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if name, v, ok := strings.Cut(sc.Text(), "="); ok {
				if err := os.WriteFile(sysctlPath(name), []byte(v), 0o644); err != nil {
					logf("warning: putting %s back to %s: %v", name, v, err)
				}
			}
		}
		if err := sc.Err(); err != nil {
			return err
		}
		if err := os.RemoveAll(sysctlsSaved + ".d"); err != nil {
			return err
		}
		return os.Remove(sysctlsSaved)
	})
}

// downKube removes what up -kube made on this machine besides the containers.
func (e env) downKube() error {
	if os.Geteuid() != 0 {
		return nil // (up -kube needs root: nothing of it is here)
	}
	if err := os.RemoveAll(e.plan.KubeState()); err != nil {
		return err
	}
	return releaseSysctls(e.plan.Prefix)
}

// cmdBuild: build: every cached build of the Kubernetes cluster (with the
// cluster DNS and Multus) and of its conformance run, each unless there
// (CI starts it first, beside the suites that need none of it; a run that
// needs the build waits for its lock).
func cmdBuild(e env, args []string) error {
	if err := parse(flags("build"), args, 0); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("build: needs root (the cache under " + e.cache().Prefix + ")")
	}
	if _, err := e.build(true, true); err != nil {
		return err
	}
	_, err := e.conformanceBuild()
	return err
}

// cmdKubectl: kubectl ARGS...: the cached kubectl against the cluster, as
// its admin.
func cmdKubectl(e env, args []string) error {
	kc := e.adminKubeconfig()
	if _, err := os.Stat(kc); err != nil {
		return errors.New("no cluster (up -kube first)")
	}
	bin := e.cache().Bin("kubectl")
	return syscall.Exec(bin, append([]string{bin, "--kubeconfig", kc}, args...), os.Environ())
}
