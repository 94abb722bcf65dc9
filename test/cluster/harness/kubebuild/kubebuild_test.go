package kubebuild

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// Built reads the binary's own build information: the module it was built
// from, at which version, as main module or dependency.
func TestBuiltReadsTheBinarysBuildInfo(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Path == "" {
		t.Fatal("the test binary has no build information")
	}
	if !Built(self, bi.Main.Path, bi.Main.Version) {
		t.Errorf("Built(%s, %s, %s): false, want true (its main module)", self, bi.Main.Path, bi.Main.Version)
	}
	if Built(self, bi.Main.Path, "v0.0.0-not-this") {
		t.Errorf("Built with another version: true")
	}
	if Built(self, "example.com/not-linked", bi.Main.Version) {
		t.Errorf("Built with a module not linked: true")
	}
	if Built(filepath.Join(t.TempDir(), "none"), bi.Main.Path, bi.Main.Version) {
		t.Errorf("Built of a missing file: true")
	}
	sh := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(sh, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if Built(sh, bi.Main.Path, bi.Main.Version) {
		t.Errorf("Built of a script: true")
	}
}

// The CoreDNS version and image name are hack/coredns's go.mod's.
func TestCoreDNSVersionFromItsModule(t *testing.T) {
	c := Cache{Prefix: "/p", Repo: filepath.Join("..", "..", "..", "..")}
	v, err := c.CoreDNSVersion()
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(c.Repo, "hack", "coredns", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "v1.") || !strings.Contains(string(mod), "github.com/coredns/coredns "+v+"\n") {
		t.Errorf("CoreDNSVersion: %q, not the version hack/coredns/go.mod requires", v)
	}
	tar, name, err := c.CoreDNSTar()
	if err != nil {
		t.Fatal(err)
	}
	if tar != "/p/images/coredns-"+v+".tar" || name != "registry.k8s.io/coredns/coredns:"+v {
		t.Errorf("CoreDNSTar: %s %s", tar, name)
	}
	if _, err := (Cache{Repo: t.TempDir()}).CoreDNSVersion(); err == nil {
		t.Errorf("CoreDNSVersion of a tree without hack/coredns: no error")
	}
}

// The version stamped in is the one a Node reports and e2e.test checks.
func TestLdflagsStampTheVersion(t *testing.T) {
	f := ldflags()
	for _, want := range []string{"-X k8s.io/component-base/version.gitVersion=" + Kubernetes, "-X k8s.io/client-go/pkg/version.gitMinor=37 ",
		"-X k8s.io/component-base/version.gitMajor=1 "} {
		if !strings.Contains(f+" ", want) {
			t.Errorf("ldflags %q: no %q", f, want)
		}
	}
}
