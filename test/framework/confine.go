package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// envPluginPath chooses the PATH the suite's plugins run with: "empty" (the
// default) or "inherit" (the caller's, to debug a plugin by hand).
const envPluginPath = "OVSFLOW_PLUGIN_PATH"

// Confined reports whether the plugins run with an empty PATH.
func Confined() bool { return os.Getenv(envPluginPath) != "inherit" }

// confinedPlugins are the suite's own plugins: the ones that must need no
// program on the node (ovs-vsctl, ovs-ofctl, nft, ip...) but the IPAM plugin,
// which they find by CNI_PATH, not PATH.
var confinedPlugins = []string{"ovs-bridge", "ovs-portmap"}

// Confine returns a plugin directory for the suites that holds, for each of
// the suite's plugins in bin, a wrapper that runs it with PATH set to an
// empty directory, and links to everything else in bin (the IPAM plugins).
// So every suite proves that the plugins run on a node where Open vSwitch's
// tools and nft are not installed (as where Open vSwitch runs in a
// container): a plugin that executes a program by name fails. With
// OVSFLOW_PLUGIN_PATH=inherit it returns bin unchanged. The caller removes
// the directory.
func Confine(bin string) (string, error) {
	if !Confined() {
		return bin, nil
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "ovsflow-confined-")
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		os.RemoveAll(dir)
		return "", fmt.Errorf("confining the plugins of %s: %w", bin, err)
	}
	empty := filepath.Join(dir, ".empty-path")
	if err := os.Mkdir(empty, 0o755); err != nil {
		return fail(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	entries, err := os.ReadDir(bin)
	if err != nil {
		return fail(err)
	}
	for _, e := range entries {
		real, link := filepath.Join(bin, e.Name()), filepath.Join(dir, e.Name())
		if !isConfined(e.Name()) {
			if err := os.Symlink(real, link); err != nil {
				return fail(err)
			}
			continue
		}
		script := "#!/bin/sh\n# " + e.Name() + " with an empty PATH (test/framework.Confine)\n" +
			"PATH=" + shellQuote(empty) + "\nexport PATH\nexec " + shellQuote(real) + ` "$@"` + "\n"
		if err := os.WriteFile(link, []byte(script), 0o755); err != nil {
			return fail(err)
		}
	}
	return dir, nil
}

func isConfined(name string) bool {
	for _, p := range confinedPlugins {
		if name == p {
			return true
		}
	}
	return false
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
