package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// dhcp IPAM works as with the reference bridge plugin: the interface is
// attached before IPAM runs, so the CNI dhcp daemon can lease an address from
// a DHCP server on the bridge (dnsmasq in a netns of its own).
func TestBridgeDHCP(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	n := framework.NewCNI(t, conflist("1.0.0", "dhcp", dhcpConf(br, dhcpServer(t, br))), nil)
	c := framework.NewContainer(t)
	r, err := n.Add(c, "eth0", nil)
	if err != nil {
		t.Fatalf("ADD with dhcp: %v", err)
	}
	got := framework.AddrOf(t, r, false)
	if !strings.HasPrefix(got, "192.0.2.1") {
		t.Errorf("leased %s, want one of 192.0.2.100-150", got)
	}
	if err := c.Ping("192.0.2.254"); err != nil {
		t.Errorf("ping the DHCP server from the leased address: %v", err)
	}
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
		t.Errorf("ports %v left", ports)
	}
}

// dhcpConf is the ovs-bridge config of a network on br whose addresses the
// CNI dhcp daemon at sock leases.
func dhcpConf(br, sock string) map[string]any {
	return framework.BridgeConf(br, ovsdbAddr, "", map[string]any{"ipam": map[string]any{"type": "dhcp", "daemonSocketPath": sock}})
}

// dhcpServer puts a DHCP server (dnsmasq, 192.0.2.254, leases
// 192.0.2.100-150) on br, in a netns of its own behind an uplink, starts the
// CNI dhcp daemon, and returns the daemon's socket.
func dhcpServer(t *testing.T, br string) string {
	t.Helper()
	srv := framework.NewContainer(t)
	upl := uniq("dhs")
	if _, err := run("ip", "link", "add", upl, "type", "veth", "peer", "name", "eth0", "netns", srv.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run("ip", "link", "del", upl) })
	if framework.Userspace() {
		// As framework.WireOVSHost does for its uplink: the node's IP stack
		// sees a userspace datapath port's frames too.
		if err := link.Isolate(upl); err != nil {
			t.Fatal(err)
		}
	}
	run("ip", "link", "set", upl, "up")
	framework.Vsctl(t, "add-port", br, upl)
	setup := [][]string{
		{"ip", "addr", "add", "192.0.2.254/24", "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
	}
	if framework.Userspace() {
		// The userspace datapath forwards frames through packet sockets with
		// the checksum that TX offload left unfilled, and the receiver drops
		// them; the kernel datapath keeps the skb's checksum state.
		setup = append(setup, []string{"ethtool", "-K", "eth0", "tx", "off"})
	}
	for _, args := range setup {
		if _, err := srv.Exec(args...); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	dnsmasq := exec.Command("ip", "netns", "exec", srv.Name, "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
		"--port=0", "--interface=eth0", "--bind-interfaces", "--dhcp-range=192.0.2.100,192.0.2.150,255.255.255.0,1h",
		"--dhcp-leasefile="+filepath.Join(dir, "leases"), "--pid-file="+filepath.Join(dir, "dnsmasq.pid"))
	if err := dnsmasq.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dnsmasq.Process.Kill(); dnsmasq.Wait() })
	sock := filepath.Join(dir, "dhcp.sock")
	daemon := exec.Command(filepath.Join(binDir, "dhcp"), "daemon", "-socketpath", sock, "-broadcast",
		"-pidfile", filepath.Join(dir, "dhcp.pid"), "-timeout", "5s")
	var dlog strings.Builder
	daemon.Stdout, daemon.Stderr = &dlog, &dlog
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		daemon.Process.Kill()
		daemon.Wait()
		if t.Failed() {
			t.Logf("dhcp daemon:\n%s", dlog.String())
		}
	})
	framework.Until(2*time.Second, func() bool { return fileExists(sock) })
	return sock
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
