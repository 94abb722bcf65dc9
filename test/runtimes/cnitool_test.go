package runtimes

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// cnitool is libcni's command-line front end: the only caller that sends
// CHECK, STATUS and GC. It reads the conflist by network name from
// NETCONFPATH, capability arguments from CAP_ARGS, and derives the container
// ID from the netns path.
type cnitool struct {
	bin, netconf, cniPath, network string
}

func (c *cnitool) run(t *testing.T, capArgs, cniArgs string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(os.Environ(), "NETCONFPATH="+c.netconf, "CNI_PATH="+c.cniPath, "CAP_ARGS="+capArgs, "CNI_ARGS="+cniArgs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cnitool %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (c *cnitool) must(t *testing.T, capArgs, cniArgs string, args ...string) string {
	t.Helper()
	out, err := c.run(t, capArgs, cniArgs, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// cnitoolContainerID is how cnitool names the container of a netns path.
func cnitoolContainerID(nsPath string) string {
	s := sha512.Sum512([]byte(nsPath))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

// resultIPs returns the addresses of a CNI result (cniVersion >= 0.3.0), without prefix length.
func resultIPs(t *testing.T, out string) (v4, v6 string) {
	t.Helper()
	var r struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("result %q: %v", out, err)
	}
	for _, ip := range r.IPs {
		a, _, _ := strings.Cut(ip.Address, "/")
		if strings.Contains(a, ":") {
			v6 = a
		} else {
			v4 = a
		}
	}
	if v4 == "" || v6 == "" {
		t.Fatalf("result %s: want an IPv4 and an IPv6 address", out)
	}
	return v4, v6
}

// TestCnitool drives a cniVersion 1.1.0 conflist (examples/cnitool.conflist)
// through add, check, status, del and gc.
func TestCnitool(t *testing.T) {
	inst := installed(t, "cnitool")
	n := newNode(t)
	dir := suiteDir(t, "cnitool")
	dataDir, logFile := filepath.Join(dir, "ipam"), filepath.Join(dir, "plugins.log")
	conf := example(t, "cnitool.conflist", n, dataDir, logFile)
	if v := conf["cniVersion"]; v != "1.1.0" {
		t.Fatalf("examples/cnitool.conflist: cniVersion %v, want 1.1.0", v)
	}
	shimBin, calls := newShimDir(t, dir)
	logCallsOnFailure(t, calls)
	tool := &cnitool{bin: inst["CNITOOL"], netconf: filepath.Join(dir, "net.d"), cniPath: shimBin, network: conf["name"].(string)}
	if err := os.MkdirAll(tool.netconf, 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(tool.netconf, "10-ovsflow.conflist"), conf)
	net := tool.network

	a, b, orphan := newNetNS(t), newNetNS(t), newNetNS(t)
	idA, idB, idOrphan := cnitoolContainerID(a.path()), cnitoolContainerID(b.path()), cnitoolContainerID(orphan.path())
	t.Cleanup(func() {
		for _, c := range []*netNS{a, b, orphan} {
			tool.run(t, "", "", "del", net, c.path())
		}
	})
	capA := fmt.Sprintf(`{"portMappings":[{"hostPort":%d,"containerPort":%d,"protocol":"tcp"},{"hostPort":%d,"containerPort":%d,"protocol":"udp"}]}`,
		hostPortTCP, ctrPortTCP, hostPortUDP, ctrPortUDP)
	resA := tool.must(t, capA, "IgnoreUnknown=true;K8S_POD_NAME=rt-a", "add", net, a.path())
	resB := tool.must(t, "", "", "add", net, b.path())
	aV4, aV6 := resultIPs(t, resA)
	bV4, _ := resultIPs(t, resB)
	t.Logf("a=%s %s (%s), b=%s (%s)", aV4, aV6, idA, bV4, idB)
	if !strings.Contains(resA, `"cniVersion": "1.1.0"`) && !strings.Contains(resA, `"cniVersion":"1.1.0"`) {
		t.Errorf("ADD result is not cniVersion 1.1.0: %s", resA)
	}
	n.assertAttached(t, idA, "eth0", true)
	n.assertAttached(t, idB, "eth0", false)
	a.serve(t, "cnitool-a", ctrPortTCP, ctrPortUDP)
	b.serve(t, "cnitool-b", ctrPortTCP, ctrPortUDP)

	t.Run("host ports", func(t *testing.T) {
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "cnitool-a", outsideV4)
		expect(t, n.outside.path(), "tcp", framework.HP(nodeV6, hostPortTCP), "cnitool-a", outsideV6)
		expect(t, n.outside.path(), "udp", framework.HP(nodeV4, hostPortUDP), "cnitool-a", outsideV4)
		expect(t, n.outside.path(), "udp", framework.HP(nodeV6, hostPortUDP), "cnitool-a", outsideV6)
		expect(t, b.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "cnitool-a", "")
		expect(t, a.path(), "tcp", framework.HP(nodeV4, hostPortTCP), "cnitool-a", "") // hairpin
		expect(t, "", "tcp", framework.HP(nodeV4, hostPortTCP), "cnitool-a", nodeV4)   // from the node itself
		expect(t, "", "udp", framework.HP(nodeV6, hostPortUDP), "cnitool-a", nodeV6)
	})
	t.Run("container to container", func(t *testing.T) {
		expect(t, b.path(), "tcp", framework.HP(aV4, ctrPortTCP), "cnitool-a", bV4)
		expect(t, a.path(), "udp", framework.HP(bV4, ctrPortUDP), "cnitool-b", aV4)
		expect(t, n.outside.path(), "tcp", framework.HP(bV4, ctrPortTCP), "cnitool-b", outsideV4)
	})
	t.Run("check and status", func(t *testing.T) {
		tool.must(t, capA, "IgnoreUnknown=true;K8S_POD_NAME=rt-a", "check", net, a.path())
		tool.must(t, "", "", "check", net, b.path())
		tool.must(t, "", "", "status", net, a.path())
		cs := readCalls(t, calls)
		for _, p := range []string{"ovs-bridge", "ovs-portmap"} {
			if len(filterCalls(cs, p, "CHECK")) != 2 || len(filterCalls(cs, p, "STATUS")) != 1 {
				t.Errorf("%s: got %d CHECK and %d STATUS calls, want 2 and 1", p,
					len(filterCalls(cs, p, "CHECK")), len(filterCalls(cs, p, "STATUS")))
			}
		}
	})

	// DEL of a: its host ports, port, veth and address go; b is untouched.
	tool.must(t, capA, "IgnoreUnknown=true;K8S_POD_NAME=rt-a", "del", net, a.path())
	n.assertDetached(t, idA, "eth0")
	expectNoAnswer(t, n.outside.path(), "tcp", framework.HP(nodeV4, hostPortTCP))
	expectNoAnswer(t, "", "tcp", framework.HP(nodeV4, hostPortTCP))
	expect(t, n.outside.path(), "tcp", framework.HP(bV4, ctrPortTCP), "cnitool-b", outsideV4)
	for _, ip := range allocations(t, dataDir, net) {
		if ip == aV4 || ip == aV6 {
			t.Errorf("address %s of a still allocated after its DEL", ip)
		}
	}

	// An attachment the runtime forgot (its libcni cache entry is gone): only
	// the plugins' GC can find it, from OVSDB.
	tool.must(t, capA, "", "add", net, orphan.path())
	n.assertAttached(t, idOrphan, "eth0", true)
	cache, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", net+"-"+idOrphan+"-*"))
	if len(cache) != 1 {
		t.Fatalf("libcni cache entry of the orphan: got %v, want one file", cache)
	}
	if err := os.Remove(cache[0]); err != nil {
		t.Fatal(err)
	}

	// cnitool gc passes no valid attachments: libcni DELs what it cached (b),
	// then every plugin's GC must remove the rest (the orphan).
	tool.must(t, "", "", "gc", net, b.path())
	cs := readCalls(t, calls)
	for _, p := range []string{"ovs-bridge", "ovs-portmap"} {
		if len(filterCalls(cs, p, "GC")) != 1 {
			t.Errorf("%s: got %d GC calls, want 1", p, len(filterCalls(cs, p, "GC")))
		}
	}
	n.assertDetached(t, idB, "eth0")
	n.assertDetached(t, idOrphan, "eth0")
	expectNoAnswer(t, n.outside.path(), "tcp", framework.HP(bV4, ctrPortTCP))
	n.assertClean(t, dataDir, net)
	if left, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", net+"-*")); len(left) > 0 {
		t.Errorf("libcni cache entries left: %v", left)
	}
	assertAllSucceeded(t, cs)

	t.Run("logFile", func(t *testing.T) {
		assertLogFile(t, logFile, map[string]int{"ADD": 2, "CHECK": 2, "DEL": 2}, idA)
	})
}
