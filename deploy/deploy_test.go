// Package deploy holds the Kubernetes manifests and the node installer; its
// tests decode the manifests with the Kubernetes API types and check that
// images, paths, names and the conflist agree with each other, with the
// agent's flags (pkg/agent), with the image (Dockerfile), with
// install-cni.sh and with examples/, and run install-cni.sh against scratch
// directories. No cluster and no root needed,
// but for TestNodePrep, which runs node-prep.sh against a private Open
// vSwitch (root; skipped loudly without, failed under CI).
package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/ovsflow/ovs-cni/pkg/agent"
	"github.com/ovsflow/ovs-cni/test/framework"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const manifest = "ovsflow-cni.yaml"

type objects struct {
	sa  *corev1.ServiceAccount
	cm  *corev1.ConfigMap
	ds  *appsv1.DaemonSet
	cr  *rbacv1.ClusterRole
	crb *rbacv1.ClusterRoleBinding
}

// load decodes every document of the manifest into its API type, strictly:
// an unknown or misspelt field is an error.
func load(t *testing.T) objects {
	t.Helper()
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var o objects
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var into any
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 ServiceAccount":
			o.sa = &corev1.ServiceAccount{}
			into = o.sa
		case "v1 ConfigMap":
			o.cm = &corev1.ConfigMap{}
			into = o.cm
		case "apps/v1 DaemonSet":
			o.ds = &appsv1.DaemonSet{}
			into = o.ds
		case "rbac.authorization.k8s.io/v1 ClusterRole":
			o.cr = &rbacv1.ClusterRole{}
			into = o.cr
		case "rbac.authorization.k8s.io/v1 ClusterRoleBinding":
			o.crb = &rbacv1.ClusterRoleBinding{}
			into = o.crb
		default:
			t.Fatalf("document %d: unexpected %s %s (the agent needs no other object)", i, meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("document %d (%s): %v", i, meta.Kind, err)
		}
	}
	if o.sa == nil || o.cm == nil || o.ds == nil || o.cr == nil || o.crb == nil {
		t.Fatalf("want a ServiceAccount, a ClusterRole and its binding, a ConfigMap and a DaemonSet; got %+v", o)
	}
	return o
}

// envOf returns the literal environment of c; a variable taken from
// elsewhere (valueFrom: NODE_NAME from the downward API) has no value here.
func envOf(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			m[e.Name] = e.Value
		}
	}
	return m
}

// mountOf returns the mount path of the volume name in container c.
func mountOf(c corev1.Container, name string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == name {
			return m.MountPath
		}
	}
	return ""
}

func TestManifestObjects(t *testing.T) {
	o := load(t)
	ns := o.ds.Namespace
	if ns == "" || o.sa.Namespace != ns || o.cm.Namespace != ns {
		t.Errorf("namespaces: ServiceAccount %q, ConfigMap %q, DaemonSet %q: want one, set", o.sa.Namespace, o.cm.Namespace, ns)
	}
	spec := o.ds.Spec.Template.Spec
	if spec.ServiceAccountName != o.sa.Name {
		t.Errorf("DaemonSet serviceAccountName %q, want %q", spec.ServiceAccountName, o.sa.Name)
	}
	for what, v := range map[string]*bool{"ServiceAccount": o.sa.AutomountServiceAccountToken, "pod": spec.AutomountServiceAccountToken} {
		if v == nil || *v {
			t.Errorf("%s automountServiceAccountToken: want false (the token is projected by hand into the agent)", what)
		}
	}
	sel := o.ds.Spec.Selector
	if sel == nil || len(sel.MatchLabels) == 0 {
		t.Fatal("DaemonSet has no selector")
	}
	for k, v := range sel.MatchLabels {
		if o.ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template labels %v", k, v, o.ds.Spec.Template.Labels)
		}
	}
	if !spec.HostNetwork {
		t.Error("hostNetwork: want true (the node has no pod network before the CNI is installed)")
	}
	tolerant := false
	for _, tol := range spec.Tolerations {
		if tol.Operator == corev1.TolerationOpExists && tol.Key == "" {
			tolerant = true
		}
	}
	if !tolerant {
		t.Error("tolerations: want {operator: Exists} (nodes are NotReady until a CNI is installed)")
	}
}

// agentOf returns the DaemonSet's one container, the agent, and its
// configuration as the agent reads its command.
func agentOf(t *testing.T, o objects) (corev1.Container, agent.Config) {
	t.Helper()
	spec := o.ds.Spec.Template.Spec
	if len(spec.InitContainers) != 0 || len(spec.Containers) != 1 || spec.Containers[0].Name != "agent" {
		t.Fatalf("want one container, agent, and no init container; got %d and %d", len(spec.InitContainers), len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Command) == 0 {
		t.Fatal("agent: no command")
	}
	mode, cfg, err := agent.ParseArgs(c.Command[1:], io.Discard)
	if err != nil || mode != "run" {
		t.Fatalf("agent command %q: mode %q, %v", c.Command, mode, err)
	}
	return c, cfg
}

func TestManifestImageAndPaths(t *testing.T) {
	o := load(t)
	spec := o.ds.Spec.Template.Spec
	c, cfg := agentOf(t, o)
	dockerfile, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	image := c.Image
	if _, tag, ok := strings.Cut(path.Base(image), ":"); !ok || tag == "" || tag == "latest" {
		t.Errorf("image %q: want a pinned tag", image)
	}
	if !strings.Contains(string(dockerfile), "-t "+image+" ") {
		t.Errorf("Dockerfile's build command does not tag %s", image)
	}
	if c.Command[0] != cfg.PluginSrc+"/ovsflow-agent" {
		t.Errorf("command %q: want the agent in -plugin-src %s", c.Command[0], cfg.PluginSrc)
	}
	if !regexp.MustCompile(`(?m)^ENTRYPOINT \["` + regexp.QuoteMeta(c.Command[0]) + `"\]$`).Match(dockerfile) {
		t.Errorf("the Dockerfile's ENTRYPOINT is not %s", c.Command[0])
	}
	for _, p := range append(append([]string{"ovsflow-agent"}, cfg.Plugins...), cfg.OptionalPlugins...) {
		if !regexp.MustCompile(`(?m)^COPY --from=build .*/out/` + regexp.QuoteMeta(p) + ` .*` + regexp.QuoteMeta(cfg.PluginSrc) + `/$`).Match(dockerfile) {
			t.Errorf("%s: the Dockerfile does not copy it into %s", p, cfg.PluginSrc)
		}
	}
	if !strings.Contains(string(dockerfile), "./cmd/ovsflow-agent ") {
		t.Error("the Dockerfile does not build ./cmd/ovsflow-agent")
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for flag, host := range map[string]string{cfg.CNIBinDir: "/opt/cni/bin", cfg.CNIConfDir: "/etc/cni/net.d", "/var/run/openvswitch": "/var/run/openvswitch"} {
		var vol string
		for name, v := range volumes {
			if v.HostPath != nil && v.HostPath.Path == host {
				vol = name
			}
		}
		if vol == "" {
			t.Errorf("no hostPath volume for %s", host)
		} else if got := mountOf(c, vol); got != flag {
			t.Errorf("the agent uses %q but hostPath %s is mounted at %q", flag, host, got)
		}
	}
	if cfg.OVSDB.String() != "unix:/var/run/openvswitch/db.sock" {
		t.Errorf("-ovsdb %s, want the socket in the mounted OVS run directory", cfg.OVSDB)
	}
	var cmVol string
	for name, v := range volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == o.cm.Name {
			cmVol = name
		}
	}
	if cmVol == "" {
		t.Fatalf("no volume of ConfigMap %s", o.cm.Name)
	}
	if dir := mountOf(c, cmVol); filepath.Dir(cfg.ConfTemplate) != dir {
		t.Errorf("-conf-template %q is not in the ConfigMap's mount %q", cfg.ConfTemplate, dir)
	}
	if _, ok := o.cm.Data[filepath.Base(cfg.ConfTemplate)]; !ok {
		t.Errorf("-conf-template %q: the ConfigMap has no key %q", cfg.ConfTemplate, filepath.Base(cfg.ConfTemplate))
	}
	// The probes reach the agent where it listens.
	host, port, _ := strings.Cut(cfg.HealthAddr, ":")
	for what, pr := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("no httpGet probe for %s", what)
			continue
		}
		if g := pr.HTTPGet; g.Path != what || g.Host != host || g.Port.String() != port {
			t.Errorf("probe %s: %s:%s%s, want %s%s (-health-addr)", what, g.Host, g.Port.String(), g.Path, cfg.HealthAddr, what)
		}
	}
}

func TestManifestConflist(t *testing.T) {
	o := load(t)
	if len(o.cm.Data) != 1 {
		t.Fatalf("ConfigMap: want one conflist, got keys %v", slices.Collect(mapKeys(o.cm.Data)))
	}
	for key, text := range o.cm.Data {
		if !strings.HasSuffix(key, ".conflist") {
			t.Errorf("ConfigMap key %q: runtimes only read *.conflist (and *.conf, *.json)", key)
		}
		list, err := libcni.NetworkConfFromBytes([]byte(text))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		var raw struct {
			CNIVersion  string   `json:"cniVersion"`
			CNIVersions []string `json:"cniVersions"`
		}
		json.Unmarshal([]byte(text), &raw)
		if raw.CNIVersion != "1.0.0" {
			t.Errorf("%s: cniVersion %s, want 1.0.0 (what runtimes before libcni 1.2 read: containerd 1.6/1.7 and podman 4 refuse 1.1.0)", key, raw.CNIVersion)
		}
		if want := []string{"1.0.0", "1.1.0"}; !slices.Equal(raw.CNIVersions, want) {
			t.Errorf("%s: cniVersions %v, want %v", key, raw.CNIVersions, want)
		}
		// libcni >= 1.2 picks the highest version of cniVersions it supports
		// (then containerd 2.x sends STATUS and GC).
		if list.CNIVersion != "1.1.0" {
			t.Errorf("%s: libcni reads cniVersion %s, want 1.1.0", key, list.CNIVersion)
		}
		var types []string
		for _, p := range list.Plugins {
			types = append(types, p.Network.Type)
		}
		_, cfg := agentOf(t, o)
		for _, ty := range types {
			if !slices.Contains(cfg.Plugins, ty) {
				t.Errorf("%s: plugin %q is not in the agent's -plugins %v", key, ty, cfg.Plugins)
			}
		}
		example, err := os.ReadFile("../examples/containerd.conflist")
		if err != nil {
			t.Fatal(err)
		}
		var got, want any
		json.Unmarshal([]byte(text), &got)
		json.Unmarshal(example, &want)
		// The template's one difference: the agent's confirmation of the pod
		// ranges, which a conflist installed without the agent cannot have.
		confirmed := false
		if m, ok := got.(map[string]any); ok {
			for _, p := range m["plugins"].([]any) {
				if pm := p.(map[string]any); pm["type"] == "ovs-bridge" {
					confirmed = pm["confirmedRanges"] == "/run/ovsflow/pod-ranges"
					delete(pm, "confirmedRanges")
				}
			}
		}
		if !confirmed {
			t.Errorf("%s: ovs-bridge's confirmedRanges is not /run/ovsflow/pod-ranges (the agent's mount)", key)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s differs from examples/containerd.conflist (the network the containerd suite runs)", key)
		}
	}
}

func mapKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// installer runs install-cni.sh against scratch directories.
type installer struct {
	src, bin, conf, conflist string
	env                      []string
}

func newInstaller(t *testing.T) *installer {
	t.Helper()
	d := t.TempDir()
	in := &installer{src: filepath.Join(d, "image"), bin: filepath.Join(d, "node", "opt-cni-bin"),
		conf: filepath.Join(d, "node", "etc-cni-net.d"), conflist: filepath.Join(d, "config", "10-ovsflow.conflist")}
	for _, dir := range []string{in.src, filepath.Dir(in.conflist)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"ovs-bridge", "ovs-bridge-tls", "ovs-portmap", "host-local", "loopback"} {
		if err := os.WriteFile(filepath.Join(in.src, p), []byte("#!/bin/sh\necho "+p+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The renderer is the real one.
	b, err := os.ReadFile(renderer(t))
	if err == nil {
		err = os.WriteFile(filepath.Join(in.src, "ovsflow-conflist"), b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in.conflist, []byte(template("a")), 0o644); err != nil {
		t.Fatal(err)
	}
	in.env = append(os.Environ(), "SRC_BIN_DIR="+in.src, "CNI_BIN_DIR="+in.bin, "CNI_CONF_DIR="+in.conf, "CNI_CONF_SRC="+in.conflist,
		"OVSFLOW_POD_CIDRS=198.51.100.64/26,2001:db8:10:2::/64")
	return in
}

// template is a conflist template (the ConfigMap's shape) of network name.
func template(name string) string {
	return `{"cniVersion":"1.0.0","name":"` + name + `","plugins":[{"type":"ovs-bridge","ipam":{"type":"host-local",
	  "ranges":[[{"subnet":"192.0.2.0/24","gateway":"192.0.2.1"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}]}`
}

var (
	rendererOnce sync.Once
	rendererBin  string
	rendererErr  error
)

// renderer builds cmd/ovsflow-conflist once per test binary.
func renderer(t *testing.T) string {
	t.Helper()
	rendererOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ovsflow-conflist")
		if err != nil {
			rendererErr = err
			return
		}
		rendererBin = filepath.Join(dir, "ovsflow-conflist")
		out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", rendererBin, "../cmd/ovsflow-conflist").CombinedOutput()
		if err != nil {
			rendererErr = fmt.Errorf("building ovsflow-conflist: %w: %s", err, out)
		}
	})
	if rendererErr != nil {
		t.Fatal(rendererErr)
	}
	return rendererBin
}

func (in *installer) run(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("./install-cni.sh", args...)
	cmd.Env = in.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install-cni.sh %v: %v: %s", args, err, out)
	}
	return string(out)
}

// state records what identifies each installed file: content, mode, inode, mtime.
func (in *installer) state(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, dir := range []string{in.bin, in.conf} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			b, _ := os.ReadFile(p)
			st, _ := os.Stat(p)
			m[p] = fmt.Sprintf("%q %v %v inode %d", b, st.Mode(), st.ModTime(), st.Sys().(*syscall.Stat_t).Ino)
		}
	}
	return m
}

func TestInstallCNI(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	in := newInstaller(t)
	out := in.run(t)
	for _, f := range []string{filepath.Join(in.bin, "ovs-bridge"), filepath.Join(in.bin, "ovs-portmap"), filepath.Join(in.bin, "host-local"), filepath.Join(in.bin, "loopback"), filepath.Join(in.conf, "10-ovsflow.conflist")} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatalf("first run (%s): %v", out, err)
		}
		if strings.Contains(f, "bin") && st.Mode().Perm() != 0o755 || !strings.Contains(f, "bin") && st.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v", f, st.Mode())
		}
	}
	before := in.state(t)
	time.Sleep(10 * time.Millisecond) // time is the subject: a file rewritten now would show a later mtime (past the clock's tick)
	if out := in.run(t); out != "" {
		t.Errorf("second run printed %q, want nothing (nothing to do)", out)
	}
	if after := in.state(t); !reflect.DeepEqual(before, after) {
		t.Errorf("second run touched files:\nbefore %v\nafter  %v", before, after)
	}

	// A node's own host-local is kept; ours are replaced when they change.
	os.WriteFile(filepath.Join(in.bin, "host-local"), []byte("node's own"), 0o755)
	os.WriteFile(filepath.Join(in.src, "ovs-bridge"), []byte("#!/bin/sh\necho v2\n"), 0o755)
	out = in.run(t)
	if b, _ := os.ReadFile(filepath.Join(in.bin, "host-local")); string(b) != "node's own" {
		t.Error("the node's host-local was replaced")
	}
	if b, _ := os.ReadFile(filepath.Join(in.bin, "ovs-bridge")); !bytes.Contains(b, []byte("v2")) {
		t.Errorf("a new ovs-bridge was not installed (%s)", out)
	}
	if !strings.Contains(out, "ovs-bridge") || strings.Contains(out, "ovs-portmap") {
		t.Errorf("third run: %q, want one line for ovs-bridge only", out)
	}
	for _, dir := range []string{in.bin, in.conf} {
		if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
			t.Errorf("temporary files left: %v", left)
		}
	}
}

// ranges reads the installed conflist's host-local ranges and routes.
func (in *installer) ranges(t *testing.T) (subnets, gateways, routes []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(in.conf, "10-ovsflow.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Name    string `json:"name"`
		Plugins []struct {
			IPAM struct {
				Ranges [][]struct{ Subnet, Gateway string } `json:"ranges"`
				Routes []struct{ Dst string }               `json:"routes"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Plugins) != 1 || c.Name != "a" {
		t.Fatalf("installed conflist: %v: %s", err, b)
	}
	for _, set := range c.Plugins[0].IPAM.Ranges {
		for _, r := range set {
			subnets, gateways = append(subnets, r.Subnet), append(gateways, r.Gateway)
		}
	}
	for _, r := range c.Plugins[0].IPAM.Routes {
		routes = append(routes, r.Dst)
	}
	return
}

// TestInstallCNIPodCIDRs: the conflist installed carries the node's pod
// ranges, from OVSFLOW_POD_CIDRS, else OVSFLOW_POD_CIDRS_FILE; the gateway
// is each range's first address; without either the installer fails and says why.
func TestInstallCNIPodCIDRs(t *testing.T) {
	in := newInstaller(t)
	in.run(t)
	sub, gw, rt := in.ranges(t)
	if want := []string{"198.51.100.64/26", "2001:db8:10:2::/64"}; !reflect.DeepEqual(sub, want) {
		t.Errorf("subnets %v, want %v", sub, want)
	}
	if want := []string{"198.51.100.65", "2001:db8:10:2::1"}; !reflect.DeepEqual(gw, want) {
		t.Errorf("gateways %v, want %v", gw, want)
	}
	if want := []string{"0.0.0.0/0", "::/0"}; !reflect.DeepEqual(rt, want) {
		t.Errorf("routes %v, want %v", rt, want)
	}

	// From a file (one CIDR a line), IPv4 only: the IPv6 default route goes.
	file := filepath.Join(t.TempDir(), "pod-cidrs")
	os.WriteFile(file, []byte("203.0.113.0/25\n"), 0o644)
	env := slices.DeleteFunc(slices.Clone(in.env), func(e string) bool { return strings.HasPrefix(e, "OVSFLOW_POD_CIDRS=") })
	in.env = append(env, "OVSFLOW_POD_CIDRS_FILE="+file)
	if out := in.run(t); !strings.Contains(out, "10-ovsflow.conflist") {
		t.Errorf("changed ranges: the conflist was not reinstalled (%q)", out)
	}
	sub, gw, rt = in.ranges(t)
	if !reflect.DeepEqual(sub, []string{"203.0.113.0/25"}) || !reflect.DeepEqual(gw, []string{"203.0.113.1"}) || !reflect.DeepEqual(rt, []string{"0.0.0.0/0"}) {
		t.Errorf("from the file: subnets %v gateways %v routes %v", sub, gw, rt)
	}
	// The environment wins over the file.
	in.env = append(in.env, "OVSFLOW_POD_CIDRS=2001:db8:10:3::/64")
	in.run(t)
	if sub, _, rt = in.ranges(t); !reflect.DeepEqual(sub, []string{"2001:db8:10:3::/64"}) || !reflect.DeepEqual(rt, []string{"::/0"}) {
		t.Errorf("OVSFLOW_POD_CIDRS with a file: subnets %v routes %v, want the variable's", sub, rt)
	}

	for what, e := range map[string][]string{
		"neither variable": env,
		"a host address":   append(slices.Clone(env), "OVSFLOW_POD_CIDRS=198.51.100.65/26"),
		"a missing file":   append(slices.Clone(env), "OVSFLOW_POD_CIDRS_FILE=/nonexistent"),
	} {
		before, _ := os.ReadFile(filepath.Join(in.conf, "10-ovsflow.conflist"))
		cmd := exec.Command("./install-cni.sh")
		cmd.Env = e
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%s: install-cni.sh succeeded: %s", what, out)
		}
		if !strings.Contains(string(out), "OVSFLOW_POD_CIDRS") && !strings.Contains(string(out), "pod CIDR") {
			t.Errorf("%s: the failure does not say what is missing: %s", what, out)
		}
		if after, _ := os.ReadFile(filepath.Join(in.conf, "10-ovsflow.conflist")); !bytes.Equal(before, after) {
			t.Errorf("%s: the installed conflist changed", what)
		}
	}
}

func TestInstallCNIWatch(t *testing.T) {
	in := newInstaller(t)
	cmd := exec.Command("./install-cni.sh", "--watch")
	cmd.Env = append(in.env, "WATCH_INTERVAL=0.1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer cmd.Process.Kill()
	dst := filepath.Join(in.conf, "10-ovsflow.conflist")
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		// A hang guard, not a speed claim: a pass of the script forks dozens
		// of commands, which took over 5 s at a load of 48 on 2 cores.
		if !framework.Until(30*time.Second, cond) {
			t.Fatalf("--watch: %s within %v; output:\n%s", what, framework.Scaled(30*time.Second), out.String())
		}
	}
	waitUntil("conflist installed", func() bool { _, err := os.Stat(dst); return err == nil })
	// A changed ConfigMap and a wiped plugin are repaired.
	os.WriteFile(in.conflist, []byte(template("b")), 0o644)
	os.Remove(filepath.Join(in.bin, "ovs-portmap"))
	waitUntil("changed conflist installed", func() bool { b, _ := os.ReadFile(dst); return bytes.Contains(b, []byte(`"b"`)) })
	waitUntil("wiped plugin reinstalled", func() bool { _, err := os.Stat(filepath.Join(in.bin, "ovs-portmap")); return err == nil })
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("--watch exited with %v on SIGTERM, want 0", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("--watch did not stop on SIGTERM")
	}
}

// TestManifestAgentContainer: the agent may open db.sock and br0.mgmt where
// they belong to the openvswitch user (DAC_OVERRIDE) and change routes, nft
// maps and addresses (NET_ADMIN); nothing more.
func TestManifestAgentContainer(t *testing.T) {
	c, _ := agentOf(t, load(t))
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("agent: no securityContext capabilities")
	}
	var add []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	slices.Sort(add)
	if want := []string{"DAC_OVERRIDE", "NET_ADMIN"}; !reflect.DeepEqual(add, want) {
		t.Errorf("agent capabilities add %v, want %v", add, want)
	}
	if len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("agent capabilities drop %v, want [ALL]", sc.Capabilities.Drop)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("agent: want readOnlyRootFilesystem and no privilege escalation")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("agent: privileged")
	}
}

// TestDockerfileVersion: the image's plugins carry the release version of
// its tag (what VERSION prints), and the image carries the renderer.
func TestDockerfileVersion(t *testing.T) {
	image := load(t).ds.Spec.Template.Spec.Containers[0].Image
	_, tag, _ := strings.Cut(path.Base(image), ":")
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := string(b)
	if n := strings.Count(d, "ARG VERSION="+tag+"\n"); n != 2 {
		t.Errorf("Dockerfile: want ARG VERSION=%s in both stages, found %d", tag, n)
	}
	if !strings.Contains(d, "-X github.com/ovsflow/ovs-cni/pkg/buildinfo.Version=${VERSION}") {
		t.Error("Dockerfile: the build does not stamp VERSION into pkg/buildinfo.Version")
	}
	if !regexp.MustCompile(`(?m)^COPY --from=build .*/out/ovsflow-conflist .*/opt/ovsflow/bin/$`).MatchString(d) {
		t.Error("Dockerfile: ovsflow-conflist (install-cni.sh's renderer) is not in /opt/ovsflow/bin")
	}
}

// TestHarnessMatchesDaemonSet: hack/ovs-in-docker's nodes (without the
// agent) install the agent's plugins with install-cni.sh from the same
// paths, and run reconcile as the agent does (the same package, the same
// OVSDB) with the agent's capabilities, so that the harness tests what the
// DaemonSet does.
func TestHarnessMatchesDaemonSet(t *testing.T) {
	c, cfg := agentOf(t, load(t))
	initScript, err := os.ReadFile("../hack/ovs-in-docker/node-init.sh")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"SRC_BIN_DIR": cfg.PluginSrc, "CNI_BIN_DIR": cfg.CNIBinDir, "CNI_CONF_DIR": cfg.CNIConfDir,
		"CNI_CONF_SRC": cfg.ConfTemplate, "PLUGINS": strings.Join(cfg.Plugins, " "), "OPTIONAL_PLUGINS": strings.Join(cfg.OptionalPlugins, " ")} {
		want := k + "=" + v
		if strings.Contains(v, " ") {
			want = k + `="` + v + `"`
		}
		if !bytes.Contains(initScript, []byte(want)) {
			t.Errorf("node-init.sh does not run install-cni.sh with %s", want)
		}
	}
	wrapper, err := os.ReadFile("../hack/ovs-in-docker/oid-reconcile")
	if err != nil {
		t.Fatal(err)
	}
	if cmd := "ovs-portmap reconcile -ovsdb " + cfg.OVSDB.String() + " -watch"; !bytes.Contains(wrapper, []byte(cmd)) {
		t.Errorf("oid-reconcile does not run %q", cmd)
	}
	var caps []string
	for _, c := range c.SecurityContext.Capabilities.Add {
		caps = append(caps, strings.ToLower(string(c)))
	}
	slices.Sort(caps)
	if want := "caps=${OID_RECONCILE_CAPS:-" + strings.Join(caps, ",") + "}"; !bytes.Contains(wrapper, []byte(want)) {
		t.Errorf("oid-reconcile: want %s (the manifest's capabilities)", want)
	}
}

// TestManifestRBAC: the agent may get, list and watch Node objects and
// nothing else; its token is projected where client-go's in-cluster
// configuration reads it.
func TestManifestRBAC(t *testing.T) {
	o := load(t)
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(o.cr.Rules, want) {
		t.Errorf("ClusterRole rules %+v, want %+v", o.cr.Rules, want)
	}
	if o.crb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: o.cr.Name}) {
		t.Errorf("ClusterRoleBinding roleRef %+v, want ClusterRole %s", o.crb.RoleRef, o.cr.Name)
	}
	wantSubj := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: o.sa.Name, Namespace: o.ds.Namespace}}
	if !reflect.DeepEqual(o.crb.Subjects, wantSubj) {
		t.Errorf("ClusterRoleBinding subjects %+v, want %+v", o.crb.Subjects, wantSubj)
	}
	spec := o.ds.Spec.Template.Spec
	var token *corev1.Volume
	for i, v := range spec.Volumes {
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil {
					token = &spec.Volumes[i]
				}
			}
		}
	}
	if token == nil {
		t.Fatal("no projected ServiceAccount token volume")
	}
	c, cfg := agentOf(t, o)
	const saDir = "/var/run/secrets/kubernetes.io/serviceaccount" // rest.InClusterConfig reads token and ca.crt there
	if mounted := mountOf(c, token.Name); mounted != saDir || cfg.Kubeconfig != "" {
		t.Errorf("agent: token mounted at %q, -kubeconfig %q; want %s and none", mounted, cfg.Kubeconfig, saDir)
	}
	var nodeName *corev1.EnvVar
	for i, e := range c.Env {
		if e.Name == "NODE_NAME" {
			nodeName = &c.Env[i]
		}
	}
	if nodeName == nil || nodeName.ValueFrom == nil || nodeName.ValueFrom.FieldRef == nil || nodeName.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("agent: want NODE_NAME (-node-name's default) from the downward API's spec.nodeName, got %+v", nodeName)
	}
}

// TestPluginsImportNoHeavyLibraries: the plugins, executed thousands of
// times, import neither client-go nor prometheus (only the agent does).
func TestPluginsImportNoHeavyLibraries(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps",
		"../cmd/ovs-bridge", "../cmd/ovs-bridge-tls", "../cmd/ovs-portmap", "../cmd/ovsflow-conflist").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "github.com/prometheus/") {
			t.Errorf("a plugin imports %s", p)
		}
	}
	// The agent does, as the control.
	out, err = exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", "../cmd/ovsflow-agent").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "k8s.io/client-go/informers") {
		t.Errorf("go list -deps ./cmd/ovsflow-agent: no client-go informers (%v): the check above proves nothing", err)
	}
}
