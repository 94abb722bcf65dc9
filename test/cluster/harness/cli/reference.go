package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/engine"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kube"
)

// The reference chain's conflist, a template for ovsflow-conflist (which
// puts one host-local range per pod CIDR of the node, and the routes of its
// families): containernetworking/plugins' bridge (a gateway, masquerade,
// hairpin), host-local and portmap (SNAT), iptables backends.
const referenceTemplate = `{
  "cniVersion": "1.0.0",
  "name": "reference",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "ipMasqBackend": "iptables", "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "/var/lib/cni/networks",
              "ranges": [], "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}},
    {"type": "portmap", "backend": "iptables", "snat": true, "capabilities": {"portMappings": true}}
  ]
}`

// referencePlugins are the reference chain's binaries, from -plugins.
var referencePlugins = []string{"bridge", "host-local", "portmap"}

// The DaemonSet, and the nodeSelector that takes it off every node.
const (
	dsNamespace, dsName = "kube-system", "ovsflow-cni"
	dsLabel             = "app.kubernetes.io/name=ovsflow-cni"
	dsAway              = `{"spec":{"template":{"spec":{"nodeSelector":{"ovsflow.io/bench-chain":"ovsflow"}}}}}`
)

// cmdReference: reference -kubeconfig K -plugins DIR: the cluster's pods on
// the reference chain in ovsflow's place (bench -kube's second run,
// conformance -chain reference): the DaemonSet's pods taken off every node
// (a nodeSelector no node matches, so no agent writes its conflist back),
// then on every Node the plugins of DIR in the CNI bin dir, ovsflow's
// conflist replaced by the reference one, br0's gateway addresses of the
// pod CIDRs removed (the reference bridge puts them on cni0), until the
// runtime has loaded it; then every Node Ready.
func cmdReference(e env, args []string) error {
	fs := flags("reference")
	kc := fs.String("kubeconfig", "", "")
	dir := fs.String("plugins", "", "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *kc == "" || *dir == "" {
		return usageError{"reference -kubeconfig FILE -plugins DIR"}
	}
	plugins, err := tarOf(*dir, referencePlugins)
	if err != nil {
		return err
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	c, err := kube.Client(*kc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.AppsV1().DaemonSets(dsNamespace).Patch(ctx, dsName, types.MergePatchType, []byte(dsAway), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("reference: taking the DaemonSet off the nodes: %w", err)
	}
	if err := poll(ctx, 2*time.Minute, "the DaemonSet's pods gone", func(ctx context.Context) (bool, error) {
		l, err := c.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: dsLabel})
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if err := useReference(ctx, eng, e.plan.Container(n.Name), n.Spec.PodCIDRs, plugins); err != nil {
			return fmt.Errorf("reference: node %s: %w", n.Name, err)
		}
	}
	if err := poll(ctx, 2*time.Minute, "every Node Ready", func(ctx context.Context) (bool, error) {
		l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, n := range l.Items {
			if !kube.NodeReady(&n) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("reference: %w", err)
	}
	logf("reference chain in place on %d nodes", len(nodes.Items))
	return nil
}

// useReference puts the reference chain on one node's container.
func useReference(ctx context.Context, eng *engine.Engine, container string, cidrs []string, plugins []byte) error {
	in := eng.Command("exec", "-i", container, "tar", "-C", "/opt/cni/bin", "-x")
	in.Stdin = bytes.NewReader(plugins)
	if out, err := in.CombinedOutput(); err != nil {
		return fmt.Errorf("installing the reference plugins: %w: %s", err, out)
	}
	conf := eng.Command("exec", "-i", container, "sh", "-ec", `d=/etc/cni/net.d
/opt/ovsflow/bin/ovsflow-conflist -pod-cidrs "$1" >"$d/.10-reference.conflist.new"
rm -f "$d"/*ovsflow*
mv -f "$d/.10-reference.conflist.new" "$d/10-reference.conflist"`, "sh", strings.Join(cidrs, ","))
	conf.Stdin = strings.NewReader(referenceTemplate)
	if out, err := conf.CombinedOutput(); err != nil {
		return fmt.Errorf("installing the reference conflist: %w: %s", err, out)
	}
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return err
		}
		// ovs-bridge's gateway: the range's first address (gone already where it never served a pod).
		gw := netip.PrefixFrom(p.Masked().Addr().Next(), p.Bits())
		eng.Run("exec", container, "ip", "addr", "del", gw.String(), "dev", "br0")
	}
	return poll(ctx, time.Minute, "the runtime loading 10-reference.conflist", func(context.Context) (bool, error) {
		out, _ := eng.Run("exec", container, "crictl", "info")
		return strings.Contains(out, `"reference"`), nil
	})
}

// cmdChainLeft: chain-left ovsflow|reference: what of the chain is left on
// each node once every pod is gone, waited for up to 30 s: its container
// ports (ovsflow: br0's ports but the uplink; reference: cni0's). One line a node:
// CHAIN: NODE: N container ports left T s after the last pod was gone.
func cmdChainLeft(e env, args []string) error {
	if len(args) != 1 || (args[0] != "ovsflow" && args[0] != "reference") {
		return usageError{"chain-left ovsflow|reference"}
	}
	return e.chainLeft(args[0], os.Stdout)
}

// chainLeft writes to w, per node, how many of chain's container ports are
// left once every pod is gone, waited for up to 30 s.
func (e env) chainLeft(chain string, w io.Writer) error {
	t0 := time.Now()
	return onKubeNodes(e, func(eng *engine.Engine, n string) error {
		var left int
		poll(context.Background(), 30*time.Second, "", func(context.Context) (bool, error) {
			var lines []string
			if chain == "ovsflow" {
				out, _ := eng.Run("exec", e.plan.Container(n), "ovs-vsctl", "list-ports", "br0")
				lines = slices.DeleteFunc(strings.Fields(out), func(p string) bool { return p == "eth0" })
			} else {
				out, _ := eng.Run("exec", e.plan.Container(n), "ip", "-o", "link", "show", "master", "cni0")
				lines = slices.DeleteFunc(strings.Split(out, "\n"), func(l string) bool { return strings.TrimSpace(l) == "" })
			}
			left = len(lines)
			return left == 0, nil
		})
		fmt.Fprintf(w, "%s: %s: %d container ports left %d s after the last pod was gone\n", chain, n, left, int(time.Since(t0).Seconds()))
		return nil
	})
}

// tarOf is a tar stream of the named files of dir, executable.
func tarOf(dir string, names []string) ([]byte, error) {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		if err := w.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(data))}); err != nil {
			return nil, err
		}
		if _, err := w.Write(data); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// poll asks cond every half second until it holds, or limit (or ctx) ends.
func poll(ctx context.Context, limit time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, cond); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}
