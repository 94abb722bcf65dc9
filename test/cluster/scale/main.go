// Command scale is the cluster benchmark of `hack/ovs-in-docker.sh bench
// -kube`: on the cluster of the harness, with whatever CNI chain the nodes
// run, it scales P Deployments (one hostPort each, a port of its own per
// Deployment, so that each Deployment's replicas land on distinct nodes and
// every node gets P pods) from 0 to one replica per node and times it until
// every pod is Ready, checks every pod's hostPort from this host, then
// scales them to 0 and times it until every pod is gone. Meanwhile it samples
// the node agent's RSS and CPU (the ovsflow-agent processes, found in this
// host's /proc) and the CPU of the harness's processes, and reads kubelet's
// sandbox timings. One run writes one JSON file; -report prints the tables
// of several runs.
//
//	scale -kubeconfig F -chain NAME -pods P -out FILE [-idle S] [-agent ovsflow-agent] [-cgroups A,B]
//	scale -report FILE...
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "the admin kubeconfig")
	flag.StringVar(&o.chain, "chain", "", "the name of the CNI chain the nodes run (a label in the tables)")
	flag.StringVar(&o.namespace, "namespace", "scale-bench", "namespace of the workload (made and removed by the run)")
	flag.IntVar(&o.pods, "pods", 110, "pods per node")
	flag.IntVar(&o.portBase, "port-base", 20000, "hostPort of the first Deployment (the others follow)")
	flag.StringVar(&o.image, "image", "rt.local/ovsflow-app:1", "the pods' image (on every node; never pulled)")
	flag.IntVar(&o.probePeriod, "probe-period", 2, "seconds between the pods' TCP readiness probes (0: no probe)")
	flag.DurationVar(&o.idle, "idle", 30*time.Second, "sampling time with no pods before the scale-up, and with all pods after it (0: none)")
	flag.StringVar(&o.agent, "agent", "", "process name of the node agent to sample (\"\": none)")
	flag.StringVar(&o.cgroups, "cgroups", "", "comma-separated substrings of the cgroup paths of the harness's processes (CPU by process)")
	flag.IntVar(&o.containerdPort, "containerd-metrics-port", 0, "port of the nodes' containerd metrics on their InternalIPv4 (0: not read)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "limit of each scale phase")
	flag.StringVar(&o.out, "out", "", "the run's JSON file")
	report := flag.Bool("report", false, "print the tables of the JSON files given as arguments")
	flag.Parse()
	if *report {
		if err := printReport(os.Stdout, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
		return
	}
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		flag.Usage()
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

type options struct {
	kubeconfig, chain, namespace, image, agent, cgroups, out string
	pods, portBase, probePeriod, containerdPort              int
	idle, timeout                                            time.Duration
}

func (o options) check() error {
	switch {
	case o.kubeconfig == "":
		return fmt.Errorf("-kubeconfig is required")
	case o.chain == "":
		return fmt.Errorf("-chain is required")
	case o.out == "":
		return fmt.Errorf("-out is required")
	case o.pods < 1:
		return fmt.Errorf("-pods %d: want at least 1", o.pods)
	case o.portBase < 1 || o.portBase+o.pods > 65536:
		return fmt.Errorf("-port-base %d: the ports %d..%d do not fit", o.portBase, o.portBase, o.portBase+o.pods-1)
	}
	return nil
}

func (o options) cgroupMatch() []string {
	var m []string
	for _, s := range strings.Split(o.cgroups, ",") {
		if s = strings.TrimSpace(s); s != "" {
			m = append(m, s)
		}
	}
	return m
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scale: %s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05.000")}, args...)...)
}

func run(o options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %q: %w", o.kubeconfig, err)
	}
	// The driver's own requests must not be what limits the run.
	cfg.QPS, cfg.Burst = 200, 400
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ctx := context.Background()
	b, err := newBench(ctx, kube, o)
	if err != nil {
		return err
	}
	res, err := b.run(ctx)
	if res != nil {
		data, jerr := json.MarshalIndent(res, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(o.out, append(data, '\n'), 0o644)
		}
		if jerr != nil && err == nil {
			err = fmt.Errorf("writing %s: %w", o.out, jerr)
		}
	}
	return err
}
