package deploy

import (
	"io"
	"os"
	"reflect"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/agent"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const uninstallManifest = "ovsflow-uninstall.yaml"

// TestUninstallManifestMatchesAgent: the uninstall DaemonSet is one object,
// runs the agent's image in uninstall mode with the agent's flags (but the
// probes' address, which uninstall does not serve), in the node's network
// namespace, with the agent's capabilities and the same host paths; it reads
// no API object (no token, no ServiceAccount of its own).
func TestUninstallManifestMatchesAgent(t *testing.T) {
	b, err := os.ReadFile(uninstallManifest)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatalf("%s: want one DaemonSet: %v", uninstallManifest, err)
	}
	o := load(t)
	ac, acfg := agentOf(t, o)
	spec := ds.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("want one init container (the uninstall) and one container; got %d and %d", len(spec.InitContainers), len(spec.Containers))
	}
	u := spec.InitContainers[0]
	if u.Image != ac.Image || spec.Containers[0].Image != ac.Image {
		t.Errorf("images %q and %q, want the agent's %q", u.Image, spec.Containers[0].Image, ac.Image)
	}
	if len(u.Command) < 2 || u.Command[0] != ac.Command[0] {
		t.Fatalf("uninstall command %q, want the agent's binary %q", u.Command, ac.Command[0])
	}
	mode, ucfg, err := agent.ParseArgs(u.Command[1:], io.Discard)
	if err != nil || mode != "uninstall" {
		t.Fatalf("uninstall command %q: mode %q, %v", u.Command, mode, err)
	}
	acfg.HealthAddr, ucfg.HealthAddr = "", ""
	acfg.Metrics, acfg.Events = nil, nil
	if !reflect.DeepEqual(ucfg, acfg) {
		t.Errorf("uninstall flags give\n%+v\nwant the agent's\n%+v", ucfg, acfg)
	}
	if !spec.HostNetwork {
		t.Error("uninstall: not in the node's network namespace (hostNetwork)")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken || spec.ServiceAccountName != "" {
		t.Errorf("uninstall: a ServiceAccount %q or its token: it reads no API object", spec.ServiceAccountName)
	}
	if !reflect.DeepEqual(u.SecurityContext, ac.SecurityContext) {
		t.Errorf("uninstall securityContext %+v, want the agent's %+v", u.SecurityContext, ac.SecurityContext)
	}
	hostPath := func(vols []corev1.Volume, name string) string {
		for _, v := range vols {
			if v.Name == name && v.HostPath != nil {
				return v.HostPath.Path
			}
		}
		return ""
	}
	for _, m := range u.VolumeMounts {
		want := ""
		for _, am := range ac.VolumeMounts {
			if am.MountPath == m.MountPath {
				want = hostPath(o.ds.Spec.Template.Spec.Volumes, am.Name)
			}
		}
		if got := hostPath(spec.Volumes, m.Name); got == "" || got != want {
			t.Errorf("uninstall mount %s: host path %q, want the agent's %q", m.MountPath, got, want)
		}
	}
	if len(u.VolumeMounts) != 4 {
		t.Errorf("uninstall mounts %d volumes, want 4 (OVS run dir, CNI bin and conf dirs, the pod ranges' confirmation)", len(u.VolumeMounts))
	}
}
