package cli

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
)

// The reference chain's plugins (containernetworking/plugins at go.mod's
// version, built from the module proxy), and where they go.
var referencePackages = []string{
	"github.com/containernetworking/plugins/plugins/main/bridge",
	"github.com/containernetworking/plugins/plugins/meta/portmap",
	"github.com/containernetworking/plugins/plugins/ipam/host-local",
}

// referencePluginsDir builds the reference chain's plugins into the
// harness's data dir and returns it.
func (e env) referencePluginsDir() (string, error) {
	dir := filepath.Join(e.paths.Data, "bench", "ref")
	if err := images.GoBuild(e.repo, append([]string{"-trimpath", "-ldflags", "-s -w", "-o", dir + "/"}, referencePackages...)...); err != nil {
		return "", fmt.Errorf("building the reference plugins: %w", err)
	}
	if bi, err := buildinfo.ReadFile(filepath.Join(dir, "bridge")); err == nil {
		for _, d := range bi.Deps {
			if d.Path == "github.com/containernetworking/plugins" {
				logf("reference plugins: %s %s", d.Path, d.Version)
			}
		}
	}
	return dir, nil
}

// cmdBench: a benchmark, not a test: it prints figures and asserts no time.
//
//	bench -kube [-nodes N] [-pods P] [-idle S] [-record DIR]
//
// up -kube -nodes N (default 3), deploy; then for each chain, in one run on
// the same cluster: ovsflow (the DaemonSet's conflist, its agent sampled),
// then reference (containernetworking/plugins' bridge, host-local and
// portmap in its place: cmdReference); test/cluster/scale (client-go)
// scales P Deployments of one hostPort each (a node can hold one pod of
// each, so the scheduler puts P pods, default 110, on every node) from 0 to
// N replicas until all N*P pods are Ready, checks every hostPort from this
// host, scales them to 0 until all are gone, the agent's CPU and RSS idle
// S s (default 30) with no pods and with all; the tables of both chains;
// down (unless OID_KEEP=1). Pods are IPv6-only unless OID_KPOD4 is set (a
// node's IPv4 /26 holds 61 pods), with no cluster DNS (its pods would be
// counted, and the reference chain replaces the network under them);
// kubelet's maxPods is P+10 when that exceeds 110 (OID_KMAXPODS
// overrides). The runs' JSON and the tables stay in DATA/bench/<time>;
// -record DIR also writes the tables to DIR/kube-bench-DATE.md.
//
//	bench -overlay [-record DIR] [-parts paths,peers] [-peers N] [-window D]
//
// The overlay's benchmark (test/cluster/overlaybench): up -kube -nodes 3
// -subnets 2, deploy, host-gw against the tunnel from one pod, the agent
// with simulated Nodes; -record DIR: also DIR/overlay-bench-DATE.md; down.
func cmdBench(e env, args []string) error {
	fs := flags("bench")
	withKube := fs.Bool("kube", false, "")
	overlay := fs.Bool("overlay", false, "")
	n := fs.Int("nodes", 3, "")
	pods := fs.Int("pods", 110, "")
	idle := fs.Int("idle", 30, "")
	record := fs.String("record", "", "")
	var oargs []string
	for _, f := range []string{"parts", "peers", "window"} {
		fs.Func(f, "", func(v string) error { oargs = append(oargs, "-"+f, v); return nil })
	}
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("bench: needs root (up -kube; the agent's /proc)")
	}
	if *overlay {
		return e.benchOverlay(*record, oargs)
	}
	if !*withKube {
		return usageError{"bench: -kube or -overlay is required (the benchmarks are of a Kubernetes cluster)"}
	}
	if *pods < 1 || *pods > 1000 {
		return usageError{"bench: -pods " + strconv.Itoa(*pods) + ": want 1 to 1000"}
	}
	if *idle < 0 {
		return usageError{"bench: -idle " + strconv.Itoa(*idle) + ": want seconds"}
	}
	// (read by up -kube: topology.Kube)
	if os.Getenv("OID_KPOD4") == "" {
		os.Setenv("OID_KPOD4", "none")
	}
	os.Setenv("OID_DNS", "0")
	if os.Getenv("OID_KMAXPODS") == "" {
		os.Setenv("OID_KMAXPODS", strconv.Itoa(max(*pods+10, 110)))
	}
	t0 := time.Now()
	out, err := e.benchDir()
	if err != nil {
		return err
	}
	scale := filepath.Join(e.paths.Data, "bench", "scale")
	if err := images.GoBuild(filepath.Join(e.repo, "test", "cluster"), "-trimpath", "-ldflags", "-s -w", "-o", scale, "./scale"); err != nil {
		return err
	}
	ref, err := e.referencePluginsDir()
	if err != nil {
		return err
	}
	up, down, err := e.benchUp(out, *n)
	defer down()
	if err != nil {
		return err
	}
	tup := time.Now()
	if err := cmdDeploy(e, nil); err != nil {
		return fmt.Errorf("deploy: %w", err)
	}
	tdep := time.Now()
	// The harness's processes: the containers' cgroups, and the pods'
	// (kubelet's cgroupRoot /PREFIX/NODE).
	eng, err := e.engine()
	if err != nil {
		return err
	}
	ids, err := eng.List("ps", "-q", "--no-trunc", "--filter", "label="+e.plan.Label())
	if err != nil {
		return err
	}
	drv := func(chain string, a ...string) error {
		cmd := exec.Command(scale, append([]string{"-kubeconfig", e.adminKubeconfig(), "-pods", strconv.Itoa(*pods),
			"-cgroups", strings.Join(append(ids, "/"+e.plan.Prefix+"/"), ","),
			"-containerd-metrics-port", strconv.Itoa(containerdMetricsPort), "-chain", chain}, a...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("the %s run failed: %w", chain, err)
		}
		return nil
	}
	left, err := os.Create(filepath.Join(out, "left.txt"))
	if err != nil {
		return err
	}
	defer left.Close()
	if err := drv("ovsflow", "-agent", "ovsflow-agent", "-idle", strconv.Itoa(*idle)+"s", "-out", filepath.Join(out, "ovsflow.json")); err != nil {
		return err
	}
	if err := e.chainLeft("ovsflow", io.MultiWriter(os.Stdout, left)); err != nil {
		return err
	}
	tone := time.Now()
	if err := cmdReference(e, []string{"-kubeconfig", e.adminKubeconfig(), "-plugins", ref}); err != nil {
		return fmt.Errorf("the reference chain: %w", err)
	}
	// The same idle phases: with all pods, the steady cost of each chain
	// (the readiness probes through the bridge; no agent on this chain).
	if err := drv("reference", "-idle", strconv.Itoa(*idle)+"s", "-out", filepath.Join(out, "reference.json")); err != nil {
		return err
	}
	if err := e.chainLeft("reference", io.MultiWriter(os.Stdout, left)); err != nil {
		return err
	}
	var report strings.Builder
	fmt.Fprintf(&report, "## bench -kube -nodes %d -pods %d -idle %d: %s\n\n", *n, *pods, *idle, e.benchStamp(up))
	for _, l := range up {
		if strings.HasPrefix(l, "NODE ") {
			fmt.Fprintf(&report, "    %s\n", l)
		}
	}
	report.WriteString("\n")
	cmd := exec.Command(scale, "-report", filepath.Join(out, "ovsflow.json"), filepath.Join(out, "reference.json"))
	cmd.Stderr = os.Stderr
	tables, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("the report: %w", err)
	}
	report.Write(tables)
	fmt.Print(report.String())
	if err := e.benchKeep(out, "report.md", *record, "kube-bench", report.String()); err != nil {
		return err
	}
	fmt.Printf("up -kube: %d s; deploy: %d s; ovsflow: %d s; reference: %d s; total %d s (figures in %s)\n",
		secs(t0, tup), secs(tup, tdep), secs(tdep, tone), secs(tone, time.Now()), secs(t0, time.Now()), out)
	return nil
}

// benchOverlay is bench -overlay (cmdBench), with oargs for overlaybench.
func (e env) benchOverlay(record string, oargs []string) error {
	t0 := time.Now()
	out, err := e.benchDir()
	if err != nil {
		return err
	}
	tool := filepath.Join(e.paths.Data, "bench", "overlaybench")
	if err := images.GoBuild(filepath.Join(e.repo, "test", "cluster"), "-o", tool, "./overlaybench"); err != nil {
		return err
	}
	if e, err = e.withSubnets("bench", "2"); err != nil {
		return err
	}
	up, down, err := e.benchUp(out, 3)
	defer down()
	if err != nil {
		return err
	}
	if err := cmdDeploy(e, nil); err != nil {
		return fmt.Errorf("deploy: %w", err)
	}
	md := filepath.Join(out, "overlay.md")
	cmd := exec.Command(tool, append([]string{"-kubeconfig", e.adminKubeconfig(), "-harness", e.repoPath("hack/ovs-in-docker.sh"), "-out", md}, oargs...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = e.repo, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the overlay benchmark failed: %w", err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		return err
	}
	stamp := "\n" + e.benchStamp(up) + "\n"
	fmt.Print(stamp)
	if err := e.benchKeep(out, "overlay.md", record, "overlay-bench", string(b)+stamp); err != nil {
		return err
	}
	fmt.Printf("bench -overlay: total %d s (figures in %s)\n", secs(t0, time.Now()), out)
	return nil
}

// benchDir makes the run's directory, DATA/bench/<time>.
func (e env) benchDir() (string, error) {
	out := filepath.Join(e.paths.Data, "bench", time.Now().UTC().Format("20060102T150405Z"))
	return out, os.MkdirAll(out, 0o755)
}

// benchUp brings up the cluster of a benchmark (up -kube, n nodes), its
// lines in out/up.txt; down takes it down (unless OID_KEEP=1: left up).
func (e env) benchUp(out string, n int) (lines []string, down func(), err error) {
	down = func() {}
	if os.Getenv("OID_KEEP") != "1" {
		down = func() { _ = cmdDown(e, nil) }
	}
	lines, err = e.upKube(n, false, "containerd")
	if werr := os.WriteFile(filepath.Join(out, "up.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err == nil {
		err = werr
	}
	if err != nil {
		return nil, down, fmt.Errorf("up -kube: %w", err)
	}
	return lines, down, nil
}

// benchStamp: the date, the CPUs, the datapath (of up's lines) and the
// tree's version, under a run's tables.
func (e env) benchStamp(up []string) string {
	dp := ""
	for _, l := range up {
		if v, ok := strings.CutPrefix(l, "DATAPATH "); ok {
			dp = v
		}
	}
	return fmt.Sprintf("%s, %d CPUs, datapath %s, %s", time.Now().UTC().Format(time.RFC3339), runtime.NumCPU(), dp, images.Version(e.repo))
}

// benchKeep writes a run's tables to out/name and, with record, to
// record/kind-DATE.md (docs/figures: the figures docs/performance.md
// reads).
func (e env) benchKeep(out, name, record, kind, tables string) error {
	if err := os.WriteFile(filepath.Join(out, name), []byte(tables), 0o644); err != nil {
		return err
	}
	if record == "" {
		return nil
	}
	if err := os.MkdirAll(record, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(record, kind+"-"+time.Now().UTC().Format("2006-01-02")+".md"), []byte(tables), 0o644)
}

func secs(from, to time.Time) int { return int(to.Sub(from).Seconds()) }
