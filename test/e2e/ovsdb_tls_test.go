package e2e

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/internal/certtest"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// sslRemote has the sandbox's ovsdb-server listen for mutual TLS on the
// namespace's loopback with f's server certificate and CA, and returns the
// ssl: endpoint.
func sslRemote(t *testing.T, f certtest.Files) string {
	t.Helper()
	rundir := filepath.Dir(strings.TrimPrefix(ovsdbAddr, "unix:"))
	ctl := filepath.Join(rundir, "ovsdb-server.ctl")
	// A free port of the sandbox's loopback (its namespace is the test's).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	framework.Vsctl(t, "set-ssl", f.ServerKey, f.ServerCert, f.CA)
	t.Cleanup(func() { run("ovs-vsctl", "--db="+ovsdbAddr, "del-ssl") })
	remote := "pssl:" + strconv.Itoa(port) + ":127.0.0.1"
	if out, err := run("ovs-appctl", "-t", ctl, "ovsdb-server/add-remote", remote); err != nil {
		t.Fatalf("add-remote %s: %v\n%s", remote, err, out)
	}
	t.Cleanup(func() { run("ovs-appctl", "-t", ctl, "ovsdb-server/remove-remote", remote) })
	ep := "ssl:127.0.0.1:" + strconv.Itoa(port)
	// Readiness, not a timed assertion: ovsdb-server reads its SSL row and
	// opens the listener on its next loop.
	var out string
	if err := framework.Wait(10*time.Second, func() (err error) {
		out, err = run("ovs-vsctl", "--db="+ep, "-p", f.ClientKey, "-c", f.ClientCert, "-C", f.CA, "--timeout=2", "get", "Open_vSwitch", ".", "_uuid")
		return err
	}); err != nil {
		t.Fatalf("ovsdb-server does not serve %s: %v\n%s", ep, err, out)
	}
	return ep
}

// ADD, CHECK and DEL of ovs-bridge over OVSDB's ssl: with mutual TLS; a CA
// that did not sign the server's certificate, and a client certificate the
// server's CA did not sign, are refused with code 7 naming the TLS keys,
// leaving nothing.
func TestOVSDBTLS(t *testing.T) {
	requireSandbox(t)
	if !strings.HasPrefix(ovsdbAddr, "unix:") {
		t.Skipf("sandbox OVSDB %s is not a unix socket", ovsdbAddr)
	}
	dir := t.TempDir()
	good, wrong := certtest.Generate(t, dir, "ovsdb"), certtest.Generate(t, dir, "wrong")
	ep := sslRemote(t, good)
	br := framework.NewBridge(t, "e2ebr")
	rundir := filepath.Dir(strings.TrimPrefix(ovsdbAddr, "unix:"))
	conf := func(key, cert, ca string) map[string]any {
		return framework.BridgeConf(br, ovsdbAddr, dir, map[string]any{"ovsdb": ep, "ovsdbKey": key, "ovsdbCert": cert, "ovsdbCA": ca,

			"openflow": "unix:" + filepath.Join(rundir, br+".mgmt")})

	}
	n := framework.NewCNI(t, conflist("1.0.0", "tls", conf(good.ClientKey, good.ClientCert, good.CA)), nil)
	c := framework.NewContainer(t)
	n.MustAdd(t, c, "eth0", nil)
	t.Cleanup(func() { n.Del(c, "eth0", nil) })
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 1 {
		t.Fatalf("ports of the container: got %v, want one", ports)
	}
	if err := n.Check(c, "eth0", nil); err != nil {
		t.Errorf("CHECK over ssl: %v", err)
	}
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Fatalf("DEL over ssl: %v", err)
	}
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
		t.Errorf("ports %v left after DEL", ports)
	}

	cases := []struct {
		name          string
		key, cert, ca string
		wantMsg       string
	}{
		{"wrong CA", good.ClientKey, good.ClientCert, wrong.CA, `"ovsdbCA"`},
		{"client certificate of another CA", wrong.ClientKey, wrong.ClientCert, good.CA, `"ovsdbCert"`},
		{"missing key file", filepath.Join(dir, "none.pem"), good.ClientCert, good.CA, `"ovsdbKey"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := framework.NewCNI(t, conflist("1.0.0", "tlsbad", conf(tc.key, tc.cert, tc.ca)), nil)
			b := framework.NewContainer(t)
			_, err := m.Add(b, "eth0", nil)
			if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("ADD: got %v (code %d), want code 7 naming %s", err, cniCode(err), tc.wantMsg)
			}
			if ports := framework.PortsOf(t, ovsdb.KeyContainerID, b.ID); len(ports) != 0 {
				t.Errorf("ports %v left", ports)
			}
			if veths := framework.OurVeths(t); len(veths) != 0 {
				t.Errorf("veths %v left", veths)
			}
		})
	}
}
