package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kubebuild"
)

// cmdTest: test [-nodes N] (default 3): up, the Go tests of test/multinode
// with the nodes handed over in their environment, "N passed, M failed"
// (tests without subtests and subtests; a skip counts as a failure), down.
// OID_KEEP=1 leaves the nodes up after; OID_RUN: a -run pattern.
// test -kube [-nodes N] [-runtime containerd|crio] [-subnets 1|2]
// [-conformance]: the Kubernetes cluster's tests (testKube).
func cmdTest(e env, args []string) error {
	fs := flags("test")
	n := fs.Int("nodes", 3, "")
	withKube := fs.Bool("kube", false, "")
	conformance := fs.Bool("conformance", false, "")
	runtime := fs.String("runtime", "containerd", "")
	subnets := fs.String("subnets", "", "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	e, err := e.withSubnets("test", *subnets)
	if err != nil {
		return err
	}
	if *withKube {
		return e.testKube(*n, *conformance, *runtime)
	}
	switch {
	case e.plan.Subnets > 1:
		return usageError{"test: -subnets goes with -kube"}
	case *conformance:
		return usageError{"test: -conformance goes with -kube"}
	case *runtime != "containerd":
		return usageError{"test: -runtime goes with -kube"}
	}
	if *n < 2 {
		return usageError{fmt.Sprintf("test: -nodes %d: want at least 2", *n)}
	}
	t0 := time.Now()
	eng, lines, err := e.up(*n)
	for _, l := range lines {
		fmt.Println(l)
	}
	if err != nil {
		return err
	}
	if os.Getenv("OID_KEEP") != "1" {
		defer func() {
			if err := cmdDown(e, nil); err != nil {
				logf("down: %v", err)
			}
		}()
	}
	tup := time.Now()
	goArgs := []string{"test", "-count=1", "-v", "-timeout", "30m"}
	if r := os.Getenv("OID_RUN"); r != "" {
		goArgs = append(goArgs, "-run", r)
	}
	cmd := exec.Command("go", append(goArgs, "./test/multinode/")...)
	cmd.Dir = e.repo
	cmd.Env = append(os.Environ(), "OVSFLOW_MULTINODE_NODES="+strings.Join(lines, "\n")+"\n",
		"OVSFLOW_MULTINODE_VERSION="+images.Version(e.repo), "OVSFLOW_MULTINODE_PREFIX="+e.plan.Prefix,
		"OVSFLOW_MULTINODE_HARNESS="+e.repoPath("hack/ovs-in-docker.sh"), "DOCKER_HOST="+eng.Host) // the tests restart and kill nodes with docker
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	c := countTests(io.TeeReader(out, os.Stdout))
	rerr := cmd.Wait()
	if rerr != nil && c.failed+c.skipped == 0 {
		c.failed = 1 // go test failed outside any test (build, TestMain)
	}
	skipped := ""
	if c.skipped > 0 {
		skipped = fmt.Sprintf(" (%d skipped)", c.skipped)
	}
	fmt.Printf("%d passed, %d failed%s (%d s of tests, %d s of up)\n", c.passed, c.failed+c.skipped, skipped,
		int(time.Since(tup).Seconds()), int(tup.Sub(t0).Seconds()))
	if rerr != nil || c.failed+c.skipped > 0 {
		return exitError{1}
	}
	return nil
}

type counts struct{ passed, failed, skipped int }

// countTests counts the outcomes of `go test -v` output: of the tests
// without subtests and of the subtests (a test with subtests is their sum).
func countTests(r io.Reader) counts {
	type result struct{ name, status string }
	var res []result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[0] == "---" && (f[1] == "PASS:" || f[1] == "FAIL:" || f[1] == "SKIP:") {
			res = append(res, result{f[2], f[1]})
		}
	}
	var c counts
	for _, a := range res {
		leaf := true
		for _, b := range res {
			if strings.HasPrefix(b.name, a.name+"/") {
				leaf = false
				break
			}
		}
		if !leaf {
			continue
		}
		switch a.status {
		case "PASS:":
			c.passed++
		case "FAIL:":
			c.failed++
		default:
			c.skipped++
		}
	}
	return c
}

// crioRun are the test/cluster tests of what a CRI-O node changes, which
// test -kube -runtime crio runs: its pods' network across nodes and to
// Services, CRI-O's own host ports over it (CRI-O publishes them itself and
// passes the plugins no mappings, so the tests of ovs-portmap's host ports,
// conflicts and metrics are containerd's), STATUS (CRI-O asks it every 5 s
// only with cni_status_grace_period), a pod's DEL and a node's restart
// (CRI-O's own GC at start), the uninstall. The rest of test/cluster holds
// on CRI-O too (all of it ran there but five tests that cannot by design:
// docs/kubernetes.md), at the cost of ten more minutes beside CI's other
// suites.
const crioRun = `^(TestPodsReachEveryPodAcrossNodes|TestClusterIPServiceFromPodsOnEveryNode|TestHostPortOnEveryNodeFromOtherNodesPodsAndHost|TestHostPortFromPodOnSameNode|TestStatusReadyOnlyOnceBridgeServed|TestPodDeleteLeavesNothingOnNode|TestNodeRestartBringsBackPodsWithHostPorts|TestUninstallLeavesNodeAsPrepared)$`

// testKube is test -kube: up -kube (n nodes on runtime), deploy; with
// conformance, conformance's default selection first, on the fresh cluster
// (test/cluster's tests delete and re-register Nodes); the Go tests of
// test/cluster (client-go against the API server) with ovsflow as the
// runtime's network; then Multus put in front and the Multus tests
// (OVSFLOW_CLUSTER_MULTUS=1: they must run, not skip); down (unless
// OID_KEEP=1); the times of each step. The first part runs without Multus
// because Multus (cniVersion 1.0.0) sends the plugins neither STATUS nor
// GC, which containerd's tests need. OID_RUN: a -run pattern (the Multus
// part runs the Multus tests it selects). On CRI-O, the tests of crioRun
// (or OID_RUN's), and no Multus (its tests are containerd's).
func (e env) testKube(n int, conformance bool, runtime string) error {
	t0 := time.Now()
	run := os.Getenv("OID_RUN")
	chosen := run
	if runtime == "crio" && run == "" {
		run = crioRun
	}
	if os.Getenv("OID_KEEP") != "1" {
		defer func() {
			if err := cmdDown(e, nil); err != nil {
				logf("down: %v", err)
			}
		}()
	}
	if _, err := e.upKube(n, false, runtime); err != nil {
		return fmt.Errorf("up -kube: %w", err)
	}
	tup := time.Now()
	if err := cmdDeploy(e, nil); err != nil {
		return fmt.Errorf("deploy: %w", err)
	}
	tdep := time.Now()
	var failed error
	confTook := ""
	if conformance && chosen == "" {
		if err := cmdConformance(e, nil); err != nil {
			failed = err
		}
		confTook = fmt.Sprintf("conformance: %d s; ", secs(tdep, time.Now()))
	}
	tgo := time.Now()
	// The overlay's tests need nodes on two subnets (-subnets 2).
	skip := "^TestMultus"
	if e.plan.Subnets != 2 {
		skip += "|^TestOverlay"
	}
	goArgs := []string{"-skip", skip}
	if run != "" {
		goArgs = append(goArgs, "-run", run)
	}
	if err := e.clusterGoTest(false, goArgs...); err != nil {
		failed = err
	}
	tone := time.Now()
	multusRun := "^TestMultus"
	if chosen != "" {
		// The Multus tests of OID_RUN's (the others ran above, without Multus).
		var err error
		if multusRun, err = e.multusTests(chosen); err != nil {
			return err
		}
	}
	if runtime == "containerd" && multusRun != "" {
		if err := e.cache().MultusPlugin(); err != nil {
			return fmt.Errorf("test -kube: building Multus: %w", err)
		}
		if err := os.WriteFile(filepath.Join(e.plan.KubeState(), "multus"), []byte(kubebuild.Multus+"\n"), 0o644); err != nil {
			return err
		}
		if err := cmdMultus(e, []string{"-kubeconfig", e.adminKubeconfig(), "-version", kubebuild.Multus}); err != nil {
			return fmt.Errorf("putting Multus in front: %w", err)
		}
		if err := e.clusterGoTest(true, "-run", multusRun); err != nil {
			failed = err
		}
	}
	fmt.Printf("up -kube -nodes %d -runtime %s -subnets %d: %d s; deploy: %d s; %stests: %d s; with Multus in front: %d s; total %d s\n",
		n, runtime, e.plan.Subnets, secs(t0, tup), secs(tup, tdep), confTook, secs(tgo, tone), secs(tone, time.Now()), secs(t0, time.Now()))
	return failed
}

// multusTests is a -run pattern of the Multus tests (TestMultus*) that
// pattern run selects in test/cluster; "": none.
func (e env) multusTests(run string) (string, error) {
	cmd := exec.Command("go", "test", "-list", run, ".")
	cmd.Dir, cmd.Stderr = filepath.Join(e.repo, "test", "cluster"), os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("listing test/cluster's tests: %w", err)
	}
	var names []string
	for _, l := range strings.Fields(string(out)) {
		if strings.HasPrefix(l, "TestMultus") {
			names = append(names, l)
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	return "^(" + strings.Join(names, "|") + ")$", nil
}

// clusterGoTest runs test/cluster's Go tests (go test -v, with args)
// against this cluster; multus: the Multus tests must run
// (OVSFLOW_CLUSTER_MULTUS=1).
func (e env) clusterGoTest(multus bool, args ...string) error {
	eng, err := e.engine()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", append(append([]string{"test", "-count=1", "-v", "-timeout", "30m"}, args...), ".")...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = filepath.Join(e.repo, "test", "cluster"), os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "OVSFLOW_CLUSTER_KUBECONFIG="+e.adminKubeconfig(), "OVSFLOW_CLUSTER_HARNESS="+e.repoPath("hack/ovs-in-docker.sh"),
		"OVSFLOW_CLUSTER_SUBNETS="+strconv.Itoa(e.plan.Subnets), "DOCKER_HOST="+eng.Host)
	if multus {
		cmd.Env = append(cmd.Env, "OVSFLOW_CLUSTER_MULTUS=1")
	}
	if err := cmd.Run(); err != nil {
		var x *exec.ExitError
		if errors.As(err, &x) {
			return exitError{x.ExitCode()}
		}
		return err
	}
	return nil
}
