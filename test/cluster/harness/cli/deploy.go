package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

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
