package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const appLabel = "ovsflow.io/scale-bench"

// Result is one run: the scale-up and scale-down timings, the hostPort
// check, and what was sampled in each phase.
type Result struct {
	Chain       string     `json:"chain"`
	Nodes       []string   `json:"nodes"`
	PodsPerNode int        `json:"podsPerNode"`
	Started     time.Time  `json:"started"`
	Up          Timing     `json:"up"`
	Down        Timing     `json:"down"`
	HostPorts   PortCheck  `json:"hostPorts"`
	Phases      []Phase    `json:"phases"`
	Failures    []string   `json:"failures,omitempty"` // Warning events of the workload's pods (reason: count)
	Machine     MachineRef `json:"machine"`
}

// MachineRef is what the figures ran on.
type MachineRef struct {
	CPUs int `json:"cpus"`
}

// Timing: from the first scale request until the last pod reached the goal
// (Ready, or gone), and the milestones of the pods on the way, as seen on
// the watch (seconds from the first scale request).
type Timing struct {
	Pods       int                   `json:"pods"`
	Requests   float64               `json:"requests"` // all scale requests answered
	All        float64               `json:"all"`
	Milestones map[string]Quantiles  `json:"milestones"`
	Kubelet    map[string]OpDuration `json:"kubelet,omitempty"`    // kubelet's runtime operations during the phase, all nodes
	Containerd map[string]OpDuration `json:"containerd,omitempty"` // containerd's sandbox network set-up and teardown (the CNI chain)
}

// Quantiles of one milestone over the pods.
type Quantiles struct {
	N   int     `json:"n"`
	Min float64 `json:"min"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	Max float64 `json:"max"`
}

// OpDuration: kubelet_runtime_operations_duration_seconds over a phase.
type OpDuration struct {
	Count  int     `json:"count"`
	Mean   float64 `json:"mean"`             // seconds
	Errors int     `json:"errors,omitempty"` // of them, failed (kubelet_runtime_operations_errors_total)
}

// PortCheck: every pod's hostPort dialled on its node's address of the pod's family.
type PortCheck struct {
	Checked int      `json:"checked"`
	OK      int      `json:"ok"`
	Errors  []string `json:"errors,omitempty"` // the first few
}

type bench struct {
	kube  kubernetes.Interface
	o     options
	nodes []corev1.Node
	track *tracker
	samp  *sampler
}

func newBench(ctx context.Context, kube kubernetes.Interface, o options) (*bench, error) {
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	b := &bench{kube: kube, o: o}
	for _, n := range list.Items {
		if !n.Spec.Unschedulable {
			b.nodes = append(b.nodes, n)
		}
	}
	if len(b.nodes) == 0 {
		return nil, errors.New("no schedulable node")
	}
	slices.SortFunc(b.nodes, func(x, y corev1.Node) int { return strings.Compare(x.Name, y.Name) })
	return b, nil
}

func (b *bench) names() []string {
	var s []string
	for _, n := range b.nodes {
		s = append(s, n.Name)
	}
	return s
}

func (b *bench) deployment(j int) string { return fmt.Sprintf("hp%03d", j) }

func (b *bench) run(ctx context.Context) (*Result, error) {
	o := b.o
	res := &Result{Chain: o.chain, Nodes: b.names(), PodsPerNode: o.pods, Started: time.Now().UTC(), Machine: MachineRef{CPUs: numCPU()}}
	logf("chain %s: %d nodes (%s), %d pods each, hostPorts %d..%d", o.chain, len(b.nodes), strings.Join(b.names(), " "), o.pods, o.portBase, o.portBase+o.pods-1)
	if err := b.setup(ctx); err != nil {
		return nil, err
	}
	defer b.teardown()
	var err error
	b.track, err = startTracker(ctx, b.kube, o.namespace)
	if err != nil {
		return nil, err
	}
	defer b.track.stop()
	b.samp = startSampler(o.agent, b.names(), o.cgroupMatch())
	defer b.samp.stop()
	want := len(b.nodes) * o.pods

	if o.idle > 0 {
		res.Phases = append(res.Phases, b.hold(ctx, "idle, no pods", o.idle))
	}

	// Scale-up: every Deployment to one replica per node.
	ph := b.samp.begin("scale-up")
	k0, c0 := b.kubeletOps(ctx), b.containerdOps(ctx)
	t0 := time.Now()
	b.track.reset(t0)
	req, err := b.scaleAll(ctx, int32(len(b.nodes)))
	if err != nil {
		return res, err
	}
	err = b.track.waitFor(ctx, o.timeout, func(s trackerState) bool { return s.ready == want && s.live == want })
	all := time.Since(t0)
	res.Phases = append(res.Phases, b.samp.end(ph))
	res.Up = b.track.timing(want, req, all, "created", "scheduled", "sandbox ready", "Ready")
	res.Up.Kubelet, res.Up.Containerd = opDelta(k0, b.kubeletOps(ctx)), opDelta(c0, b.containerdOps(ctx))
	if err != nil {
		res.Failures = b.failures(ctx)
		return res, fmt.Errorf("scale-up: %d of %d pods Ready after %s: %w", b.track.state().ready, want, all.Round(time.Second), err)
	}
	logf("scale-up: %d pods Ready in %.1f s", want, all.Seconds())
	if err := b.checkSpread(ctx); err != nil {
		return res, err
	}

	if o.idle > 0 {
		res.Phases = append(res.Phases, b.hold(ctx, fmt.Sprintf("idle, %d pods per node", o.pods), o.idle))
	}
	res.HostPorts = b.checkHostPorts(ctx)
	logf("hostPorts: %d of %d answered", res.HostPorts.OK, res.HostPorts.Checked)

	// Scale-down: every Deployment to 0, until no pod is left.
	ph = b.samp.begin("scale-down")
	k0, c0 = b.kubeletOps(ctx), b.containerdOps(ctx)
	t0 = time.Now()
	b.track.reset(t0)
	req, err = b.scaleAll(ctx, 0)
	if err != nil {
		return res, err
	}
	err = b.track.waitFor(ctx, o.timeout, func(s trackerState) bool { return s.live == 0 })
	all = time.Since(t0)
	res.Phases = append(res.Phases, b.samp.end(ph))
	res.Down = b.track.timing(want, req, all, "terminating", "gone")
	res.Down.Kubelet, res.Down.Containerd = opDelta(k0, b.kubeletOps(ctx)), opDelta(c0, b.containerdOps(ctx))
	res.Failures = b.failures(ctx)
	if err != nil {
		return res, fmt.Errorf("scale-down: %d pods left after %s: %w", b.track.state().live, all.Round(time.Second), err)
	}
	logf("scale-down: all gone in %.1f s", all.Seconds())
	if res.HostPorts.OK != res.HostPorts.Checked || res.HostPorts.Checked != want {
		return res, fmt.Errorf("hostPorts: %d of %d pods answered (%d checked)", res.HostPorts.OK, want, res.HostPorts.Checked)
	}
	return res, nil
}

// hold samples for d with nothing changing.
func (b *bench) hold(ctx context.Context, name string, d time.Duration) Phase {
	logf("%s: sampling for %s", name, d)
	ph := b.samp.begin(name)
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	return b.samp.end(ph)
}

// setup: the namespace and P Deployments at 0 replicas, each with its
// ReplicaSet in place (so that the scale-up times the pods, not the
// Deployment controller's first sync).
func (b *bench) setup(ctx context.Context) error {
	ns := b.o.namespace
	if err := b.deleteNamespace(ctx); err != nil {
		return err
	}
	_, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	// Pods need the namespace's default ServiceAccount even without its token.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := b.kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("namespace %s: no default ServiceAccount: %w", ns, err)
	}
	for j := 0; j < b.o.pods; j++ {
		if _, err := b.kube.AppsV1().Deployments(ns).Create(ctx, b.deploymentObject(j), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating deployment %s: %w", b.deployment(j), err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		rs, err := b.kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: appLabel})
		if err != nil {
			return false, nil
		}
		return len(rs.Items) == b.o.pods, nil
	})
}

func (b *bench) deploymentObject(j int) *appsv1.Deployment {
	name := b.deployment(j)
	labels := map[string]string{appLabel: "", "deployment": name}
	zero, grace, no := int32(0), int64(2), false
	c := corev1.Container{
		Name:            "app",
		Image:           b.o.image,
		ImagePullPolicy: corev1.PullNever,
		Ports:           []corev1.ContainerPort{{ContainerPort: 80, HostPort: int32(b.o.portBase + j), Protocol: corev1.ProtocolTCP}},
	}
	if b.o.probePeriod > 0 {
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}},
			PeriodSeconds: int32(b.o.probePeriod),
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					DNSPolicy:                     corev1.DNSDefault,
					TerminationGracePeriodSeconds: &grace,
					AutomountServiceAccountToken:  &no,
					EnableServiceLinks:            &no,
					Containers:                    []corev1.Container{c},
				},
			},
		},
	}
}

// scaleAll sets every Deployment's replicas through its scale subresource,
// as kubectl scale does, 16 requests at a time; it returns when all were
// answered.
func (b *bench) scaleAll(ctx context.Context, replicas int32) (time.Duration, error) {
	t0 := time.Now()
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	jobs := make(chan int)
	errs := make(chan error, b.o.pods)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				_, err := b.kube.AppsV1().Deployments(b.o.namespace).Patch(ctx, b.deployment(j), types.MergePatchType, patch, metav1.PatchOptions{}, "scale")
				if err != nil {
					errs <- fmt.Errorf("scaling deployment %s to %d: %w", b.deployment(j), replicas, err)
				}
			}
		}()
	}
	for j := 0; j < b.o.pods; j++ {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return time.Since(t0), errors.Join(all...)
}

// checkSpread: P pods on every node.
func (b *bench) checkSpread(ctx context.Context) error {
	per := map[string]int{}
	for _, p := range b.track.pods() {
		per[p.Spec.NodeName]++
	}
	for _, n := range b.nodes {
		if per[n.Name] != b.o.pods {
			return fmt.Errorf("node %s has %d of the pods, want %d (all: %v)", n.Name, per[n.Name], b.o.pods, per)
		}
	}
	return nil
}

// checkHostPorts dials every pod's hostPort on its node's InternalIP of
// the pod's family and expects the app's "hello from POD" line.
func (b *bench) checkHostPorts(ctx context.Context) PortCheck {
	addrs := map[string][]netip.Addr{}
	for _, n := range b.nodes {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				addrs[n.Name] = append(addrs[n.Name], ip)
			}
		}
	}
	var mu sync.Mutex
	var pc PortCheck
	note := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		pc.Checked++
		if err == nil {
			pc.OK++
		} else if len(pc.Errors) < 5 {
			pc.Errors = append(pc.Errors, err.Error())
		}
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, p := range b.track.pods() {
		podIP, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil {
			note(fmt.Errorf("pod %s: pod IP %q: %w", p.Name, p.Status.PodIP, err))
			continue
		}
		var node netip.Addr
		for _, a := range addrs[p.Spec.NodeName] {
			if a.Is4() == podIP.Is4() {
				node = a
				break
			}
		}
		if !node.IsValid() {
			note(fmt.Errorf("pod %s: node %s has no InternalIP of the pod's family", p.Name, p.Spec.NodeName))
			continue
		}
		hp := int(p.Spec.Containers[0].Ports[0].HostPort)
		wg.Add(1)
		sem <- struct{}{}
		go func(name string, ap netip.AddrPort) {
			defer wg.Done()
			defer func() { <-sem }()
			note(hello(ctx, ap, name))
		}(p.Name, netip.AddrPortFrom(node, uint16(hp)))
	}
	wg.Wait()
	return pc
}

func hello(ctx context.Context, ap netip.AddrPort, pod string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ap.String())
	if err != nil {
		return fmt.Errorf("pod %s: dialling %s: %w", pod, ap, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("pod %s: reading from %s: %w", pod, ap, err)
	}
	if !strings.HasPrefix(line, "hello from "+pod+" ") {
		return fmt.Errorf("pod %s: %s answered %q", pod, ap, strings.TrimSpace(line))
	}
	return nil
}

// failures: the Warning events of the namespace, counted by reason, each
// with the message of one of them.
func (b *bench) failures(ctx context.Context) []string {
	ev, err := b.kube.CoreV1().Events(b.o.namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return []string{"listing events: " + err.Error()}
	}
	n := map[string]int{}
	msg := map[string]string{}
	for _, e := range ev.Items {
		c := int(e.Count)
		if e.Series != nil {
			c += int(e.Series.Count)
		}
		n[e.Reason] += max(c, 1)
		msg[e.Reason] = e.Message
	}
	var out []string
	for r, c := range n {
		out = append(out, fmt.Sprintf("%s: %d (%q)", r, c, msg[r]))
	}
	slices.Sort(out)
	return out
}

func (b *bench) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := b.deleteNamespace(ctx); err != nil {
		logf("removing namespace %s: %v", b.o.namespace, err)
	}
}

// deleteNamespace removes the namespace, waiting until it is gone.
func (b *bench) deleteNamespace(ctx context.Context) error {
	ns := b.o.namespace
	err := b.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting namespace %s: %w", ns, err)
	}
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := b.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// kubeletOps reads kubelet_runtime_operations_duration_seconds (sum and
// count per operation) and kubelet_runtime_operations_errors_total of
// every node, through the API server's node proxy.
func (b *bench) kubeletOps(ctx context.Context) map[string][3]float64 {
	out := map[string][3]float64{}
	for _, n := range b.nodes {
		raw, err := b.kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n.Name, "proxy/metrics").DoRaw(ctx)
		if err != nil {
			logf("kubelet metrics of %s: %v", n.Name, err)
			continue
		}
		if err := addOps(out, string(raw), "kubelet_runtime_operations_duration_seconds", "kubelet_runtime_operations_errors_total", "operation_type"); err != nil {
			logf("kubelet metrics of %s: %v", n.Name, err)
		}
	}
	return out
}

// containerdOps reads the CRI plugin's sandbox network timers of every
// node's containerd (its metrics on the node's InternalIPv4, port -containerd-metrics-port).
func (b *bench) containerdOps(ctx context.Context) map[string][3]float64 {
	out := map[string][3]float64{}
	if b.o.containerdPort == 0 {
		return out
	}
	for _, n := range b.nodes {
		var url string
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP && ip.Is4() {
				url = fmt.Sprintf("http://%s/v1/metrics", netip.AddrPortFrom(ip, uint16(b.o.containerdPort)))
			}
		}
		raw, err := httpGet(ctx, url)
		if err != nil {
			logf("containerd metrics of %s: %v", n.Name, err)
			continue
		}
		for _, m := range []string{"containerd_cri_sandbox_create_network_seconds", "containerd_cri_sandbox_delete_network_seconds"} {
			if err := addOps(out, raw, m, "", ""); err != nil {
				logf("containerd metrics of %s: %v", n.Name, err)
			}
		}
	}
	return out
}

func httpGet(ctx context.Context, url string) (string, error) {
	if url == "" {
		return "", errors.New("no InternalIP of IPv4")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), nil
}

// addOps adds to out, per operation, the sum and count of the histogram
// hist in the Prometheus text and (errs: a counter of the same label, ""
// none) its failures, keyed by the value of label ("": by the metric's name
// without its namespace and unit).
func addOps(out map[string][3]float64, text, hist, errs, label string) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return err
	}
	key := func(m *dto.Metric, name string) string {
		if label == "" {
			return strings.TrimSuffix(strings.TrimPrefix(name, "containerd_cri_"), "_seconds")
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				return l.GetValue()
			}
		}
		return ""
	}
	for _, m := range fams[hist].GetMetric() {
		if k, h := key(m, hist), m.GetHistogram(); k != "" && h != nil {
			s := out[k]
			s[0] += h.GetSampleSum()
			s[1] += float64(h.GetSampleCount())
			out[k] = s
		}
	}
	if errs == "" {
		return nil
	}
	for _, m := range fams[errs].GetMetric() {
		if k, c := key(m, errs), m.GetCounter(); k != "" && c != nil {
			s := out[k]
			s[2] += c.GetValue()
			out[k] = s
		}
	}
	return nil
}

// opDelta: the operations between two readings.
func opDelta(before, after map[string][3]float64) map[string]OpDuration {
	out := map[string]OpDuration{}
	for op, a := range after {
		sum := a[0] - before[op][0]
		cnt := a[1] - before[op][1]
		if cnt > 0.5 {
			out[op] = OpDuration{Count: int(cnt + 0.5), Mean: sum / cnt, Errors: int(a[2] - before[op][2] + 0.5)}
		}
	}
	return out
}
