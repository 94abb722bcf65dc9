package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// An IPAM plugin that never answers ADD does not hang ovs-bridge's ADD: the
// plugin is killed when the command's work ends (its "timeout", less the
// time kept for the rollback), the ADD fails naming the deadline and leaves
// nothing (port, veth, flows, allocation). Both paths: IPAM in the
// background while the veth is made, and dhcp's (IPAM on the attached
// port; the fake plugin is named "dhcp" and found first in CNI_PATH).
// Control: the same plugin answering, the same ADD succeeds. The two wait
// out their "timeout" side by side, a short one (hungTimeout).
func TestBridgeIPAMHangs(t *testing.T) {
	const hungTimeout = 6 * time.Second
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	for i, name := range []string{"hung", "dhcp"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fake := t.TempDir()
			// The plugins run with an empty PATH: absolute paths only.
			script := `#!/bin/sh
/bin/cat >/dev/null
if [ "$CNI_COMMAND" = ADD ] && [ -e ` + fake + `/hang ]; then
	/bin/sleep 3600 &
	echo $! >>` + fake + `/pids
	wait
fi
[ "$CNI_COMMAND" = ADD ] && echo '{"cniVersion":"1.0.0","ips":[{"address":"192.0.2.` + strconv.Itoa(50+i) + `/24","gateway":"192.0.2.1"}]}'
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
			conf := framework.BridgeConf(br, ovsdbAddr, "", map[string]any{"ipam": map[string]any{"type": name}, "timeout": hungTimeout.String()})
			n := framework.NewCNI(t, conflist("1.0.0", "ipamhang"+name, conf), nil, fake)

			control := framework.NewContainer(t)
			if _, err := n.Add(control, "eth0", nil); err != nil {
				t.Fatalf("control: ADD with the plugin answering: %v", err)
			}
			if err := n.Del(control, "eth0", nil); err != nil {
				t.Fatalf("control: DEL: %v", err)
			}

			if err := os.WriteFile(filepath.Join(fake, "hang"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			c := framework.NewContainer(t)
			// The runtime's own bound, far beyond ovs-bridge's (its
			// "timeout", rollback included): past it, the ADD hangs, and
			// libcni kills it.
			ctx, cancel := context.WithTimeout(context.Background(), hungTimeout+time.Minute)
			defer cancel()
			_, err := n.Cfg.AddNetworkList(ctx, n.List, c.RT("eth0", nil))
			t.Cleanup(func() { n.Del(c, "eth0", nil) })
			if err == nil || !strings.Contains(err.Error(), `ipam "`+name+`"`) || !strings.Contains(err.Error(), "context deadline exceeded") {
				t.Fatalf("ADD with IPAM hung: got %v, want ovs-bridge's error naming the IPAM plugin and the deadline", err)
			}
			assertNothingLeft(t, c.ID, t.TempDir(), "")
			out, err := run("ovs-ofctl", "--no-names", "-O", "OpenFlow14", "--no-stats", "dump-flows",
				(&framework.OVSHost{Bridge: br}).OFTarget(), flows.AttachmentCookie(c.ID, "eth0").AttachmentDelete().String())
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(out, "cookie=") {
				t.Errorf("flows of the failed ADD left:\n%s", out)
			}
		})
	}
}

// Multus's form of a dual-stack address request (a network selection's
// "ips"): runtimeConfig.ips with both addresses, and the same addresses
// comma-joined in CNI_ARGS IP=, which host-local reads as a single address
// and refuses. ovs-bridge leaves that CNI_ARGS IP out for host-local, so the
// ADD gets both addresses, and DEL leaves nothing. Control: a CNI_ARGS IP
// that runtimeConfig.ips does not repeat reaches host-local as it is (the
// container gets that IPv4 address, and an IPv6 one of host-local's choice).
func TestBridgeIPsRequestedTwiceAsMultusDoes(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	dataDir := t.TempDir()
	conf := framework.BridgeConf(br, ovsdbAddr, dataDir, map[string]any{"capabilities": map[string]any{"ips": true}})
	n := framework.NewCNI(t, conflist("1.0.0", "ipstwice", conf), nil)
	for _, c := range []struct {
		name    string
		ips     []string // runtimeConfig.ips
		cniArgs string   // CNI_ARGS IP
		want    []string
	}{
		{"ips and CNI_ARGS IP=A,B", []string{"192.0.2.77/24", "2001:db8:c::77/64"}, "192.0.2.77/24,2001:db8:c::77/64", []string{"192.0.2.77", "2001:db8:c::77"}},
		{"control: CNI_ARGS IP alone", nil, "192.0.2.78", []string{"192.0.2.78"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ct := framework.NewContainer(t)
			var capArgs map[string]any
			if c.ips != nil {
				capArgs = map[string]any{"ips": c.ips}
			}
			rt := ct.RT("eth0", capArgs)
			rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"IP", c.cniArgs}}
			res, err := n.Cfg.AddNetworkList(context.Background(), n.List, rt)
			if err != nil {
				t.Fatalf("ADD: %v", err)
			}
			r, err := current.NewResultFromResult(res)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ip := range r.IPs {
				got = append(got, ip.Address.IP.String())
			}
			sort.Strings(got)
			have := strings.Join(got, " ")
			for _, w := range c.want {
				if len(got) != 2 || !strings.Contains(" "+have+" ", " "+w+" ") {
					t.Errorf("ADD: addresses %v, want one of each family, %v among them", got, c.want)
				}
			}
			if err := n.Cfg.DelNetworkList(context.Background(), n.List, rt); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			assertNothingLeft(t, ct.ID, dataDir, "ipstwice")
		})
	}
}
