package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// A reconcile that runs while a dhcp ADD waits for its lease leaves the
// port guarded. The dhcp plugin here is a stand-in found first in CNI_PATH
// that answers only once the test lets it, so the ADD stays in its lease
// with its port attached, its link up and the flows of a port without
// addresses in; then `ovs-portmap reconcile` runs, and a spoofer in the
// container sends gratuitous ARPs claiming victim V's address and frames
// from a forged MAC. Protected: none reaches the outside or the node, the
// reconcile having rebuilt the port's flows from its record. Control
// (portSecurity false): they arrive.
func TestAttackDHCPLeaseReconcile(t *testing.T) {
	for _, tc := range []struct {
		name string
		psec bool
	}{{"protected", true}, {"control-portSecurity-off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLab(t)
			v := l.join(l.network("lease-victim", nil, nil), "victim", nil)

			fake := t.TempDir()
			gate := filepath.Join(fake, "lease")
			// The plugins run with an empty PATH: absolute paths only.
			script := `#!/bin/sh
/bin/cat >/dev/null
[ "$CNI_COMMAND" = ADD ] || exit 0
while [ ! -e ` + gate + ` ]; do /bin/sleep 0.05; done
echo '{"cniVersion":"1.0.0","ips":[{"address":"192.0.2.250/24","gateway":"192.0.2.1"}]}'
`
			if err := os.WriteFile(filepath.Join(fake, "dhcp"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.WriteFile(gate, nil, 0o644) }) // an ADD still waiting ends
			entry := l.bridgeEntry(map[string]any{"portSecurity": tc.psec, "ipam": map[string]any{"type": "dhcp"}})
			n := framework.NewCNI(t, conflist("1.1.0", "lease-dhcp", entry), nil, fake)

			c := framework.NewContainer(t)
			l.watch(c, "attacker")
			added := make(chan error, 1)
			go func() { _, err := n.Add(c, "eth0", nil); added <- err }()
			t.Cleanup(func() { n.Del(c, "eth0", nil) })

			// In the lease: the port has its ofport and the link is up.
			portsecFlows := func() string {
				out, _ := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows", l.OFTarget(),
					flows.AttachmentCookie(c.ID, "eth0").WithKind(flows.CookieKindPortSecurity).Delete().String())
				return out
			}
			var ofport string
			var up bool
			if !framework.Until(20*time.Second, func() bool {
				ofport, _ = run("ovs-vsctl", "--db="+ovsdbAddr, "--if-exists", "get", "Interface", c.HostVeth("eth0"), "ofport")
				up = false
				if ifi, err := net.InterfaceByName(c.HostVeth("eth0")); err == nil {
					up = ifi.Flags&net.FlagUp != 0
				}
				ready := up && strings.TrimSpace(ofport) != "" && !strings.HasPrefix(strings.TrimSpace(ofport), "[") &&
					strings.TrimSpace(ofport) != "-1"
				if ready && (!tc.psec || strings.Contains(portsecFlows(), "cookie=")) {
					return true
				}
				select {
				case err := <-added:
					t.Fatalf("ADD returned before its lease: %v", err)
				default:
				}
				return false
			}) {
				t.Fatalf("the ADD did not reach its lease (ofport %q, host end up %v)", ofport, up)
			}
			if out, err := run(filepath.Join(binDir, "ovs-portmap"), "reconcile", "-ovsdb", ovsdbAddr); err != nil {
				t.Fatalf("reconcile: %v: %s", err, out)
			} else {
				t.Logf("during the lease: %s", strings.TrimSpace(out))
			}
			if tc.psec && !strings.Contains(portsecFlows(), "cookie=") {
				t.Errorf("after reconcile during the lease: the port has no port security flow")
			}

			snOut := sniff(t, l.Outside.NS, "eth0", "outside")
			snNode := sniff(t, nil, l.Bridge, "node")
			drops := watchDrops(t, c)
			sp := startSpoofer(t, c, v.v4)
			framework.Until(5*time.Second, func() bool { return sp.sent.Load() >= 200 }) // the attack is made
			sp.halt()
			if sp.err != nil || sp.sent.Load() == 0 {
				t.Fatalf("the spoofer sent %d frames: %v", sp.sent.Load(), sp.err)
			}
			var contMAC net.HardwareAddr
			if err := c.NS.Do(func(_ ns.NetNS) error {
				ifi, err := net.InterfaceByName("eth0")
				if err == nil {
					contMAC = ifi.HardwareAddr
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
			match := spoofed(contMAC, v.v4)
			if tc.psec {
				// A negative check: none of them shows up for 300 ms after the last was sent.
				framework.Consistently(t, 300*time.Millisecond, "spoofed frames after a reconcile during the lease", func() error {
					for _, sn := range []*sniffer{snOut, snNode} {
						if got := sn.count(match); got > 0 {
							return fmt.Errorf("%s received %d, want none: %v", sn.where, got, sn.first(4, match))
						}
					}
					return nil
				})
			} else {
				framework.Until(2*time.Second, func() bool { return snOut.count(match) > 0 && snNode.count(match) > 0 })
			}
			for _, sn := range []*sniffer{snOut, snNode} {
				got := sn.count(match)
				if tc.psec && got > 0 {
					t.Errorf("%s received %d spoofed frames after a reconcile during the lease, want none: %v", sn.where, got, sn.first(4, match))
				}
				if !tc.psec && got == 0 {
					t.Errorf("control: %s received none of the %d spoofed frames, want some", sn.where, sp.sent.Load())
				}
				t.Logf("%s: %d of %d spoofed frames received", sn.where, got, sp.sent.Load())
			}
			drops.check(t, tc.psec, flows.ReasonSpoofed)

			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := <-added; err != nil {
				t.Fatalf("ADD after the lease: %v", err)
			}
		})
	}
}
