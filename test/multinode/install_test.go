package multinode

import (
	"encoding/json"
	"errors"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// ipRange is a range of host-local's ipam.ranges.
type ipRange struct {
	Subnet  string `json:"subnet"`
	Gateway string `json:"gateway"`
}

// TestConflistRenderedWithEachNodesPodRanges: install-cni.sh rendered each
// node's conflist with that node's pod CIDRs (OVSFLOW_POD_CIDRS), the IPv4
// gateway the first address of the node's IPv4 range.
func TestConflistRenderedWithEachNodesPodRanges(t *testing.T) {
	needNodes(t)
	for _, n := range nodes {
		t.Run(n.Name, func(t *testing.T) {
			out, err := run(n.Name, "cat", "/etc/cni/net.d/10-ovsflow.conflist")
			if err != nil {
				t.Fatal(err)
			}
			var conf struct {
				Plugins []struct {
					Type string `json:"type"`
					IPAM struct {
						Ranges [][]ipRange `json:"ranges"`
					} `json:"ipam"`
				} `json:"plugins"`
			}
			if err := json.Unmarshal([]byte(out), &conf); err != nil {
				t.Fatalf("decoding the conflist: %v\n%s", err, out)
			}
			got := map[string]string{} // subnet -> gateway
			for _, p := range conf.Plugins {
				for _, set := range p.IPAM.Ranges {
					for _, r := range set {
						got[r.Subnet] = r.Gateway
					}
				}
			}
			gw4 := n.Pod4.Addr().Next().String()
			if gw, ok := got[n.Pod4.String()]; !ok || gw != gw4 {
				t.Errorf("range %v: gateway %q (present: %v), want %s; ranges %v", n.Pod4, gw, ok, gw4, got)
			}
			if _, ok := got[n.Pod6.String()]; !ok {
				t.Errorf("no range %v; ranges %v", n.Pod6, got)
			}
		})
	}
}

// TestPluginsInstalledAtThisVersion: install-cni.sh put ovs-bridge,
// ovs-portmap, host-local and loopback in /opt/cni/bin of every node, and
// ours are the build of this tree (the version the harness stamped).
func TestPluginsInstalledAtThisVersion(t *testing.T) {
	needNodes(t)
	for _, n := range nodes {
		t.Run(n.Name, func(t *testing.T) {
			if _, err := run(n.Name, "ls", "/opt/cni/bin/host-local", "/opt/cni/bin/loopback"); err != nil {
				t.Error(err)
			}
			for _, p := range []string{"ovs-bridge", "ovs-portmap"} {
				// Without CNI_COMMAND a plugin prints its about string.
				out, _ := run(n.Name, "sh", "-c", "/opt/cni/bin/"+p+" 2>&1")
				want := "CNI " + p + " plugin (ovsflow) " + version
				if !strings.Contains(out, want+"\n") {
					t.Errorf("/opt/cni/bin/%s says %q, want %q", p, strings.TrimSpace(out), want)
				}
			}
		})
	}
}

// TestHarnessExecPassesStdinAndExitStatus: `hack/ovs-in-docker.sh exec`
// passes its standard input to the command and returns its exit status.
func TestHarnessExecPassesStdinAndExitStatus(t *testing.T) {
	needNodes(t)
	n := nodes[0].Name
	t.Cleanup(func() { _, _ = run(n, "rm", "-f", "/tmp/oid-copied") })
	_, err := runIn(n, strings.NewReader("oid-data\n"), "sh", "-c", "cat > /tmp/oid-copied; exit 3")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("exit status: got %v, want 3", err)
	}
	out, err := run(n, "cat", "/tmp/oid-copied")
	if err != nil {
		t.Fatal(err)
	}
	if out != "oid-data\n" {
		t.Errorf("the command read %q, want %q", out, "oid-data\n")
	}
}

// The capabilities deploy/ovsflow-cni.yaml grants the reconcile container.
const (
	capDACOverride = 1
	capNetAdmin    = 12
)

var capEffRE = regexp.MustCompile(`(?m)^CapEff:\s*([0-9a-f]+)$`)

// TestReconcileRunsWithOnlyTheManifestsPrivileges: the node runs `ovs-portmap
// reconcile -watch` as the DaemonSet's reconcile container does (oid-reconcile),
// with exactly NET_ADMIN and DAC_OVERRIDE and /proc/sys read-only; and
// DAC_OVERRIDE is needed: db.sock belongs to the openvswitch user.
func TestReconcileRunsWithOnlyTheManifestsPrivileges(t *testing.T) {
	needNodes(t)
	n := nodes[0].Name
	t.Run("db.sock belongs to the openvswitch user", func(t *testing.T) {
		out, err := run(n, "stat", "-c", "%U", "/run/openvswitch/db.sock")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out); got != "openvswitch" {
			t.Errorf("owner of db.sock: got %q, want openvswitch", got)
		}
	})
	t.Run("only NET_ADMIN and DAC_OVERRIDE, sysctls read-only", func(t *testing.T) {
		out, err := run(n, "pgrep", "-f", "^/opt/ovsflow/bin/ovs-portmap reconcile ")
		if err != nil {
			t.Fatalf("the reconcile process: %v", err)
		}
		pids := lines(out)
		if len(pids) != 1 {
			t.Fatalf("reconcile processes: %v, want one", pids)
		}
		pid := strings.TrimSpace(pids[0])
		status, err := run(n, "cat", "/proc/"+pid+"/status")
		if err != nil {
			t.Fatal(err)
		}
		m := capEffRE.FindStringSubmatch(status)
		if m == nil {
			t.Fatalf("no CapEff in /proc/%s/status:\n%s", pid, status)
		}
		got, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		if want := uint64(1<<capDACOverride | 1<<capNetAdmin); got != want {
			t.Errorf("effective capabilities: got %#x, want %#x (NET_ADMIN, DAC_OVERRIDE)", got, want)
		}
		// Written back unchanged, so that a writable /proc/sys changes nothing.
		const f = "/proc/sys/net/ipv4/conf/br0/arp_ignore"
		out, err = run(n, "nsenter", "-t", pid, "-m", "sh", "-c", "v=$(cat "+f+") && echo $v >"+f)
		if err == nil {
			t.Errorf("writing %s in reconcile's mount namespace worked, want it read-only", f)
		} else if !strings.Contains(err.Error(), "Read-only file system") {
			t.Errorf("writing %s in reconcile's mount namespace: %v, want a read-only file system", f, err)
		}
	})
	t.Run("without DAC_OVERRIDE db.sock is refused", func(t *testing.T) {
		out, err := run(n, "sh", "-c", "setpriv --bounding-set=-all,+net_admin --inh-caps=-all -- "+
			"/opt/ovsflow/bin/ovs-portmap reconcile -ovsdb unix:/var/run/openvswitch/db.sock 2>&1")
		if err == nil || !strings.Contains(strings.ToLower(out+err.Error()), "permission denied") {
			t.Errorf("reconcile with NET_ADMIN only: %v: %s; want it refused db.sock (permission denied)", err, out)
		}
	})
}
