// Package kubebuild is the harness's cached build of what its Kubernetes
// cluster runs and its conformance run executes, each from the module proxy
// at a pinned version: Kubernetes' commands, etcd, containerd, CoreDNS
// (hack/coredns) and its image, Multus's thin plugin, e2e.test, agnhost and
// ginkgo. A binary is built again only when it is missing or was built from
// another version (its embedded build information says which); every build
// runs under the cache's lock, so harnesses of several prefixes, and CI's
// build in the background, share one cache.
package kubebuild

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/filelock"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
)

// The pinned versions.
const (
	Kubernetes   = "v1.37.2" // k8s.io/kubernetes; its staging modules are v0.37.2
	Etcd         = "v3.6.16" // go.etcd.io/etcd/server/v3
	Containerd   = "v2.4.2"
	MultusModule = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4"
	Multus       = "v4.2.3" // the thin plugin (cmd/multus) of `up -kube -multus`
	// Agnhost is the version agnhost's image name carries
	// (test/images/agnhost/VERSION).
	Agnhost = "2.66.1"

	kubernetesModule = "k8s.io/kubernetes"
	etcdModule       = "go.etcd.io/etcd/server/v3"
	containerdModule = "github.com/containerd/containerd/v2"
	corednsModule    = "github.com/coredns/coredns"
	ginkgoModule     = "github.com/onsi/ginkgo/v2"
)

// DefaultPrefix is the cache's directory unless OVSFLOW_KUBE_PREFIX names another.
const DefaultPrefix = "/opt/ovsflow-kube"

// kubeCmds are the Kubernetes commands the cluster runs (and kubectl).
var kubeCmds = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet", "kubectl"}

// Cache is the build's directory (bin/, images/, src/ of the scratch
// modules) and the repository whose hack/coredns and ocitar it builds.
type Cache struct {
	Prefix, Repo string
	Logf         func(format string, a ...any)
}

// FromEnv is the cache of OVSFLOW_KUBE_PREFIX (DefaultPrefix if unset).
func FromEnv(repo string, logf func(string, ...any)) Cache {
	p := os.Getenv("OVSFLOW_KUBE_PREFIX")
	if p == "" {
		p = DefaultPrefix
	}
	return Cache{Prefix: p, Repo: repo, Logf: logf}
}

// Bin is the cached binary name.
func (c Cache) Bin(name string) string { return filepath.Join(c.Prefix, "bin", name) }

// Locked runs f under the cache's lock.
func (c Cache) Locked(f func() error) error {
	if err := os.MkdirAll(filepath.Join(c.Prefix, "bin"), 0o755); err != nil {
		return err
	}
	return filelock.With(filepath.Join(c.Prefix, ".lock"), f)
}

// src is the scratch module dir's directory.
func (c Cache) src(dir string) string { return filepath.Join(c.Prefix, "src", dir) }

// Cluster builds containerd, etcd and Kubernetes (and CoreDNS with its
// image with dns), each unless cached.
func (c Cache) Cluster(dns bool) error {
	return c.Locked(func() error {
		steps := []func() error{c.containerd, c.etcd, c.kubernetes}
		if dns {
			steps = append(steps, c.coreDNS)
		}
		for _, s := range steps {
			if err := s(); err != nil {
				return err
			}
		}
		return nil
	})
}

// MultusPlugin builds Multus's thin plugin unless cached.
func (c Cache) MultusPlugin() error {
	return c.Locked(func() error {
		if Built(c.Bin("multus"), MultusModule, Multus) {
			return nil
		}
		m := c.src("multus")
		if err := scratch(m, "ovsflow.local/multus-build"); err != nil {
			return err
		}
		pkg := MultusModule + "/cmd/multus"
		if err := goCmd(m, "get", pkg+"@"+Multus); err != nil {
			return err
		}
		c.Logf("building Multus %s (the thin plugin)", Multus)
		return goCmd(m, "build", "-trimpath", "-ldflags", "-s -w", "-o", c.Bin("multus"), pkg)
	})
}

// E2E builds Kubernetes' end-to-end suite (e2e.test, the binary a
// conformance run executes), its universal test server (agnhost) and the
// Ginkgo command of the version e2e.test was built with, each unless
// cached. In a scratch module of their own: the suite's packages are
// imported by its test files only (go get -t), and they need modules the
// commands do not (ginkgo, gomega, testify, sample-apiserver).
func (c Cache) E2E() error {
	return c.Locked(func() error {
		m := c.src("e2e")
		if !Built(c.Bin("e2e.test"), kubernetesModule, Kubernetes) || !Built(c.Bin("agnhost"), kubernetesModule, Kubernetes) {
			t0 := time.Now()
			if err := kubeModule(m, "ovsflow.local/e2e-build"); err != nil {
				return err
			}
			c.Logf("building Kubernetes' e2e.test and agnhost %s", Kubernetes)
			if err := goCmd(m, "get", "-t", kubernetesModule+"/test/e2e", kubernetesModule+"/test/images/agnhost"); err != nil {
				return err
			}
			if err := goCmd(m, "test", "-c", "-vet=off", "-trimpath", "-ldflags", ldflags(), "-o", c.Bin("e2e.test"), kubernetesModule+"/test/e2e"); err != nil {
				return err
			}
			if err := goCmd(m, "build", "-trimpath", "-ldflags", "-s -w -X main.Version="+Agnhost, "-o", c.Bin("agnhost"), kubernetesModule+"/test/images/agnhost"); err != nil {
				return err
			}
			c.Logf("e2e.test and agnhost built in %d s", int(time.Since(t0).Seconds()))
		}
		v, err := goOutput(m, "list", "-m", "-f", "{{.Version}}", ginkgoModule)
		if err != nil || v == "" {
			return fmt.Errorf("the version of ginkgo e2e.test was built with: %q: %w", v, err)
		}
		if Built(c.Bin("ginkgo"), ginkgoModule, v) {
			return nil
		}
		if err := goCmd(m, "get", ginkgoModule+"/ginkgo@"+v); err != nil {
			return err
		}
		if err := goCmd(m, "build", "-trimpath", "-ldflags", "-s -w", "-o", c.Bin("ginkgo"), ginkgoModule+"/ginkgo"); err != nil {
			return err
		}
		c.Logf("ginkgo %s built", v)
		return nil
	})
}

func (c Cache) containerd() error {
	var need []string
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if !Built(c.Bin(b), containerdModule, Containerd) {
			need = append(need, containerdModule+"/cmd/"+b+"@"+Containerd)
		}
	}
	if len(need) == 0 {
		return nil
	}
	c.Logf("building containerd %s", Containerd)
	cmd := goCommand(c.Prefix, append([]string{"install", "-trimpath", "-ldflags", "-s -w"}, need...)...)
	cmd.Env = append(cmd.Env, "GOBIN="+filepath.Join(c.Prefix, "bin"))
	return run(cmd)
}

func (c Cache) etcd() error {
	if Built(c.Bin("etcd"), etcdModule, Etcd) {
		return nil
	}
	m := c.src("etcd")
	if err := scratch(m, "ovsflow.local/etcd-build"); err != nil {
		return err
	}
	if err := goCmd(m, "get", etcdModule+"@"+Etcd); err != nil {
		return err
	}
	c.Logf("building etcd %s", Etcd)
	return goCmd(m, "build", "-trimpath", "-ldflags", "-s -w", "-o", c.Bin("etcd"), etcdModule)
}

func (c Cache) kubernetes() error {
	need := false
	for _, b := range kubeCmds {
		need = need || !Built(c.Bin(b), kubernetesModule, Kubernetes)
	}
	// The version Kubernetes' own build stamps in (a Node reports its kubelet's).
	if out, err := exec.Command(c.Bin("kubelet"), "--version").Output(); err != nil || strings.TrimSpace(string(out)) != "Kubernetes "+Kubernetes {
		need = true
	}
	if !need {
		return nil
	}
	m := c.src("kube")
	if err := kubeModule(m, "ovsflow.local/kube-build"); err != nil {
		return err
	}
	var pkgs []string
	for _, b := range kubeCmds {
		pkgs = append(pkgs, kubernetesModule+"/cmd/"+b)
	}
	c.Logf("building Kubernetes %s (%s); about 9 minutes cold on 2 cores", Kubernetes, strings.Join(kubeCmds, " "))
	// go get resolves what these packages import (go mod tidy would also
	// fetch every test dependency of Kubernetes).
	if err := goCmd(m, append([]string{"get"}, pkgs...)...); err != nil {
		return err
	}
	return goCmd(m, append([]string{"build", "-trimpath", "-ldflags", ldflags(), "-o", filepath.Join(c.Prefix, "bin") + "/"}, pkgs...)...)
}

// CoreDNSVersion is the CoreDNS hack/coredns pins (its go.mod).
func (c Cache) CoreDNSVersion() (string, error) {
	f, err := os.Open(filepath.Join(c.Repo, "hack", "coredns", "go.mod"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if w := strings.Fields(sc.Text()); len(w) == 3 && w[0] == "require" && w[1] == corednsModule {
			return w[2], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no require %s line", f.Name(), corednsModule)
}

// CoreDNSTar is CoreDNS's image tar (one layer: the static binary), under
// upstream's name, so that deploy/coredns.yaml reads as kubeadm's.
func (c Cache) CoreDNSTar() (file, name string, err error) {
	v, err := c.CoreDNSVersion()
	if err != nil {
		return "", "", err
	}
	return filepath.Join(c.Prefix, "images", "coredns-"+v+".tar"), "registry.k8s.io/coredns/coredns:" + v, nil
}

// coreDNS builds CoreDNS as hack/coredns links it (the plugins of
// deploy/coredns.yaml's and kubeadm's Corefiles: 312 s of CPU cold, against
// 536 for the released default set) and its image tar, each unless cached.
// Built in hack/coredns, a module of its own (its go.mod and go.sum pin
// every dependency); the build writes nothing there.
func (c Cache) coreDNS() error {
	v, err := c.CoreDNSVersion()
	if err != nil {
		return err
	}
	tar, name, err := c.CoreDNSTar()
	if err != nil {
		return err
	}
	bin := c.Bin("coredns")
	if !Built(bin, corednsModule, v) || !builtIn(bin, "ovsflow.local/coredns") {
		t0 := time.Now()
		c.Logf("building CoreDNS %s (hack/coredns: its plugins of the cluster's Corefile)", v)
		if err := goCmd(filepath.Join(c.Repo, "hack", "coredns"), "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "."); err != nil {
			return err
		}
		c.Logf("CoreDNS %s built in %d s", v, int(time.Since(t0).Seconds()))
		if err := os.Remove(tar); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if _, err := os.Stat(tar); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(tar), 0o755); err != nil {
		return err
	}
	return images.OCITar(c.Repo, tar, name, `["/coredns"]`, "", "-add", "/coredns="+bin)
}

// Built says whether bin exists and was built from module at version (its
// main module or a dependency).
func Built(bin, module, version string) bool {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return false
	}
	if bi.Main.Path == module && bi.Main.Version == version {
		return true
	}
	for _, d := range bi.Deps {
		if d.Path == module && d.Version == version {
			return true
		}
	}
	return false
}

// builtIn says whether bin's main module is main.
func builtIn(bin, main string) bool {
	bi, err := buildinfo.ReadFile(bin)
	return err == nil && bi.Main.Path == main
}

// ldflags are the version Kubernetes' own build stamps in.
func ldflags() string {
	minor, _, _ := strings.Cut(strings.TrimPrefix(Kubernetes, "v1."), ".")
	f := "-s -w"
	for _, x := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		f += fmt.Sprintf(" -X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean", x, Kubernetes, x, x, minor, x)
	}
	return f
}

// scratch makes an empty module at m named name, to build other modules'
// commands in (their go.mod files carry replace directives, so `go install
// pkg@v` refuses, and the proxy serves no version lists).
func scratch(m, name string) error {
	if err := os.MkdirAll(m, 0o755); err != nil {
		return err
	}
	for _, f := range []string{"go.sum", "tools.go"} {
		if err := os.Remove(filepath.Join(m, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.WriteFile(filepath.Join(m, "go.mod"), []byte("module "+name+"\n\ngo 1.25\n"), 0o644)
}

// kubeModule makes a scratch module at m that requires k8s.io/kubernetes at
// Kubernetes, with its staging modules replaced by their released versions:
// k8s.io/kubernetes requires them at v0.0.0 and replaces them with
// ./staging, which a dependent module ignores.
func kubeModule(m, name string) error {
	if err := scratch(m, name); err != nil {
		return err
	}
	out, err := goOutput(m, "mod", "download", "-json", kubernetesModule+"@"+Kubernetes)
	if err != nil {
		return err
	}
	var dl struct{ GoMod string }
	if err := json.Unmarshal([]byte(out), &dl); err != nil || dl.GoMod == "" {
		return fmt.Errorf("go mod download %s@%s: no go.mod in %q: %v", kubernetesModule, Kubernetes, out, err)
	}
	out, err = goOutput(m, "mod", "edit", "-json", dl.GoMod)
	if err != nil {
		return err
	}
	var mod struct {
		Replace []struct{ Old, New struct{ Path string } }
	}
	if err := json.Unmarshal([]byte(out), &mod); err != nil {
		return fmt.Errorf("%s: %w", dl.GoMod, err)
	}
	args := []string{"mod", "edit", "-require=" + kubernetesModule + "@" + Kubernetes}
	staging := "v0." + strings.TrimPrefix(Kubernetes, "v1.")
	for _, r := range mod.Replace {
		if !strings.HasPrefix(r.New.Path, "./staging/") {
			continue
		}
		switch s := r.Old.Path; s {
		case "k8s.io/sample-cli-plugin", "k8s.io/sample-controller":
			// Not served by the proxy, needed by nothing built here: empty local modules.
			d := filepath.Join("empty", strings.TrimPrefix(s, "k8s.io/"))
			if err := os.MkdirAll(filepath.Join(m, d), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(m, d, "go.mod"), []byte("module "+s+"\n\ngo 1.25\n"), 0o644); err != nil {
				return err
			}
			args = append(args, "-replace="+s+"=./"+d)
		default:
			args = append(args, "-replace="+s+"="+s+"@"+staging)
		}
	}
	return goCmd(m, args...)
}

// goCommand is `go ARGS` in dir, static, its output on stderr.
func goCommand(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
}

func goCmd(dir string, args ...string) error { return run(goCommand(dir, args...)) }

func run(cmd *exec.Cmd) error {
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s (in %s): %w", strings.Join(cmd.Args, " "), cmd.Dir, err)
	}
	return nil
}

// goOutput is `go ARGS` in dir: its standard output, trimmed.
func goOutput(dir string, args ...string) (string, error) {
	cmd := goCommand(dir, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := run(cmd); err != nil {
		return "", err
	}
	return strings.TrimSpace(out.String()), nil
}
