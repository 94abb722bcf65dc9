package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/engine"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kube"
)

// cmdDNS: dns -kubeconfig FILE -tar TAR: the cluster DNS of
// deploy/coredns.yaml: the image of TAR (the build's CoreDNS) into every
// Kubernetes node, the manifest applied with the kube-dns Service's
// addresses (the plan's: topology.Kube) and kubeadm's replica count (1 on a cluster of one node), until
// its Deployment has rolled out.
func cmdDNS(e env, args []string) error {
	fs := flags("dns")
	kubeconfig := fs.String("kubeconfig", "", "")
	tar := fs.String("tar", "", "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *kubeconfig == "" || *tar == "" {
		return usageError{"dns -kubeconfig FILE -tar TAR"}
	}
	k, err := e.plan.KubeFromEnv(os.Getenv)
	if err != nil {
		return usageError{"dns: " + err.Error()}
	}
	dns4, dns6 := k.DNS4().String(), k.DNS6().String()
	manifest, err := os.ReadFile(e.repoPath("deploy/coredns.yaml"))
	if err != nil {
		return err
	}
	ref, err := images.ReadOCIRef(*tar)
	if err != nil {
		return err
	}
	if !bytes.Contains(manifest, []byte("image: "+ref.Name+"\n")) {
		return fmt.Errorf("deploy/coredns.yaml does not run %s (the image of %s)", ref.Name, *tar)
	}
	if err := cmdImport(e, []string{*tar}); err != nil {
		return err
	}
	_, names, err := e.listNodes()
	if err != nil {
		return err
	}
	replicas := 2
	if len(slices.DeleteFunc(names, func(n string) bool { return n == "cp" })) == 1 {
		replicas = 1
	}
	manifest = []byte(strings.NewReplacer("@DNS_IP4@", dns4, "@DNS_IP6@", dns6, "@DNS_REPLICAS@", strconv.Itoa(replicas)).Replace(string(manifest)))
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := kube.Apply(ctx, *kubeconfig, manifest, logf); err != nil {
		return err
	}
	c, err := kube.Client(*kubeconfig)
	if err != nil {
		return err
	}
	if err := kube.WaitRolledOut(ctx, c, kube.Rollout{Kind: "deployment", Namespace: "kube-system", Name: "coredns"}); err != nil {
		return err
	}
	version := ref.Name[strings.LastIndex(ref.Name, ":")+1:]
	logf("cluster DNS: CoreDNS %s, Service kube-system/kube-dns at %s and %s, Ready in %d s", version, dns4, dns6, int(time.Since(t0).Seconds()))
	return nil
}

// cmdMultus: multus -kubeconfig FILE [-version V] (for its line): Multus in front of ovsflow:
// deploy/multus.yaml applied (the NetworkAttachmentDefinition definition,
// Multus's ServiceAccount and RBAC), then on every Kubernetes node Multus's
// thin plugin (the build's, mounted at /opt/ovsflow-kube/bin), a kubeconfig
// with a token of that ServiceAccount, and examples/multus.conflist as
// 00-multus.conflist, the first conflist by name: the runtime runs Multus,
// which delegates the cluster's default network to 10-ovsflow.conflist.
// Each file is written under a temporary name and renamed, the conflist
// last, so that the runtime never reads half a file.
func cmdMultus(e env, args []string) error {
	fs := flags("multus")
	kubeconfig := fs.String("kubeconfig", "", "")
	version := fs.String("version", "", "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return usageError{"multus -kubeconfig FILE [-version V]"}
	}
	manifest, err := os.ReadFile(e.repoPath("deploy/multus.yaml"))
	if err != nil {
		return err
	}
	conflist, err := os.ReadFile(e.repoPath("examples/multus.conflist"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := kube.Apply(ctx, *kubeconfig, manifest, logf); err != nil {
		return err
	}
	if err := kube.WaitEstablished(ctx, *kubeconfig, "network-attachment-definitions.k8s.cni.cncf.io"); err != nil {
		return err
	}
	kc, err := kube.ServiceAccountKubeconfig(ctx, *kubeconfig, "kube-system", "multus", 48*time.Hour)
	if err != nil {
		return err
	}
	const install = `d=/etc/cni/net.d
mkdir -p "$d/multus.d" /opt/cni/bin
cp /opt/ovsflow-kube/bin/multus /opt/cni/bin/.multus.new && mv -f /opt/cni/bin/.multus.new /opt/cni/bin/multus
(umask 077 && cat >"$d/multus.d/.multus.kubeconfig.new") && mv -f "$d/multus.d/.multus.kubeconfig.new" "$d/multus.d/multus.kubeconfig"
printf '%s\n' "$1" >"$d/.00-multus.conflist.new" && mv -f "$d/.00-multus.conflist.new" "$d/00-multus.conflist"`
	n := 0
	err = onKubeNodes(e, func(eng *engine.Engine, node string) error {
		cmd := eng.Command("exec", "-i", e.plan.Container(node), "sh", "-ec", install, "sh", string(bytes.TrimSpace(conflist)))
		cmd.Stdin = bytes.NewReader(kc)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("installing Multus on %s: %w: %s", node, err, out)
		}
		n++
		return nil
	})
	if err != nil {
		return err
	}
	logf("Multus %s in front of ovsflow on %d nodes", *version, n)
	return nil
}

// cmdDeploy: deploy: the DaemonSet's image of this tree (images.DaemonSet)
// into every Kubernetes node, deploy/ovsflow-cni.yaml applied, until the
// DaemonSet has rolled out and every Node is Ready; then the cluster DNS
// and Multus where up -kube asked for them (the marks in its state). The
// image's name does not change with the tree: on a redeploy the pod
// template carries the tar's digest, so that another build rolls the
// DaemonSet out (and the same build does not); a first deploy's pods start
// with the image just imported.
func cmdDeploy(e env, args []string) error {
	if err := parse(flags("deploy"), args, 0); err != nil {
		return err
	}
	t0 := time.Now()
	manifest, name, err := e.daemonSetManifest()
	if err != nil {
		return err
	}
	kc := e.adminKubeconfig()
	tar := filepath.Join(e.paths.Data, "ds", "ovs-cni.tar")
	n, err := e.importDaemonSetImage(tar, name, "")
	if err != nil {
		return err
	}
	logf("image %s built and imported into %d nodes in %d s", name, n, int(time.Since(t0).Seconds()))
	c, err := kube.Client(kc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = c.AppsV1().DaemonSets(dsNamespace).Get(ctx, dsName, metav1.GetOptions{})
	redeploy := err == nil
	if err := kube.Apply(ctx, kc, manifest, logf); err != nil {
		return err
	}
	if redeploy {
		sum, err := fileSHA256(tar)
		if err != nil {
			return err
		}
		patch := `{"spec":{"template":{"metadata":{"annotations":{"ovsflow.io/image-tar-sha256":"` + sum[:32] + `"}}}}}`
		if _, err := c.AppsV1().DaemonSets(dsNamespace).Patch(ctx, dsName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	if err := cmdRollout(e, []string{"-kubeconfig", kc, "-timeout", "5m", "daemonset/" + dsNamespace + "/" + dsName, "nodes"}); err != nil {
		return err
	}
	st := e.plan.KubeState()
	if _, err := os.Stat(filepath.Join(st, "dns")); err == nil {
		tar, _, err := e.cache().CoreDNSTar()
		if err != nil {
			return err
		}
		if err := cmdDNS(e, []string{"-kubeconfig", kc, "-tar", tar}); err != nil {
			return fmt.Errorf("the cluster DNS: %w", err)
		}
	}
	if v, err := os.ReadFile(filepath.Join(st, "multus")); err == nil {
		if err := cmdMultus(e, []string{"-kubeconfig", kc, "-version", strings.TrimSpace(string(v))}); err != nil {
			return fmt.Errorf("putting Multus in front: %w", err)
		}
	}
	logf("deployed in %d s", int(time.Since(t0).Seconds()))
	return nil
}

// cmdImage: image TAG: another image of this tree for the DaemonSet, the
// manifest's image name with tag TAG and TAG stamped into the binaries as
// their version, imported into every node's runtime (what an upgrade rolls
// out); prints IMAGE=<name>. The manifest is not touched.
func cmdImage(e env, args []string) error {
	if len(args) != 1 || !imageTag.MatchString(args[0]) {
		return usageError{"image TAG (a tag of the manifest's image name)"}
	}
	t0 := time.Now()
	_, name, err := e.daemonSetManifest()
	if err != nil {
		return err
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	name += ":" + args[0]
	tar := filepath.Join(e.paths.Data, "ds", "ovs-cni-"+args[0]+".tar")
	defer os.Remove(tar)
	n, err := e.importDaemonSetImage(tar, name, args[0])
	if err != nil {
		return err
	}
	logf("image %s built and imported into %d nodes in %d s", name, n, int(time.Since(t0).Seconds()))
	fmt.Println("IMAGE=" + name)
	return nil
}

// daemonSetManifest is deploy/ovsflow-cni.yaml and the image it runs,
// once an engine answers and the harness has a cluster.
func (e env) daemonSetManifest() ([]byte, string, error) {
	if _, err := e.engine(); err != nil {
		return nil, "", fmt.Errorf("no engine answers (is the harness up?): %w", err)
	}
	if _, err := os.Stat(e.adminKubeconfig()); err != nil {
		return nil, "", errors.New("no cluster (up -kube first)")
	}
	manifest, err := os.ReadFile(e.repoPath("deploy/ovsflow-cni.yaml"))
	if err != nil {
		return nil, "", err
	}
	name, err := images.DaemonSetName(manifest)
	return manifest, name, err
}

// imageTag is a tag of an image name.
var imageTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// importDaemonSetImage writes the DaemonSet's image of this tree at tar
// (named name, version stamped unless "") and imports it into every
// Kubernetes node; it returns how many.
func (e env) importDaemonSetImage(tar, name, version string) (int, error) {
	if err := images.DaemonSet(e.repo, e.plan, e.base.Mirror, tar, name, version, e.aptInstall, logf); err != nil {
		return 0, err
	}
	if err := cmdImport(e, []string{tar}); err != nil {
		return 0, fmt.Errorf("importing %s: %w", name, err)
	}
	_, names, err := e.listNodes()
	return len(slices.DeleteFunc(names, func(n string) bool { return n == "cp" })), err
}

// fileSHA256 is the hex SHA-256 of the file's content.
func fileSHA256(file string) (string, error) {
	f, err := os.Open(file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
