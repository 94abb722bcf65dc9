package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovsflow/ovs-cni/test/cluster/conformance/junit"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/filelock"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kube"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kubebuild"
	"github.com/ovsflow/ovs-cni/test/cluster/harness/kubeconf"
)

// The selections of Kubernetes' e2e suite, focus and skip.
//
// default: the HostPort, Networking Granular Checks (pods), Conntrack and
// cluster DNS tests (what test -kube -conformance runs).
//
// network: every [sig-network] [Conformance] test, the HostPort,
// Networking Granular Checks (pods and Services), Conntrack, NoSNAT, dual
// stack ([Feature:IPv6DualStack]) and Services tests; without SCTP (the
// nodes share the host's kernel), [Disruptive] and [Serial] (they stop
// nodes or need the cluster alone), and the features the harness has not
// (LoadBalancer: no cloud; NetworkPolicy: the plugins implement none;
// Internet access, Networking-IPv4/IPv6, from a cluster with no route out).
var selections = map[string]struct{ focus, skip string }{
	"default": {`\[sig-network\] (HostPort |Networking Granular Checks: Pods |Conntrack |DNS should provide DNS for the cluster )`,
		`SCTP|\[Disruptive\]|\[Serial\]`},
	"network": {`\[sig-network\] (.*\[Conformance\]|HostPort |Networking Granular Checks|Conntrack |NoSNAT |\[Feature:IPv6DualStack\]|Services )`,
		`SCTP|\[Disruptive\]|\[Serial\]|\[Feature:(LoadBalancer|NetworkPolicy|Networking-IPv4|Networking-IPv6|Networking-DNS)\]`},
}

// The chains a run may be on; both: ovsflow, then reference, then a table of both.
var chains = []string{"ovsflow", "reference", "both"}

// confPackages are the conformance images' Debian packages: the tools the
// selected tests run in them (upstream's alpine images have them, wget as
// busybox's).
var confPackages = strings.Fields("curl wget netcat-openbsd dnsutils iproute2 ca-certificates procps socat iperf nginx-light")

// e2eRegistry is where the suite looks for its images (test/utils/image/manifest.go).
const e2eRegistry = "registry.k8s.io/e2e-test-images"

// cmdConformance: conformance [-selection default|network] [-focus RE]
// [-skip RE] [-chain ovsflow|reference|both] [-procs P] [-nodes N]
// [-build]: Kubernetes' own e2e suite (e2e.test of k8s.io/kubernetes at
// kubebuild's version) against the harness's cluster: the tests
// whose names match -focus and not -skip (default: the selection's), on
// the cluster (brought up with N nodes, default 3, and deployed when none
// answers; left up), on the chain asked (reference: the reference plugins
// in ovsflow's place, cmdReference; a cluster on the reference chain is not
// switched back), in P Ginkgo processes (default 1). Per chain, Ginkgo's
// summary, the failures and skips with their reason, then one line:
// CONFORMANCE chain=C passed=P failed=F skipped=S took=T junit=FILE log=FILE.
// e2e.test's log and JUnit file are kept under DATA/conformance/<time>.
// -build: only build what a run needs (cached; CI builds it beside other
// stages).
func cmdConformance(e env, args []string) error {
	fs := flags("conformance")
	sel := fs.String("selection", "default", "")
	focus := fs.String("focus", "", "")
	skip := fs.String("skip", "", "")
	chain := fs.String("chain", "ovsflow", "")
	procs := fs.Int("procs", 1, "")
	n := fs.Int("nodes", 3, "")
	buildOnly := fs.Bool("build", false, "")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	s, ok := selections[*sel]
	if !ok {
		return usageError{"conformance: -selection " + *sel + ": want default or network"}
	}
	if *focus == "" {
		*focus = s.focus
	}
	if *skip == "" {
		*skip = s.skip
	}
	if !slices.Contains(chains, *chain) {
		return usageError{"conformance: -chain " + *chain + ": want ovsflow, reference or both"}
	}
	if *procs < 1 || *procs > 99 {
		return usageError{"conformance: -procs " + strconv.Itoa(*procs) + ": want 1 to 99"}
	}
	k, err := e.plan.KubeFromEnv(os.Getenv)
	if err != nil {
		return usageError{"conformance: " + err.Error()}
	}
	// The Service tests make hundreds of Services (the latency test alone
	// 200): the default IPv4 Service range (a /27 of a documentation range)
	// runs out, and they fail with "range is full".
	if *sel == "network" && k.Svc4.Bits() > 24 {
		return usageError{fmt.Sprintf("conformance: -selection network: the IPv4 Service range %s is too small (a /24 at least: OID_SVC4, e.g. 198.19.0.0/16 of the benchmark range, with up -kube)", k.Svc4)}
	}
	if os.Geteuid() != 0 {
		return errors.New("conformance: needs root (the harness)")
	}
	t0 := time.Now()
	b, err := e.conformanceBuild()
	if err != nil {
		return err
	}
	if *buildOnly {
		logf("conformance: e2e.test, agnhost and the images built (%d s)", int(time.Since(t0).Seconds()))
		return nil
	}
	if !e.clusterAnswers() {
		lines, err := e.upKube(*n, false, "containerd")
		for _, l := range lines {
			fmt.Fprintln(os.Stderr, l)
		}
		if err != nil {
			return fmt.Errorf("conformance: up -kube: %w", err)
		}
		if err := cmdDeploy(e, nil); err != nil {
			return fmt.Errorf("conformance: deploy: %w", err)
		}
	}
	tars, err := filepath.Glob(filepath.Join(b.images, "*.oci.tar"))
	if err != nil {
		return err
	}
	for _, tar := range tars {
		if err := cmdImport(e, []string{tar}); err != nil {
			return fmt.Errorf("conformance: %w", err)
		}
	}
	if err := cmdTag(e, []string{kubeconf.PauseImage, "registry.k8s.io/pause:3.10.2"}); err != nil {
		return fmt.Errorf("conformance: %w", err)
	}
	_, names, err := e.listNodes()
	if err != nil {
		return err
	}
	r := confRun{e: e, b: b, focus: *focus, skip: *skip, procs: *procs,
		nodes: len(slices.DeleteFunc(names, func(n string) bool { return n == "cp" }))}
	out := filepath.Join(e.paths.Data, "conformance", time.Now().UTC().Format("20060102T150405Z"))
	var failed error
	if *chain == "both" {
		var runs []junit.Run
		for _, c := range chains[:2] {
			if err := r.run(c, filepath.Join(out, c)); err != nil {
				logf("conformance: the %s chain: %v", c, err)
				failed = err
			}
			res, err := junit.Read(filepath.Join(out, c, "junit_01.xml"))
			if err != nil {
				return fmt.Errorf("conformance: the table: %w (after %w)", err, failed)
			}
			runs = append(runs, junit.Run{Name: c, Results: res})
		}
		var t bytes.Buffer
		if err := junit.Table(&t, runs); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "table.md"), t.Bytes(), 0o644); err != nil {
			return err
		}
		logf("conformance: the table of both chains: %s", filepath.Join(out, "table.md"))
	} else {
		failed = r.run(*chain, out)
	}
	logf("conformance: took %d s", int(time.Since(t0).Seconds()))
	return failed
}

// confBuild is what a run needs, built by conformanceBuild.
type confBuild struct {
	prefix, version string // the Kubernetes build's cache and version
	images          string // the image tars (*.oci.tar)
}

func (b confBuild) bin(name string) string { return filepath.Join(b.prefix, "bin", name) }

// conformanceBuild builds e2e.test, agnhost and ginkgo (kubebuild, under
// the cached build's lock: a build running in the background, as
// CI's, is waited for), then the images, under their own lock; each
// unless cached.
func (e env) conformanceBuild() (confBuild, error) {
	c := e.cache()
	if err := c.E2E(); err != nil {
		return confBuild{}, fmt.Errorf("conformance: building e2e.test: %w", err)
	}
	b := confBuild{prefix: c.Prefix, version: kubebuild.Kubernetes, images: filepath.Join(c.Prefix, "build", "conformance")}
	if err := os.MkdirAll(b.images, 0o755); err != nil {
		return confBuild{}, err
	}
	return b, filelock.With(filepath.Join(b.images, ".lock"), func() error { return e.conformanceImages(b, kubebuild.Agnhost) })
}

// ociImage is an image tar of ocitar (test/runtimes/tools/ocitar).
type ociImage struct {
	file, name, entrypoint, cmd string
	inputs                      []string // made again when one is newer than the tar
	args                        func() ([]string, error)
}

// conformanceImages writes the images the selected tests run, under the
// names the suite asks for (test/utils/image/manifest.go), each unless
// there and newer than its inputs:
//
//	agnhost            bookworm with confPackages, /agnhost, entrypoint /agnhost, command pause,
//	                   and test-webserver's and porter's TLS files, as upstream's image has them
//	glibc-dns-testing  the same root (a glibc with dig and getent)
//	nginx              the same root, Debian's nginx in the foreground on port 80 (the endpoint tests)
//	busybox            Debian's static busybox and its applets, command sh
//	regression-issue-74839  its server, built from the suite's module
func (e env) conformanceImages(b confBuild, agnhostVersion string) error {
	root, err := images.Base{Suite: "bookworm", Mirror: e.base.Mirror, Packages: confPackages}.RootTar(e.plan, e.aptInstall, logf)
	if err != nil {
		return err
	}
	dir := b.images
	agnhost := b.bin("agnhost")
	all := []ociImage{
		{file: "agnhost.oci.tar", name: e2eRegistry + "/agnhost:" + agnhostVersion, entrypoint: `["/agnhost"]`, cmd: `["pause"]`,
			inputs: []string{root, agnhost}, args: func() ([]string, error) {
				key, crt, err := selfSigned(dir, "localhost")
				if err != nil {
					return nil, err
				}
				return []string{"-layer", root, "-add", "/agnhost=" + agnhost, "-add", "/localhost.key=" + key,
					"-add", "/localhost.crt=" + crt, "-dir", "/uploads"}, nil
			}},
		{file: "glibc-dns-testing.oci.tar", name: e2eRegistry + "/glibc-dns-testing:2.1.1", entrypoint: `[]`,
			inputs: []string{root}, args: func() ([]string, error) { return []string{"-layer", root}, nil }},
		{file: "nginx.oci.tar", name: e2eRegistry + "/nginx:1.27.0-2", entrypoint: `["nginx", "-g", "daemon off;"]`,
			inputs: []string{root}, args: func() ([]string, error) { return []string{"-layer", root}, nil }},
		{file: "busybox.oci.tar", name: e2eRegistry + "/busybox:1.37.0-2", entrypoint: `[]`, cmd: `["sh"]`,
			args: func() ([]string, error) { return e.busyboxArgs() }},
		{file: "regression.oci.tar", name: e2eRegistry + "/regression-issue-74839:1.5", entrypoint: `["/regression-issue-74839"]`,
			args: func() ([]string, error) {
				bin := filepath.Join(dir, "regression-issue-74839")
				err := images.GoBuild(filepath.Join(b.prefix, "src", "e2e"), "-trimpath", "-ldflags", "-s -w", "-o", bin, "k8s.io/kubernetes/test/images/regression-issue-74839")
				return []string{"-add", "/regression-issue-74839=" + bin}, err
			}},
	}
	for _, im := range all {
		out := filepath.Join(dir, im.file)
		if !stale(out, im.inputs...) {
			continue
		}
		args, err := im.args()
		if err != nil {
			return err
		}
		if err := images.OCITar(e.repo, out, im.name, im.entrypoint, im.cmd, args...); err != nil {
			return err
		}
		logf("conformance: image %s", im.name)
	}
	return nil
}

// stale: file is missing, or older than one of inputs.
func stale(file string, inputs ...string) bool {
	st, err := os.Stat(file)
	if err != nil {
		return true
	}
	for _, in := range inputs {
		if i, err := os.Stat(in); err != nil || i.ModTime().After(st.ModTime()) {
			return true
		}
	}
	return false
}

// busyboxArgs: Debian's static busybox (installed here) and a link per applet.
func (e env) busyboxArgs() ([]string, error) {
	if err := e.aptInstall("busybox-static"); err != nil {
		return nil, err
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	args := []string{"-add", "/bin/busybox=/bin/busybox", "-dir", "/tmp", "-dir", "/etc"}
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" {
			args = append(args, "-link", "/bin/"+a+"=busybox")
		}
	}
	return args, nil
}

// selfSigned writes a key and a self-signed certificate for cn into dir
// (test-webserver's and porter's TLS files); it returns their paths.
func selfSigned(dir, cn string) (key, crt string, err error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0), KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", "", err
	}
	key, crt = filepath.Join(dir, cn+".key"), filepath.Join(dir, cn+".crt")
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", err
	}
	return key, crt, os.WriteFile(crt, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// clusterAnswers: an engine answers, the harness has a cluster and its API
// server lists the Nodes.
func (e env) clusterAnswers() bool {
	if _, err := e.engine(); err != nil {
		return false
	}
	c, err := kube.Client(e.adminKubeconfig())
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	return err == nil
}

// confRun is one selection of the suite, run on a chain by run.
type confRun struct {
	e            env
	b            confBuild
	focus, skip  string
	procs, nodes int
}

// summary are Ginkgo's summary lines: "Ran R of T Specs ...", then
// "SUCCESS!|FAIL! -- P Passed | F Failed | ...".
var summary = regexp.MustCompile(`^(Ran [0-9]+ of [0-9]+ Specs|SUCCESS!|FAIL!)`)

// run runs the selection on chain, e2e.test's log and JUnit file in out;
// on stderr Ginkgo's summary (or the log's last lines), the failures and
// the skips with their reason; on stdout the CONFORMANCE line.
func (r confRun) run(chain, out string) error {
	t0 := time.Now()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := r.e.useChain(chain); err != nil {
		return err
	}
	logf("conformance: e2e.test %s on the %s chain, focus '%s', skip '%s', %d process(es); log and JUnit in %s", r.b.version, chain, r.focus, r.skip, r.procs, out)
	// --num-nodes: the suite detects it on its first process only; the
	// others (-procs) skip every test that needs 2 nodes ("not -1").
	args := []string{"--kubeconfig", r.e.adminKubeconfig(), "--provider=skeleton", "--num-nodes", strconv.Itoa(r.nodes),
		"--kubectl-path", r.b.bin("kubectl"), "--report-dir", out, "--disable-log-dump"}
	var cmd *exec.Cmd
	if r.procs == 1 {
		cmd = exec.Command(r.b.bin("e2e.test"), append(args, "--ginkgo.focus", r.focus, "--ginkgo.skip", r.skip,
			"--ginkgo.no-color", "--ginkgo.timeout", "2h")...)
	} else {
		cmd = exec.Command(r.b.bin("ginkgo"), append([]string{"--procs", strconv.Itoa(r.procs), "--focus", r.focus, "--skip", r.skip,
			"--no-color", "--timeout", "2h", r.b.bin("e2e.test"), "--"}, args...)...)
	}
	logFile := filepath.Join(out, "e2e.log")
	f, err := os.Create(logFile)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	runErr := cmd.Run()
	f.Close()
	printSummary(logFile)
	junitFile, counts := filepath.Join(out, "junit_01.xml"), "passed=0 failed=0 skipped=0"
	if res, err := junit.Read(junitFile); err == nil {
		var rep bytes.Buffer
		if err := junit.Report(&rep, res); err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSuffix(rep.String(), "\n"), "\n")
		counts = lines[len(lines)-1]
		for _, l := range lines[:len(lines)-1] {
			fmt.Fprintln(os.Stderr, l)
		}
	}
	fmt.Printf("CONFORMANCE chain=%s %s took=%ds junit=%s log=%s\n", chain, counts, int(time.Since(t0).Seconds()), junitFile, logFile)
	var x *exec.ExitError
	if errors.As(runErr, &x) {
		return exitError{x.ExitCode()}
	}
	return runErr
}

// printSummary prints the log's Ginkgo summary lines on stderr, else its
// last 20 lines.
func printSummary(logFile string) {
	b, err := os.ReadFile(logFile)
	if err != nil {
		return
	}
	var found, all []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
		if summary.MatchString(sc.Text()) {
			found = append(found, sc.Text())
		}
	}
	if len(found) == 0 {
		found = all[max(0, len(all)-20):]
	}
	for _, l := range found {
		fmt.Fprintln(os.Stderr, l)
	}
}

// useChain puts the cluster on chain. ovsflow: as deployed (a cluster on
// the reference chain is refused); reference: the reference plugins in
// ovsflow's place (cmdReference), then the cluster DNS's pods made again
// on them, until Ready.
func (e env) useChain(chain string) error {
	eng, names, err := e.listNodes()
	if err != nil {
		return err
	}
	on := "ovsflow"
	for _, n := range names {
		if n != "cp" {
			if _, err := eng.Run("exec", e.plan.Container(n), "test", "-e", "/etc/cni/net.d/10-reference.conflist"); err == nil {
				on = "reference"
			}
			break
		}
	}
	if on == chain {
		return nil
	}
	if chain != "reference" {
		return errors.New("conformance: the cluster runs the reference chain: hack/ovs-in-docker.sh down, then -chain ovsflow")
	}
	plugins, err := e.referencePluginsDir()
	if err != nil {
		return err
	}
	if err := cmdReference(e, []string{"-kubeconfig", e.adminKubeconfig(), "-plugins", plugins}); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(e.plan.KubeState(), "dns")); err != nil {
		return nil
	}
	return e.recreateDNS()
}

// recreateDNS deletes the cluster DNS's pods and waits until as many new
// ones are Ready (on the network the cluster runs now).
func (e env) recreateDNS() error {
	c, err := kube.Client(e.adminKubeconfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"}
	pods := c.CoreV1().Pods("kube-system")
	old, err := pods.List(ctx, sel)
	if err != nil {
		return err
	}
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return err
	}
	gone := map[string]bool{}
	for _, p := range old.Items {
		gone[string(p.UID)] = true
	}
	return poll(ctx, 5*time.Minute, "the cluster DNS's pods made again on the chain", func(ctx context.Context) (bool, error) {
		now, err := pods.List(ctx, sel)
		if err != nil || len(now.Items) != len(old.Items) {
			return false, nil
		}
		for _, p := range now.Items {
			if gone[string(p.UID)] || !kube.PodReady(&p) {
				return false, nil
			}
		}
		return true, nil
	})
}
