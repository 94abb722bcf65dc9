package kubeconf

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// The script cp-init.sh sources gives supervise each process's name and
// arguments word for word, as bash parses it.
func TestControlPlaneScriptAsBashReadsIt(t *testing.T) {
	for _, c := range []ControlPlane{
		{Bin: "/opt/k/bin", PKI: "/run/p-kube/pki", EtcdData: "/var/lib/etcd", Name: "cp", Advertise: "203.0.113.162",
			ClusterCIDRs: []string{"198.51.100.0/24", "2001:db8:10:100::/56"}, ServiceCIDRs: []string{"203.0.113.192/27", "2001:db8:10:ffff::/112"},
			Mask4: 26, Mask6: 64, APIQPS: 100},
		// IPv6-only pods; a path with a quote and a space.
		{Bin: "/opt/it's here/bin", PKI: "/run/p kube/pki", EtcdData: "/d", Name: "cp", Advertise: "2001:db8::2",
			ClusterCIDRs: []string{"2001:db8:10:100::/56"}, ServiceCIDRs: []string{"2001:db8:10:ffff::/112"}, Mask6: 64},
	} {
		script := `supervise() { printf '%s\0' "$@"; printf '\n\0'; }` + "\n" + string(c.Script())
		out, err := exec.Command("bash", "-c", script).Output()
		if err != nil {
			t.Fatal(err)
		}
		var got []Process
		for _, rec := range strings.Split(strings.TrimSuffix(string(out), "\n\x00"), "\n\x00") {
			w := strings.Split(strings.TrimSuffix(rec, "\x00"), "\x00")
			got = append(got, Process{Name: w[0], Args: w[1:]})
		}
		want := c.Processes()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("bash read\n%q\nwant\n%q", got, want)
		}
		names := []string{}
		for _, p := range want {
			names = append(names, p.Name)
		}
		if strings.Join(names, " ") != "etcd kube-apiserver kube-controller-manager kube-scheduler" {
			t.Errorf("processes %v", names)
		}
		cm := strings.Join(want[2].Args, " ")
		if has := strings.Contains(cm, "--node-cidr-mask-size-ipv4"); has != (c.Mask4 != 0) {
			t.Errorf("Mask4 %d, the controller manager's line: %s", c.Mask4, cm)
		}
		for _, i := range []int{2, 3} {
			line := strings.Join(want[i].Args, " ")
			if has := strings.Contains(line, "--kube-api-qps 100 --kube-api-burst 200"); has != (c.APIQPS == 100) {
				t.Errorf("APIQPS %d, %s: %s", c.APIQPS, want[i].Name, line)
			}
		}
		if !strings.HasPrefix(want[1].Args[0], c.Bin+"/") {
			t.Errorf("kube-apiserver's binary %s, not in %s", want[1].Args[0], c.Bin)
		}
	}
}
