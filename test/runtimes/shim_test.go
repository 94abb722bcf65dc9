package runtimes

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A shim records every plugin call a runtime makes (environment, stdin,
// stdout, exit code) and runs the real plugin, so that a suite can assert
// what the runtime really sent: containerd's second DEL with an empty netns,
// podman's VERSION probes, libcni's GC.
const shimScript = `#!/bin/sh
# Records one CNI plugin call, then runs the real plugin of the same name.
# Programs by absolute path: a plugin may call its IPAM plugin (a shim too)
# with an empty PATH (OVSFLOW_PLUGIN_PATH=empty).
name=${0##*/}
log=%[2]s/$(/bin/date +%%s.%%N)-$$-$name-$CNI_COMMAND
in=$(/bin/cat)
{ echo "=== $name"; /usr/bin/env | /usr/bin/sort; echo "--- stdin"; printf '%%s\n' "$in"; } >"$log.tmp"
out=$(printf '%%s' "$in" | %[1]s/"$name")
rc=$?
{ echo "--- stdout rc=$rc"; printf '%%s\n' "$out"; } >>"$log.tmp"
/bin/mv "$log.tmp" "$log"
printf '%%s' "$out"
exit $rc
`

// pluginNames are the binaries a suite's CNI bin dir holds.
var pluginNames = []string{"ovs-bridge", "ovs-portmap", "host-local", "loopback"}

// newShimDir makes dir/bin, a CNI bin dir of shims in front of the real
// plugins, and dir/calls, where the shims record.
func newShimDir(t *testing.T, dir string) (bin, calls string) {
	t.Helper()
	bin, calls = filepath.Join(dir, "bin"), filepath.Join(dir, "calls")
	for _, d := range []string{bin, calls} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := filepath.Join(dir, "shim.sh")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(shimScript, binDir, calls)), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range pluginNames {
		if err := os.Symlink(script, filepath.Join(bin, p)); err != nil {
			t.Fatal(err)
		}
	}
	return bin, calls
}

// call is one recorded plugin call.
type call struct {
	file    string
	plugin  string
	env     map[string]string
	stdin   string
	stdout  string
	rc      int
	command string
}

func (c call) String() string {
	return fmt.Sprintf("%s %s id=%s ifname=%s netns=%q rc=%d", c.plugin, c.command,
		c.env["CNI_CONTAINERID"], c.env["CNI_IFNAME"], c.env["CNI_NETNS"], c.rc)
}

// calls reads the recorded calls, oldest first.
func readCalls(t *testing.T, dir string) []call {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".tmp") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var out []call
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		c := call{file: n, env: map[string]string{}, rc: -1}
		head, rest, _ := strings.Cut(string(b), "\n--- stdin\n")
		stdin, stdout, _ := strings.Cut(rest, "\n--- stdout rc=")
		c.stdin = stdin
		if rc, so, ok := strings.Cut(stdout, "\n"); ok {
			c.rc, _ = strconv.Atoi(rc)
			c.stdout = strings.TrimSpace(so)
		}
		for i, l := range strings.Split(head, "\n") {
			if i == 0 {
				c.plugin = strings.TrimPrefix(l, "=== ")
				continue
			}
			if k, v, ok := strings.Cut(l, "="); ok {
				c.env[k] = v
			}
		}
		c.command = c.env["CNI_COMMAND"]
		out = append(out, c)
	}
	return out
}

// filterCalls keeps the calls of plugin (any when "") with command (any when "").
func filterCalls(cs []call, plugin, command string) []call {
	var out []call
	for _, c := range cs {
		if (plugin == "" || c.plugin == plugin) && (command == "" || c.command == command) {
			out = append(out, c)
		}
	}
	return out
}

// logCallsOnFailure prints a one-line summary of every call, and the stdin
// and stdout of the failed ones, when the test failed.
func logCallsOnFailure(t *testing.T, dir string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		for _, c := range readCalls(t, dir) {
			fmt.Fprintf(&b, "  %s\n", c)
			if c.rc != 0 {
				fmt.Fprintf(&b, "    stdin: %s\n    stdout: %s\n", strings.TrimSpace(c.stdin), c.stdout)
			}
		}
		t.Logf("plugin calls (%s):\n%s", dir, b.String())
	})
}

// assertAllSucceeded fails for every call that did not exit 0.
func assertAllSucceeded(t *testing.T, cs []call) {
	t.Helper()
	for _, c := range cs {
		if c.rc != 0 {
			t.Errorf("%s: stdout %s", c, c.stdout)
		}
	}
}
