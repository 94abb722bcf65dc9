package images

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/topology"
)

// Dockerfile is what the DaemonSet's image takes from deploy/Dockerfile,
// so that the harness builds the same image without a docker engine.
type Dockerfile struct {
	Packages   []string    // the final stage's apt-get install
	Build      []string    // the build stage's go build -o /out/ packages
	Bins       []string    // COPY --from=build: the built binaries' names, into /opt/ovsflow/bin/
	Files      [][2]string // COPY deploy/SRC DST: SRC (under deploy/), DST
	Entrypoint string      // as a JSON list
}

var (
	dfApt   = regexp.MustCompile(`apt-get install -y --no-install-recommends ([^&\\]*)`)
	dfBuild = regexp.MustCompile(`(?m)^RUN .*go build .*-o /out/ (.*)$`)
	dfBins  = regexp.MustCompile(`(?m)^COPY --from=build (.*) /opt/ovsflow/bin/$`)
	dfFile  = regexp.MustCompile(`(?m)^COPY deploy/(\S+) (/\S*)$`)
	dfEntry = regexp.MustCompile(`(?m)^ENTRYPOINT (.*)$`)
	dsImage = regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`)
)

// ParseDockerfile reads b (deploy/Dockerfile), its lines ending in "\"
// joined to the next.
func ParseDockerfile(b []byte) (Dockerfile, error) {
	s := strings.ReplaceAll(string(b), "\\\n", "")
	var d Dockerfile
	if m := dfApt.FindStringSubmatch(s); m != nil {
		d.Packages = strings.Fields(m[1])
	}
	if m := dfBuild.FindStringSubmatch(s); m != nil {
		d.Build = strings.Fields(m[1])
	}
	if m := dfBins.FindStringSubmatch(s); m != nil {
		for _, f := range strings.Fields(m[1]) {
			d.Bins = append(d.Bins, path.Base(f))
		}
	}
	for _, m := range dfFile.FindAllStringSubmatch(s, -1) {
		d.Files = append(d.Files, [2]string{m[1], m[2]})
	}
	if m := dfEntry.FindStringSubmatch(s); m != nil {
		d.Entrypoint = strings.TrimSpace(m[1])
	}
	if len(d.Packages) == 0 || len(d.Build) == 0 || len(d.Bins) == 0 || d.Entrypoint == "" {
		return Dockerfile{}, fmt.Errorf("deploy/Dockerfile: want an apt-get install line, a go build -o /out/ line, a COPY --from=build into /opt/ovsflow/bin/ and an ENTRYPOINT (found %+v)", d)
	}
	return d, nil
}

// DaemonSetName is the image the manifest (deploy/ovsflow-cni.yaml) runs.
func DaemonSetName(manifest []byte) (string, error) {
	m := dsImage.FindSubmatch(manifest)
	if m == nil {
		return "", fmt.Errorf("the manifest names no image")
	}
	return string(m[1]), nil
}

// DaemonSet writes the DaemonSet's image, as deploy/Dockerfile builds it,
// as an OCI tar at out: the Dockerfile's packages on a debootstrap'ed
// bookworm (as debian:12-slim; its root tar made once per machine:
// Base.RootTar), then one layer with the binaries built from the tree at
// repo (version, when not "", stamped into them as the Dockerfile's ARG
// VERSION) and the files it copies. name is the image's name.
func DaemonSet(repo string, p topology.Plan, mirror, out, name, version string, install func(...string) error, logf func(string, ...any)) error {
	b, err := os.ReadFile(filepath.Join(repo, "deploy", "Dockerfile"))
	if err != nil {
		return err
	}
	df, err := ParseDockerfile(b)
	if err != nil {
		return err
	}
	root, err := Base{Suite: "bookworm", Mirror: mirror, Packages: df.Packages}.RootTar(p, install, logf)
	if err != nil {
		return err
	}
	bin, err := os.MkdirTemp("", "ovsflow-ds.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	ldflags := "-s -w"
	if version != "" {
		ldflags += " -X github.com/ovsflow/ovs-cni/pkg/buildinfo.Version=" + version
	}
	if err := GoBuild(repo, append([]string{"-trimpath", "-ldflags", ldflags, "-o", bin + "/"}, df.Build...)...); err != nil {
		return err
	}
	args := []string{"-layer", root}
	for _, f := range df.Bins {
		args = append(args, "-add", "/opt/ovsflow/bin/"+f+"="+filepath.Join(bin, f))
	}
	for _, f := range df.Files {
		args = append(args, "-add", f[1]+"="+filepath.Join(repo, "deploy", f[0]))
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return OCITar(repo, out, name, df.Entrypoint, "", args...)
}

// OCITar writes an OCI image layout tar at out (test/runtimes/tools/ocitar
// of the tree at repo, with the given -layer, -add, -link and -dir
// arguments): image name, its entrypoint and command (JSON lists; cmd ""
// none) and the usual PATH.
func OCITar(repo, out, name, entrypoint, cmd string, args ...string) error {
	d, err := os.MkdirTemp("", "ovsflow-ocitar.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(d)
	tool := filepath.Join(d, "ocitar")
	if err := GoBuild(repo, "-o", tool, "./test/runtimes/tools/ocitar"); err != nil {
		return err
	}
	args = append([]string{"-o", out, "-name", name, "-entrypoint", entrypoint,
		"-env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, args...)
	if cmd != "" {
		args = append(args, "-cmd", cmd)
	}
	if b, err := exec.Command(tool, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("image %s: %w: %s", name, err, b)
	}
	return nil
}

// GoBuild runs `go build ARGS` in dir, static (CGO_ENABLED=0).
func GoBuild(dir string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", strings.Join(args, " "), err, b)
	}
	return nil
}
