package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/engine"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
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

// cmdImport: import TAR: an OCI image layout tar into the runtime of every
// Kubernetes node (containerd's k8s.io namespace or CRI-O's store, as
// kubelet's images), by the node's oid-image.
func cmdImport(e env, args []string) error {
	if len(args) != 1 {
		return usageError{"import TAR"}
	}
	ref, err := images.ReadOCIRef(args[0])
	if err != nil {
		return err
	}
	return onKubeNodes(e, func(eng *engine.Engine, n string) error {
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		cmd := eng.Command("exec", "-i", e.plan.Container(n), "oid-image", "import", "-", ref.Name, ref.ID)
		cmd.Stdin = f
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("importing %s into %s: %w: %s", args[0], n, err, out)
		}
		return nil
	})
}

// cmdTag: tag SRC DST: DST another name of the image SRC on every Kubernetes node.
func cmdTag(e env, args []string) error {
	if len(args) != 2 {
		return usageError{"tag SRC DST"}
	}
	return onKubeNodes(e, func(eng *engine.Engine, n string) error {
		if out, err := eng.Command("exec", e.plan.Container(n), "oid-image", "tag", args[0], args[1]).CombinedOutput(); err != nil {
			return fmt.Errorf("tagging %s as %s on %s: %w: %s", args[0], args[1], n, err, out)
		}
		return nil
	})
}

// listNodes is the engine that answers and the harness's nodes on it (the
// control plane's "cp" among them).
func (e env) listNodes() (*engine.Engine, []string, error) {
	eng, err := e.engine()
	if err != nil {
		return nil, nil, err
	}
	names, err := nodes.List(eng, e.plan)
	return eng, names, err
}

// onKubeNodes runs f for each node of the harness but the control plane.
func onKubeNodes(e env, f func(*engine.Engine, string) error) error {
	eng, names, err := e.listNodes()
	if err != nil {
		return err
	}
	for _, n := range names {
		if n == "cp" {
			continue
		}
		if err := f(eng, n); err != nil {
			return err
		}
	}
	return nil
}
