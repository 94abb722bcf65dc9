// Package cli is the harness tool's commands: each parses its flags, then
// calls the harness's packages in order.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/engine"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kube"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/nodes"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/topology"
)

// errUsage is a command given wrong arguments (exit code 2).
var errUsage = errors.New("usage")

// usageError is a wrong use of a command, said in its message.
type usageError struct{ msg string }

func (u usageError) Error() string        { return u.msg }
func (u usageError) Is(target error) bool { return target == errUsage }

// exitError carries a command's exit status through (exec's, test's).
type exitError struct{ code int }

func (e exitError) Error() string { return "exit status " + strconv.Itoa(e.code) }

// ExitCode is the process's exit status for err: 2 for a wrong use, the
// status of a command run (exec), else 1.
func ExitCode(err error) int {
	var x exitError
	switch {
	case errors.As(err, &x):
		return x.code
	case errors.Is(err, errUsage):
		return 2
	}
	return 1
}

// Message is what to print for err: nothing for a command's own exit
// status (it has said what it had to say).
func Message(err error) string {
	var x exitError
	if errors.As(err, &x) {
		return ""
	}
	return "ovs-in-docker: " + err.Error()
}

// env is what every command works with.
type env struct {
	plan  topology.Plan
	paths engine.Paths
	repo  string
	base  images.Base
}

func logf(format string, a ...any) { fmt.Fprintf(os.Stderr, "ovs-in-docker: "+format+"\n", a...) }

var commands = map[string]func(env, []string) error{
	"up":           cmdUp,
	"down":         cmdDown,
	"exec":         cmdExec,
	"restart":      cmdRestart,
	"test":         cmdTest,
	"engine":       cmdEngine,
	"images":       cmdImages,
	"network":      cmdNetwork,
	"run":          cmdRun,
	"connect":      cmdConnect,
	"pid":          cmdPid,
	"wait-ready":   cmdWaitReady,
	"nodes":        cmdNodes,
	"addr":         cmdAddr,
	"plan":         cmdPlan,
	"kube-wait":    cmdKubeWait,
	"apply":        cmdApply,
	"rollout":      cmdRollout,
	"import":       cmdImport,
	"tag":          cmdTag,
	"rm":           cmdRm,
	"pki":          cmdPKI,
	"node-configs": cmdNodeConfigs,
	"reference":    cmdReference,
	"chain-left":   cmdChainLeft,
	"dns":          cmdDNS,
	"multus":       cmdMultus,
	"stats":        cmdStats,
	"conformance":  cmdConformance,
	"deploy":       cmdDeploy,
	"bench":        cmdBench,
	"image":        cmdImage,
	"build":        cmdBuild,
	"kubectl":      cmdKubectl,
	"version":      func(e env, _ []string) error { fmt.Println(images.Version(e.repo)); return nil },
	"datapath":     func(env, []string) error { fmt.Println(nodes.Datapath()); return nil },
}

// Main runs the command of args (its name first).
func Main(args []string) error {
	if len(args) == 0 || commands[args[0]] == nil {
		return usageError{"want a command: up, down, exec, restart, pid, test, engine, images, network, run, connect, wait-ready, nodes, rm, addr, plan, kube-wait, apply, rollout, import, tag, pki, node-configs, reference, chain-left, dns, multus, stats, conformance, deploy, image, bench, build, kubectl, version, datapath (hack/ovs-in-docker.sh lists what each does)"}
	}
	plan, err := topology.FromEnv(os.Getenv)
	if err != nil {
		return usageError{err.Error()}
	}
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	e := env{plan: plan, repo: repo, base: images.DefaultBase(os.Getenv("OID_MIRROR")),
		paths: engine.Paths{State: "/run/" + plan.Prefix, Data: "/var/lib/" + plan.Prefix}}
	return commands[args[0]](e, args[1:])
}

func flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parse(fs *flag.FlagSet, args []string, nargs int) error {
	if err := fs.Parse(args); err != nil {
		return usageError{fs.Name() + ": " + err.Error()}
	}
	if nargs >= 0 && fs.NArg() != nargs {
		return usageError{fmt.Sprintf("%s: unexpected arguments %q", fs.Name(), fs.Args())}
	}
	return nil
}

// aptInstall installs Debian packages through hack/lib/apt.sh (one lock for
// every script of the repository that installs).
func (e env) aptInstall(pkgs ...string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("installing %v needs root", pkgs)
	}
	cmd := exec.Command("bash", append([]string{"-c", `log() { echo "ovs-in-docker: $*" >&2; }; . hack/lib/apt.sh; apt_install "$@"`, "apt"}, pkgs...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = e.repo, os.Stderr, os.Stderr
	return cmd.Run()
}

func (e env) engine() (*engine.Engine, error) { return engine.Find(e.paths) }

func (e env) startEngine() (*engine.Engine, error) {
	return engine.Start(e.paths, func() error { return e.aptInstall("docker.io") }, logf)
}

// cmdEngine: the DOCKER_HOST of the engine that answers (-start: starting ours if none does).
func cmdEngine(e env, args []string) error {
	fs := flags("engine")
	start := fs.Bool("start", false, "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	get := e.engine
	if *start {
		get = e.startEngine
	}
	eng, err := get()
	if err != nil {
		return err
	}
	fmt.Println(eng.Host)
	return nil
}

// cmdImages: the base and node images, built unless up to date (the node image always: it is this tree).
func cmdImages(e env, args []string) error {
	if err := parse(flags("images"), args, 0); err != nil {
		return err
	}
	eng, err := e.startEngine()
	if err != nil {
		return err
	}
	return e.buildImages(eng)
}

func (e env) buildImages(eng *engine.Engine) error {
	if err := e.base.Build(eng, e.plan, e.aptInstall, logf); err != nil {
		return err
	}
	return images.BuildNode(eng, e.plan, e.base, e.repo, images.Version(e.repo), logf)
}

func cmdNetwork(e env, args []string) error {
	if err := parse(flags("network"), args, 0); err != nil {
		return err
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	return e.network(eng)
}

func (e env) network(eng *engine.Engine) error {
	if os.Geteuid() == 0 {
		if _, err := os.Stat("/etc/debian_version"); err == nil {
			if err := e.aptInstall("ethtool"); err != nil {
				return err
			}
		}
	}
	return nodes.CreateNetwork(eng, e.plan, logf)
}

// cmdRun: run NAME IPV4 IPV6 [docker run arguments...]: one container of the node image (node-init.sh).
func cmdRun(e env, args []string) error {
	if len(args) < 3 {
		return usageError{"run NAME IPV4 IPV6 [docker run arguments...]"}
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	s := nodes.Spec{Name: args[0], IPv4: args[1], IPv6: args[2], Volume: true, Args: args[3:]}
	// Node i of the plan: on its subnet's network, with the routes to
	// what is not on it.
	if i, err := strconv.Atoi(strings.TrimPrefix(s.Name, "n")); err == nil && topology.Node(i) == s.Name {
		s.Subnet = e.plan.Subnet(i)
		if r := e.plan.UnderlayRoutes(i); r != "" {
			s.Args = append([]string{"-e", "OID_UNDERLAY_ROUTES=" + r}, s.Args...)
		}
	}
	return nodes.Run(eng, e.plan, s)
}

// cmdPid: pid NAME: the process ID (on this host) of a container's first
// process, for a test that enters its network namespace.
func cmdPid(e env, args []string) error {
	if err := parse(flags("pid"), args, 1); err != nil {
		return err
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	pid, err := eng.Run("inspect", "-f", "{{.State.Pid}}", e.plan.Container(args[0]))
	if err != nil {
		return err
	}
	fmt.Println(pid)
	return nil
}

// cmdConnect: connect NAME: the control plane's container (created, not
// started) also on the second subnet's network, with two subnets.
func cmdConnect(e env, args []string) error {
	if err := parse(flags("connect"), args, 1); err != nil {
		return err
	}
	if e.plan.Subnets < 2 {
		return nil
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	return nodes.Connect(eng, e.plan, args[0], 1, topology.ControlPlaneAt)
}

// cmdWaitReady: wait-ready [-timeout D] NODE...: until each node's init says it is ready.
func cmdWaitReady(e env, args []string) error {
	fs := flags("wait-ready")
	timeout := fs.Duration("timeout", 3*time.Minute, "")
	if err := parse(fs, args, -1); err != nil {
		return err
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	for _, n := range fs.Args() {
		if err := nodes.WaitReady(ctx, eng, e.plan, n); err != nil {
			return err
		}
	}
	return nil
}

func cmdNodes(e env, args []string) error {
	if err := parse(flags("nodes"), args, 0); err != nil {
		return err
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	names, err := nodes.List(eng, e.plan)
	for _, n := range names {
		fmt.Println(n)
	}
	return err
}

// cmdAddr: addr net4|net6 K (the network's K-th address), addr node4|node6|pod4|pod6 I (node I's).
func cmdAddr(e env, args []string) error {
	if len(args) != 2 {
		return usageError{"addr net4|net6|node4|node6|pod4|pod6 N"}
	}
	k, err := strconv.Atoi(args[1])
	if err != nil || k < 0 {
		return usageError{"addr: " + args[1] + " is not a number"}
	}
	v, ok := map[string]func(int) fmt.Stringer{
		"net4":  func(k int) fmt.Stringer { return e.plan.Net4At(k) },
		"net6":  func(k int) fmt.Stringer { return e.plan.Net6At(k) },
		"node4": func(i int) fmt.Stringer { return e.plan.Node4(i) },
		"node6": func(i int) fmt.Stringer { return e.plan.Node6(i) },
		"pod4":  func(i int) fmt.Stringer { return e.plan.Pod4Of(i) },
		"pod6":  func(i int) fmt.Stringer { return e.plan.Pod6Of(i) },
	}[args[0]]
	if !ok {
		return usageError{"addr: " + args[0] + ": want net4, net6, node4, node6, pod4 or pod6"}
	}
	fmt.Println(v(k))
	return nil
}

// cmdPlan: the plan's networks and the engine's data root (the image cache, the runs' outputs) as shell assignments (NET4, NET6, POD4, DATA), for hack/ovs-in-docker.sh.
func cmdPlan(e env, args []string) error {
	if err := parse(flags("plan"), args, 0); err != nil {
		return err
	}
	fmt.Printf("NET4=%s\nNET6=%s\nPOD4=%s\nDATA=%s\n", e.plan.Net4, e.plan.Net6, e.plan.Pod4, e.paths.Data)
	return nil
}

// cmdRm: rm [-images]: the harness's containers, network and volumes (and images) removed; the engine left running.
func cmdRm(e env, args []string) error {
	fs := flags("rm")
	withImages := fs.Bool("images", false, "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	if err := nodes.Remove(eng, e.plan, *withImages); errors.Is(err, nodes.ErrCgroupsLeft) {
		logf("warning: %v", err)
	} else if err != nil {
		return err
	}
	return nil
}

// cmdUp: up [-nodes N] (default 2): N nodes without Kubernetes; one line
// per node. up -kube [-nodes N] (default 3) [-multus] [-runtime
// containerd|crio] [-subnets 1|2]: the Kubernetes cluster (upKube).
func cmdUp(e env, args []string) error {
	fs := flags("up")
	n := fs.Int("nodes", 0, "")
	withKube := fs.Bool("kube", false, "")
	multus := fs.Bool("multus", false, "")
	runtime := fs.String("runtime", "containerd", "")
	subnets := fs.String("subnets", "", "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	e, err := e.withSubnets("up", *subnets)
	if err != nil {
		return err
	}
	var lines []string
	switch {
	case *withKube:
		if *n == 0 {
			*n = 3
		}
		lines, err = e.upKube(*n, *multus, *runtime)
	case *multus || *runtime != "containerd":
		return usageError{"up: -multus and -runtime go with -kube"}
	default:
		if *n == 0 {
			*n = 2
		}
		_, lines, err = e.up(*n)
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	return err
}

// withSubnets is e with the plan of subnets ("": as it is) for the
// command cmd; the plan reads it as OID_SUBNETS, and so do the commands run
// after this one.
func (e env) withSubnets(cmd, subnets string) (env, error) {
	if subnets == "" {
		return e, nil
	}
	os.Setenv("OID_SUBNETS", subnets)
	plan, err := topology.FromEnv(os.Getenv)
	if err != nil {
		return e, usageError{cmd + ": " + err.Error()}
	}
	e.plan = plan
	return e, nil
}

func (e env) up(n int) (*engine.Engine, []string, error) {
	if err := e.plan.CheckNodes(n); err != nil {
		return nil, nil, usageError{"up: " + err.Error()}
	}
	if e.plan.Subnets > 1 {
		return nil, nil, usageError{"up: -subnets 2 needs -kube (the nodes' pod routes across subnets are the node agent's tunnel)"}
	}
	if os.Geteuid() != 0 && os.Getenv("DOCKER_HOST") == "" && syscall.Access("/var/run/docker.sock", 2) != nil {
		return nil, nil, errors.New("up: needs root (or a Docker engine of yours)")
	}
	eng, err := e.startEngine()
	if err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	if err := e.buildImages(eng); err != nil {
		return nil, nil, err
	}
	if err := nodes.Remove(eng, e.plan, false); err != nil && !errors.Is(err, nodes.ErrCgroupsLeft) {
		return nil, nil, err
	}
	if err := e.network(eng); err != nil {
		return nil, nil, err
	}
	t1 := time.Now()
	for i := 1; i <= n; i++ {
		if err := nodes.RunNode(eng, e.plan, i, n); err != nil {
			return nil, nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for i := 1; i <= n; i++ {
		if err := nodes.WaitReady(ctx, eng, e.plan, topology.Node(i)); err != nil {
			return nil, nil, fmt.Errorf("up failed: %w", err)
		}
	}
	dp := nodes.Datapath()
	note := ""
	if dp == "netdev" {
		note = " (no openvswitch kernel module on this host)"
	}
	logf("%d nodes up in %d s (%d s with the images); datapath %s%s", n, int(time.Since(t1).Seconds()), int(time.Since(t0).Seconds()), dp, note)
	lines := []string{"DATAPATH " + dp}
	for i := 1; i <= n; i++ {
		lines = append(lines, e.plan.NodeLine(i))
	}
	return eng, lines, nil
}

// cmdDown: down [-images]: the nodes, network, volumes (and images) removed; the
// private engine stopped if it was started here (and its data root removed
// with -images); the Kubernetes cluster's state (downKube). Idempotent.
func cmdDown(e env, args []string) error {
	fs := flags("down")
	withImages := fs.Bool("images", false, "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if _, err := e.engine(); err == nil {
		rm := []string{}
		if *withImages {
			rm = append(rm, "-images")
		}
		if err := cmdRm(e, rm); err != nil {
			return err
		}
	}
	if err := engine.Stop(e.paths, logf); err != nil {
		return err
	}
	if err := e.downKube(); err != nil {
		return err
	}
	if *withImages {
		if err := os.RemoveAll(images.RootCache); err != nil {
			return err
		}
		return os.RemoveAll(e.paths.Data)
	}
	return nil
}

// cmdExec: exec NODE CMD...: CMD in the node, stdin passed through (a
// terminal when this has one), its exit status.
func cmdExec(e env, args []string) error {
	if len(args) < 2 {
		return usageError{"exec NODE CMD..."}
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	dargs := []string{"docker", "exec", "-i"}
	if term.IsTerminal(0) && term.IsTerminal(1) { // (a terminal, not any character device: /dev/null is one)
		dargs = append(dargs, "-t")
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		return err
	}
	dargs = append(dargs, e.plan.Container(args[0]))
	return syscall.Exec(docker, append(dargs, args[1:]...), append(os.Environ(), "DOCKER_HOST="+eng.Host))
}

// cmdRestart: restart NODE: docker restart, until the node has booted again.
func cmdRestart(e env, args []string) error {
	if len(args) != 1 {
		return usageError{"restart NODE"}
	}
	eng, err := e.engine()
	if err != nil {
		return err
	}
	if _, err := eng.Run("restart", e.plan.Container(args[0])); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return nodes.WaitReady(ctx, eng, e.plan, args[0])
}

// repoPath is a path of the repository.
func (e env) repoPath(p string) string { return filepath.Join(e.repo, p) }

// cmdKubeWait: kube-wait -kubeconfig FILE [-container NAME] [-nodes N]
// [-timeout D]: until the API server is ready (while the container serving
// it runs), then, with -nodes, until N Nodes have their pod CIDRs.
func cmdKubeWait(e env, args []string) error {
	fs := flags("kube-wait")
	kubeconfig := fs.String("kubeconfig", "", "")
	container := fs.String("container", "", "")
	n := fs.Int("nodes", 0, "")
	timeout := fs.Duration("timeout", 5*time.Minute, "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return usageError{"kube-wait: -kubeconfig FILE"}
	}
	return e.kubeWait(*kubeconfig, *container, *n, *timeout)
}

// kubeWait waits until the API server of kubeconfig is ready (while the
// container serving it, unless "", runs), then, unless n is 0, until n
// Nodes have their pod CIDRs (cmdKubeWait).
func (e env) kubeWait(kubeconfig, container string, n int, timeout time.Duration) error {
	c, err := kube.Client(kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	t0 := time.Now()
	alive := func() error { return nil }
	if container != "" {
		eng, err := e.engine()
		if err != nil {
			return err
		}
		alive = func() error {
			if out, _ := eng.Run("inspect", "-f", "{{.State.Running}}", e.plan.Container(container)); out != "true" {
				return fmt.Errorf("container %s is not running", e.plan.Container(container))
			}
			return nil
		}
	}
	if err := kube.WaitReady(ctx, c, alive); err != nil {
		return fmt.Errorf("the API server did not become ready: %w", err)
	}
	if n == 0 {
		logf("API server ready in %d s", int(time.Since(t0).Seconds()))
		return nil
	}
	if err := kube.WaitNodes(ctx, c, n); err != nil {
		return err
	}
	logf("%d nodes registered in %d s", n, int(time.Since(t0).Seconds()))
	return nil
}
