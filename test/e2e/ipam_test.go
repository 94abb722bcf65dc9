package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/flows"
)

// An IPAM plugin that never answers ADD does not hang ovs-bridge's ADD: the
// plugin is killed when the command's timeout ends, the ADD fails naming
// the deadline and leaves nothing (port, veth, flows, allocation). Both
// paths: IPAM in the background while the veth is made, and dhcp's (IPAM
// on the attached port; the fake plugin is named "dhcp" and found first in
// CNI_PATH). Control: the same plugin answering, the same ADD succeeds.
func TestBridgeIPAMHangs(t *testing.T) {
	requireSandbox(t)
	br := newBridge(t)
	for _, name := range []string{"hung", "dhcp"} {
		t.Run(name, func(t *testing.T) {
			fake := t.TempDir()
			// The plugins run with an empty PATH: absolute paths only.
			script := `#!/bin/sh
/bin/cat >/dev/null
if [ "$CNI_COMMAND" = ADD ] && [ -e ` + fake + `/hang ]; then
	/bin/sleep 3600 &
	echo $! >>` + fake + `/pids
	wait
fi
[ "$CNI_COMMAND" = ADD ] && echo '{"cniVersion":"1.0.0","ips":[{"address":"192.0.2.50/24","gateway":"192.0.2.1"}]}'
exit 0
`
			if err := os.WriteFile(filepath.Join(fake, name), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				b, _ := os.ReadFile(filepath.Join(fake, "pids"))
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			conf := bridgeConf(br, "", map[string]any{"ipam": map[string]any{"type": name}})
			n := newCNI(t, conflist("1.0.0", "ipamhang"+name, conf), fake)

			control := newContainer(t)
			if _, err := n.add(control, "eth0", nil); err != nil {
				t.Fatalf("control: ADD with the plugin answering: %v", err)
			}
			if err := n.del(control, "eth0", nil); err != nil {
				t.Fatalf("control: DEL: %v", err)
			}

			if err := os.WriteFile(filepath.Join(fake, "hang"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			c := newContainer(t)
			// The runtime's own bound, far beyond ovs-bridge's (its command
			// timeout, then its rollback's): past it, the ADD hangs, and
			// libcni kills it.
			ctx, cancel := context.WithTimeout(context.Background(), 2*cnicmd.Timeout+time.Minute)
			defer cancel()
			_, err := n.cfg.AddNetworkList(ctx, n.list, c.rt("eth0", nil))
			t.Cleanup(func() { n.del(c, "eth0", nil) })
			if err == nil || !strings.Contains(err.Error(), `ipam "`+name+`"`) || !strings.Contains(err.Error(), "context deadline exceeded") {
				t.Fatalf("ADD with IPAM hung: got %v, want ovs-bridge's error naming the IPAM plugin and the deadline", err)
			}
			assertNothingLeft(t, c.id, t.TempDir(), "")
			out, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows",
				(&ovsHost{bridge: br}).ofTarget(), flows.AttachmentCookie(c.id, "eth0").AttachmentDelete().String())
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, "cookie=") {
				t.Errorf("flows of the failed ADD left:\n%s", out)
			}
		})
	}
}
