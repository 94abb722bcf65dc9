package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/kube"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/nodes"
)

// cmdApply: apply -kubeconfig FILE -f MANIFEST ('-': stdin): every object
// of the manifest server-side applied, in order (kubectl apply -f).
func cmdApply(e env, args []string) error {
	fs := flags("apply")
	kubeconfig := fs.String("kubeconfig", "", "")
	file := fs.String("f", "", "")
	timeout := fs.Duration("timeout", 2*time.Minute, "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *kubeconfig == "" || *file == "" {
		return usageError{"apply -kubeconfig FILE -f MANIFEST"}
	}
	var m []byte
	var err error
	if *file == "-" {
		m, err = io.ReadAll(os.Stdin)
	} else {
		m, err = os.ReadFile(*file)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return kube.Apply(ctx, *kubeconfig, m, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) })
}

// cmdRollout: rollout -kubeconfig FILE [-timeout D] WHAT...: until each is
// rolled out, in order: daemonset/NAMESPACE/NAME, deployment/NAMESPACE/NAME,
// nodes (every Node Ready).
func cmdRollout(e env, args []string) error {
	fs := flags("rollout")
	kubeconfig := fs.String("kubeconfig", "", "")
	timeout := fs.Duration("timeout", 3*time.Minute, "")
	if err := parse(fs, args, -1); err != nil {
		return err
	}
	var rs []kube.Rollout
	for _, a := range fs.Args() {
		p := strings.Split(a, "/")
		switch {
		case len(p) == 1 && p[0] == "nodes":
			rs = append(rs, kube.Rollout{Kind: "nodes"})
		case len(p) == 3 && (p[0] == "daemonset" || p[0] == "deployment"):
			rs = append(rs, kube.Rollout{Kind: p[0], Namespace: p[1], Name: p[2]})
		default:
			return usageError{"rollout: " + a + ": want daemonset/NAMESPACE/NAME, deployment/NAMESPACE/NAME or nodes"}
		}
	}
	if *kubeconfig == "" || len(rs) == 0 {
		return usageError{"rollout -kubeconfig FILE WHAT..."}
	}
	c, err := kube.Client(*kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	return kube.WaitRolledOut(ctx, c, rs...)
}

// cmdImport: import TAR: an image tar into the containerd of every
// Kubernetes node (its k8s.io namespace, as kubelet's images).
func cmdImport(e env, args []string) error {
	if len(args) != 1 {
		return usageError{"import TAR"}
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	names, err := nodes.List(eng, e.plan)
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == "cp" {
			continue
		}
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		cmd := eng.Command("exec", "-i", e.plan.Container(n), "/opt/ovsflow-kube/bin/ctr", "-n", "k8s.io", "images", "import", "--no-unpack", "-")
		cmd.Stdin = f
		out, err := cmd.CombinedOutput()
		f.Close()
		if err != nil {
			return fmt.Errorf("importing %s into %s: %w: %s", args[0], n, err, out)
		}
	}
	return nil
}
