package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/images"
)

// cmdTest: test [-nodes N] (default 3): up, the Go tests of test/multinode
// with the nodes handed over in their environment, "N passed, M failed"
// (tests without subtests and subtests; a skip counts as a failure), down.
// OID_KEEP=1 leaves the nodes up after; OID_RUN: a -run pattern.
func cmdTest(e env, args []string) error {
	fs := flags("test")
	n := fs.Int("nodes", 3, "")
	if err := parse(fs, args, 0); err != nil {
		return err
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
