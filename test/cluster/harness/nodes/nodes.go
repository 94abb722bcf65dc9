// Package nodes makes and removes the harness's nodes: Docker containers of
// the node image on one Docker network, each running Open vSwitch,
// containerd and the plugins (hack/ovs-in-docker/node-init.sh), found again
// by the harness's label.
package nodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/engine"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/topology"
)

// Datapath is the datapath the nodes' bridges use: the kernel's when this
// host has the openvswitch module, else the userspace one.
func Datapath() string {
	if _, err := os.Stat("/sys/module/openvswitch"); err == nil {
		return "system"
	}
	return "netdev"
}

// List is the names of the harness's nodes without the prefix ("cp", "n1", ...), sorted:
// its containers but the router.
func List(e *engine.Engine, p topology.Plan) ([]string, error) {
	all, err := e.List("ps", "-a", "--filter", "label="+p.Label(), "--format", "{{.Names}}")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range all {
		if n = strings.TrimPrefix(n, p.Prefix+"-"); n != Router {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Router is the name of the router between two subnets (a container of
// the harness, no node).
const Router = "router"

// CreateNetwork makes the nodes' Docker network (with two subnets, both
// networks and the router between them): dual stack, no masquerade, its
// Linux bridge named after the prefix (checksums computed on the host's
// side: the nodes' userspace conntrack drops packets left to offload).
func CreateNetwork(e *engine.Engine, p topology.Plan, logf func(string, ...any)) error {
	for s := range p.Subnets {
		n4, n6 := p.Nets(s)
		if _, err := e.Run("network", "create", "--label", p.Label(), "--driver", "bridge",
			"--subnet", n4.String(), "--gateway", p.SubnetAt4(s, 1).String(), "--ipv6", "--subnet", n6.String(), "--gateway", p.SubnetAt6(s, 1).String(),
			"-o", "com.docker.network.bridge.enable_ip_masquerade=false", "-o", "com.docker.network.bridge.name="+p.BridgeNameOf(s),
			p.NetworkOf(s)); err != nil {
			return err
		}
		if err := ethtoolTxOff(p.BridgeNameOf(s)); err != nil {
			logf("warning: could not turn TX checksum offload off on %s: the nodes may drop this host's connections to host ports (%v)", p.BridgeNameOf(s), err)
		}
	}
	if p.Subnets == 2 {
		return runRouter(e, p)
	}
	return nil
}

// runRouter starts the router between the two subnets: a container of the
// node image on both networks, forwarding both families, its interfaces'
// checksums computed in software (what it forwards reaches the nodes'
// userspace conntrack complete).
func runRouter(e *engine.Engine, p topology.Plan) error {
	c := p.Container(Router)
	if _, err := e.Run("create", "--name", c, "--hostname", "router", "--label", p.Label(),
		"--network", p.NetworkOf(0), "--ip", p.SubnetAt4(0, topology.RouterAt).String(), "--ip6", p.Router6(0).String(),
		"--cap-add", "NET_ADMIN", "--sysctl", "net.ipv4.ip_forward=1", "--sysctl", "net.ipv6.conf.all.forwarding=1",
		"--entrypoint", "/bin/sh", images.Node(p),
		"-c", `for i in /sys/class/net/eth*; do ethtool -K "${i##*/}" tx off >/dev/null; done; trap 'exit 0' TERM; sleep infinity & wait`); err != nil {
		return err
	}
	if err := Connect(e, p, Router, 1, topology.RouterAt); err != nil {
		return err
	}
	_, err := e.Run("start", c)
	return err
}

// Connect attaches container name (created, not started) to subnet s's
// network at its address k (and ::fd or ::fe for the router's and the
// control plane's k).
func Connect(e *engine.Engine, p topology.Plan, name string, s, k int) error {
	a6 := p.SubnetAt6(s, k)
	switch k {
	case topology.RouterAt:
		a6 = p.Router6(s)
	case topology.ControlPlaneAt:
		a6 = p.ControlPlane6(s)
	}
	_, err := e.Run("network", "connect", "--ip", p.SubnetAt4(s, k).String(), "--ip6", a6.String(), p.NetworkOf(s), p.Container(name))
	return err
}

// Spec is how one container of the harness is run.
type Spec struct {
	Name     string   // "n1"
	IPv4     string   // its addresses on the nodes' network
	IPv6     string   //
	Hostname string   // its hostname: Name when empty
	Args     []string // docker run's arguments before the image, beside the harness's own
	Subnet   int      // the subnet whose network it is on (topology.Plan.Subnet)
	Volume   bool     // volumes of its own at /var/lib/containerd and /var/lib/containers (a node's images and snapshots, containerd's or CRI-O's: overlayfs needs a directory not on the container's own overlay)
}

// RunNode starts node i of the plan without Kubernetes: its pod ranges and
// routes to the other nodes' (n nodes) in its environment, for node-init.sh.
func RunNode(e *engine.Engine, p topology.Plan, i, n int) error {
	return Run(e, p, Spec{Name: topology.Node(i), IPv4: p.Node4(i).String(), IPv6: p.Node6(i).String(), Subnet: p.Subnet(i), Volume: true,
		Args: []string{"-e", fmt.Sprintf("OVSFLOW_POD_CIDRS=%s,%s", p.Pod4Of(i), p.Pod6Of(i)), "-e", "OID_ROUTES=" + p.Routes(i, n)}})
}

// Run starts a node container (the node image, node-init.sh; privileged
// enough for Open vSwitch, containerd and kubelet, the host's cgroups).
func Run(e *engine.Engine, p topology.Plan, s Spec) error {
	c := p.Container(s.Name)
	if s.Hostname == "" {
		s.Hostname = s.Name
	}
	args := []string{"run", "-d", "--name", c, "--hostname", s.Hostname, "--label", p.Label(),
		"--network", p.NetworkOf(s.Subnet), "--ip", s.IPv4, "--ip6", s.IPv6,
		"--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--device", "/dev/net/tun",
		"--security-opt", "apparmor=unconfined", "--security-opt", "seccomp=unconfined", "--security-opt", "systempaths=unconfined",
		"--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
		"--tmpfs", "/run:rw,exec,size=256m", "--tmpfs", "/tmp:rw,exec,size=256m"}
	if s.Volume {
		for _, dir := range []string{"containerd", "containers"} {
			vol := c + "-" + dir
			if _, err := e.Run("volume", "create", "--label", p.Label(), vol); err != nil {
				return err
			}
			args = append(args, "-v", vol+":/var/lib/"+dir)
		}
	}
	args = append(args, s.Args...)
	args = append(args, "-e", "DATAPATH="+Datapath(), "-e", "OID_CGROUP=/"+p.Prefix, images.Node(p))
	_, err := e.Run(args...)
	return err
}

// WaitReady waits until node-init.sh of the node says it is ready, the
// container stops, or ctx ends.
func WaitReady(ctx context.Context, e *engine.Engine, p topology.Plan, node string) error {
	c := p.Container(node)
	for {
		if _, err := e.Run("exec", c, "test", "-f", "/run/oid/ready"); err == nil {
			return nil
		}
		running, _ := e.Run("inspect", "-f", "{{.State.Running}}", c)
		if running != "true" {
			break
		}
		select {
		case <-ctx.Done():
			logs, _ := e.Command("logs", "--tail", "30", c).CombinedOutput()
			return fmt.Errorf("node %s did not become ready: %w\n%s", node, ctx.Err(), logs)
		case <-time.After(300 * time.Millisecond):
		}
	}
	logs, _ := e.Command("logs", "--tail", "30", c).CombinedOutput()
	return fmt.Errorf("node %s stopped before it was ready:\n%s", node, logs)
}

// Remove removes the harness's containers, network and volumes (and, with
// images, its images), then the cgroups the nodes' containerd made under
// /PREFIX on this host. It removes nothing without the harness's label.
func Remove(e *engine.Engine, p topology.Plan, withImages bool) error {
	for _, kind := range [][]string{{"ps", "-aq"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		ids, err := e.List(append(kind, "--filter", "label="+p.Label())...)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			continue
		}
		rm := map[string][]string{"ps": {"rm", "-f"}, "network": {"network", "rm"}, "volume": {"volume", "rm"}}[kind[0]]
		if _, err := e.Run(append(rm, ids...)...); err != nil {
			return err
		}
	}
	if withImages {
		ids, err := e.List("images", "-q", "--filter", "label="+p.Label())
		if err != nil {
			return err
		}
		if err := removeImages(e, uniq(ids)); err != nil {
			return err
		}
	}
	return removeCgroups(p.Prefix)
}

// removeCgroups removes /sys/fs/cgroup[/*]/PREFIX, deepest first; the pods'
// processes may still be exiting, so it tries again for a few seconds.
func removeCgroups(prefix string) error {
	var left []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		left = left[:0]
		roots, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", prefix))
		roots = append(roots, filepath.Join("/sys/fs/cgroup", prefix))
		for _, r := range roots {
			var dirs []string
			_ = filepath.WalkDir(r, func(path string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			for j := len(dirs) - 1; j >= 0; j-- {
				_ = os.Remove(dirs[j])
			}
			if _, err := os.Stat(r); err == nil {
				left = append(left, r)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond) // the pods' processes are still exiting: nothing to wait on but the directory
	}
	if len(left) > 0 {
		return fmt.Errorf("%w: %s", ErrCgroupsLeft, strings.Join(left, " "))
	}
	return nil
}

// ErrCgroupsLeft: Remove removed everything but cgroups with processes still in them.
var ErrCgroupsLeft = errors.New("cgroups left (processes still in them)")

// removeImages removes the images, children before the images they were
// built on (docker refuses a parent first, even with -f, and lists images
// made in the same second in no particular order): each pass removes what
// it can, until a pass removes nothing.
func removeImages(e *engine.Engine, ids []string) error {
	var last error
	for len(ids) > 0 {
		var left []string
		for _, id := range ids {
			if _, err := e.Run("rmi", "-f", id); err != nil {
				left, last = append(left, id), err
			}
		}
		if len(left) == len(ids) {
			return last
		}
		ids = left
	}
	return nil
}

// uniq is s without repeats, in its order.
func uniq(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
