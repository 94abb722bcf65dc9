// Package images builds the harness's two images without a registry: the
// base (Debian packages, debootstrap, docker import) and the node image
// (hack/ovs-in-docker/Dockerfile on the base: the plugins of this tree with
// its version stamped in, the node's init scripts, crictl and the test images
// of hack/install-runtimes.sh).
package images

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/engine"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/filelock"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/topology"
)

// Base is the base image's recipe: the image is rebuilt when it changes.
type Base struct {
	Suite, Mirror string
	Packages      []string
}

// DefaultBase is the nodes' base: Open vSwitch, containerd, runc, conmon and
// podman (a CRI-O node's monitor, and what fills its image store; podman
// needs a container-network-stack, which debootstrap does not resolve:
// containernetworking-plugins), and the tools the node's init and the
// tests run.
func DefaultBase(mirror string) Base {
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	return Base{Suite: "bookworm", Mirror: mirror, Packages: strings.Fields(
		"openvswitch-switch iproute2 iputils-ping ethtool nftables procps kmod containerd runc conmon podman containernetworking-plugins util-linux iptables conntrack socat")}
}

// Name is the base image's name: the prefix's, tagged with the recipe's digest.
func (b Base) Name(p topology.Plan) string { return p.Prefix + "-base:" + b.digest() }

func (b Base) digest() string {
	sum := sha256.Sum256([]byte(b.Suite + " " + b.Mirror + " " + strings.Join(b.Packages, " ") + "\n"))
	return hex.EncodeToString(sum[:])[:12]
}

// RootCache is where the base's root file system is kept as a tar, one per
// recipe, for every harness of this machine: each prefix has an engine of
// its own, and a second harness (CI runs two side by side) imports the tar
// instead of running debootstrap again. `down -images` removes it.
const RootCache = "/var/cache/ovsflow-oid"

// rootTar is the recipe's tar in RootCache.
func (b Base) rootTar() string { return filepath.Join(RootCache, "base-"+b.digest()+".tar") }

// Build makes the base image unless it exists, from the recipe's root tar
// (RootTar). install installs debootstrap.
func (b Base) Build(e *engine.Engine, p topology.Plan, install func(...string) error, logf func(string, ...any)) error {
	img := b.Name(p)
	if _, err := e.Run("image", "inspect", img); err == nil {
		return nil
	}
	t0 := time.Now()
	tarFile, err := b.RootTar(p, install, logf)
	if err != nil {
		return err
	}
	f, err := os.Open(tarFile)
	if err != nil {
		return err
	}
	defer f.Close()
	imp := e.Command("import", "-c", "LABEL "+p.Label(), "-", img)
	imp.Stdin = f
	if out, err := imp.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import: %w: %s", err, out)
	}
	logf("base image %s built in %d s", img, int(time.Since(t0).Seconds()))
	return nil
}

// RootTar is the recipe's root file system as a tar in RootCache, made
// first (debootstrap) unless there, under a lock that a harness making the
// same recipe holds meanwhile. install installs debootstrap.
func (b Base) RootTar(p topology.Plan, install func(...string) error, logf func(string, ...any)) (string, error) {
	if err := os.MkdirAll(RootCache, 0o755); err != nil {
		return "", err
	}
	tarFile := b.rootTar()
	return tarFile, filelock.With(tarFile+".lock", func() error {
		if _, err := os.Stat(tarFile); err == nil {
			return nil
		}
		return b.debootstrap(p, tarFile, install, logf)
	})
}

// debootstrap makes the recipe's root file system and writes it as a tar at dst.
func (b Base) debootstrap(p topology.Plan, dst string, install func(...string) error, logf func(string, ...any)) error {
	if err := install("debootstrap"); err != nil {
		return err
	}
	root, err := os.MkdirTemp("/var/tmp", p.Prefix+"-rootfs.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	logf("debootstrap %s (%s) into %s", b.Suite, strings.Join(b.Packages, ","), dst)
	if out, err := exec.Command("debootstrap", "--variant=minbase", "--include="+strings.Join(b.Packages, ","), b.Suite, root, b.Mirror).CombinedOutput(); err != nil {
		return fmt.Errorf("debootstrap: %w: %s", err, lastLines(out, 20))
	}
	for _, g := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "usr/share/doc/*", "usr/share/man/*"} {
		m, _ := filepath.Glob(filepath.Join(root, g))
		for _, f := range m {
			os.RemoveAll(f)
		}
	}
	if out, err := exec.Command("tar", "-C", root, "-cf", dst+".new", ".").CombinedOutput(); err != nil {
		return fmt.Errorf("tar of the root: %w: %s", err, out)
	}
	return os.Rename(dst+".new", dst)
}

// Node is the node image's name.
func Node(p topology.Plan) string { return p.Prefix + "-node:latest" }

// The node image's build context, from the repository (paths relative to it).
var (
	plugins = []string{"./cmd/ovs-bridge", "./cmd/ovs-bridge-tls", "./cmd/ovs-portmap", "./cmd/ovs-bandwidth", "./cmd/ovsflow-conflist", "./cmd/ovsflow-agent",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/main/loopback"}
	deployFiles = []string{"deploy/install-cni.sh", "deploy/node-prep.sh"}
	nodeFiles   = []string{"hack/ovs-in-docker/node-init.sh", "hack/ovs-in-docker/cp-init.sh", "hack/ovs-in-docker/oid-reconcile",
		"hack/ovs-in-docker/oid-pod", "hack/ovs-in-docker/oid-snapshot", "hack/ovs-in-docker/oid-image", "hack/ovs-in-docker/containerd.toml",
		"hack/ovs-in-docker/crictl.yaml"}
)

// BuildNode builds the node image of the repository at repo, stamped version,
// on the base image.
func BuildNode(e *engine.Engine, p topology.Plan, base Base, repo, version string, logf func(string, ...any)) error {
	t0 := time.Now()
	ctx, err := os.MkdirTemp("/var/tmp", p.Prefix+"-ctx.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ctx)
	for _, d := range []string{"bin", "images", "deploy", "node"} {
		if err := os.MkdirAll(filepath.Join(ctx, d), 0o755); err != nil {
			return err
		}
	}
	// crictl, CRI-O and its pinns, the pause and test-app images' tars.
	rt, err := run(repo, nil, "hack/install-runtimes.sh", "containerd", "crio")
	if err != nil {
		return err
	}
	vars := keyValues(rt)
	build := exec.Command("go", append([]string{"build", "-trimpath", "-ldflags",
		"-s -w -X github.com/ovsflow/ovs-cni/pkg/buildinfo.Version=" + version, "-o", filepath.Join(ctx, "bin") + "/"}, plugins...)...)
	build.Dir, build.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the plugins: %w: %s", err, out)
	}
	// A CRI-O node's runc (cmd/oid-runc of the harness's module).
	build = exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(ctx, "bin", "oid-runc"), "./cmd/oid-runc")
	build.Dir, build.Env = filepath.Join(repo, "test/cluster"), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building oid-runc: %w: %s", err, out)
	}
	copies := map[string]string{vars["CRICTL"]: "bin/crictl", vars["CRIO"]: "bin/crio", vars["PINNS"]: "bin/pinns",
		vars["PAUSE_TAR"]: "images/", vars["APP_TAR"]: "images/"}
	for _, f := range deployFiles {
		copies[filepath.Join(repo, f)] = "deploy/"
	}
	for _, f := range nodeFiles {
		copies[filepath.Join(repo, f)] = "node/"
	}
	for src, dst := range copies {
		if src == "" {
			return fmt.Errorf("hack/install-runtimes.sh containerd crio did not name crictl, CRI-O and the images: %s", rt)
		}
		if strings.HasSuffix(dst, "/") {
			dst += filepath.Base(src)
		}
		if err := copyFile(src, filepath.Join(ctx, dst)); err != nil {
			return err
		}
	}
	// Each image tar's name and ID beside it, for oid-image (node-init.sh).
	for _, t := range []string{vars["PAUSE_TAR"], vars["APP_TAR"]} {
		ref, err := ReadOCIRef(t)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(ctx, "images", filepath.Base(t)+".ref"), []byte(ref.Name+" "+ref.ID+"\n"), 0o644); err != nil {
			return err
		}
	}
	manifest, err := os.ReadFile(filepath.Join(repo, "deploy/ovsflow-cni.yaml"))
	if err != nil {
		return err
	}
	conflist := ConfigMapConflist(manifest)
	if conflist == "" {
		return fmt.Errorf("no conflist found in deploy/ovsflow-cni.yaml's ConfigMap")
	}
	if err := os.WriteFile(filepath.Join(ctx, "deploy/10-ovsflow.conflist"), []byte(conflist), 0o644); err != nil {
		return err
	}
	cmd := e.Command("build", "-q", "--label", p.Label(), "--build-arg", "BASE="+base.Name(p), "--build-arg", "VERSION="+version,
		"-t", Node(p), "-f", filepath.Join(repo, "hack/ovs-in-docker/Dockerfile"), ctx)
	cmd.Env = append(cmd.Env, "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker build of %s: %w: %s", Node(p), err, out)
	}
	logf("node image %s (%s) ready in %d s", Node(p), version, int(time.Since(t0).Seconds()))
	return nil
}

// ConfigMapConflist is the conflist of the manifest's ConfigMap, as the
// DaemonSet mounts it: the block under "  10-ovsflow.conflist: |" up to
// the document's end, unindented by four.
func ConfigMapConflist(manifest []byte) string {
	var b strings.Builder
	on := false
	sc := bufio.NewScanner(bytes.NewReader(manifest))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "  10-ovsflow.conflist: |":
			on = true
		case on && strings.HasPrefix(l, "---"):
			return b.String()
		case on:
			b.WriteString(strings.TrimPrefix(l, "    ") + "\n")
		}
	}
	return b.String()
}

var releaseImage = regexp.MustCompile(`(?m)image: ghcr\.io/ovsflow/ovs-cni:(v[0-9][0-9.]*)$`)

// Version is what the plugins and the node image are stamped with: $VERSION,
// else `git describe` of a v* tag, else the manifest's release plus the commit.
func Version(repo string) string {
	if v := os.Getenv("VERSION"); v != "" {
		return v
	}
	if v, err := exec.Command("git", "-C", repo, "describe", "--tags", "--match", "v*", "--dirty").Output(); err == nil && len(v) > 0 {
		return strings.TrimSpace(string(v)) // (its error, without a v* tag, is not ours to print)
	}
	rel := "v0.0.0"
	if m, err := os.ReadFile(filepath.Join(repo, "deploy/ovsflow-cni.yaml")); err == nil {
		if s := releaseImage.FindSubmatch(m); s != nil {
			rel = string(s[1])
		}
	}
	commit, err := run(repo, nil, "git", "rev-parse", "--short=12", "HEAD")
	if err != nil {
		commit = "unknown"
	}
	dirty := ""
	if _, err := run(repo, nil, "git", "diff", "--quiet", "HEAD"); err != nil {
		dirty = ".dirty"
	}
	return rel + "+git." + commit + dirty
}

func run(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(out.String()), err
}

func keyValues(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, st.Mode().Perm())
}

func lastLines(b []byte, n int) string {
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
