package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// quickStartBlock is the one ```sh block between the quickstart markers of
// README.md, or of docs/quickstart.md when README.md has none.
var quickStartBlock = regexp.MustCompile("(?s)<!-- quickstart:begin -->\\s*```sh\\n(.*?)```\\s*<!-- quickstart:end -->")

// The quick start runs as written: bash runs the block, which starts a
// sandbox of its own, builds the plugins, ADDs a pod with a host port,
// requests a page through it, traces it and DELs it; it exits 0, the host
// port answered, and the sandbox and the pod's namespace are gone after it.
func TestQuickStart(t *testing.T) {
	requireSandbox(t)
	var block, from string
	for _, doc := range []string{"README.md", "docs/quickstart.md"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		if m := quickStartBlock.FindSubmatch(b); m != nil {
			block, from = string(m[1]), doc
			break
		}
	}
	if block == "" {
		t.Fatal("no quickstart block (<!-- quickstart:begin --> ```sh ... ``` <!-- quickstart:end -->) in README.md or docs/quickstart.md")
	}
	for _, left := range []string{"/run/netns/qs", "/run/netns/qs-pod", "/run/ovsflow/qs"} {
		if _, err := os.Stat(left); err == nil {
			t.Fatalf("%s exists: another quick start is running, or one left it", left)
		}
	}
	cmd := exec.Command("bash", "-c", block)
	cmd.Dir = repoRoot
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		t.Fatalf("the quick start of %s failed: %v\n%s", from, err, out.String())
	}
	if !strings.Contains(out.String(), "host port 8080 answered") {
		t.Fatalf("the quick start of %s exited 0 without the host port answering:\n%s", from, out.String())
	}
	for _, left := range []string{"/run/netns/qs", "/run/netns/qs-pod", "/run/ovsflow/qs"} {
		if _, err := os.Stat(left); err == nil {
			t.Errorf("the quick start left %s", left)
		}
	}
	t.Logf("the quick start of %s:\n%s", from, out.String())
}
