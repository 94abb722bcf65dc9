package images

import (
	"os"
	"path"
	"slices"
	"testing"
)

// The repository's own Dockerfile and manifest give what the harness builds.
func TestParseDockerfileOfTheRepository(t *testing.T) {
	b, err := os.ReadFile("../../../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDockerfile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(d.Packages, "openvswitch-common") || !slices.Contains(d.Build, "./cmd/ovsflow-agent") ||
		!slices.Contains(d.Bins, "ovs-bridge") || !slices.Contains(d.Files, [2]string{"install-cni.sh", "/install-cni.sh"}) ||
		d.Entrypoint != `["/opt/ovsflow/bin/ovsflow-agent"]` {
		t.Errorf("got %+v", d)
	}
	for _, bin := range d.Bins {
		if !slices.ContainsFunc(d.Build, func(p string) bool { return path.Base(p) == bin }) {
			t.Errorf("%s is copied but not built (%v)", bin, d.Build)
		}
	}
	m, err := os.ReadFile("../../../../deploy/ovsflow-cni.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if name, err := DaemonSetName(m); err != nil || name == "" {
		t.Errorf("DaemonSetName: %q, %v", name, err)
	}
}

func TestParseDockerfileRefusesWhatItCannotBuild(t *testing.T) {
	if _, err := ParseDockerfile([]byte("FROM debian:12-slim\nENTRYPOINT [\"/x\"]\n")); err == nil {
		t.Error("a Dockerfile without packages, build or binaries: no error")
	}
}
