package e2e

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// A saturated node: ovs-vswitchd stopped (SIGSTOP, framework.FreezeVswitchd)
// takes connections and answers nothing. A command waits for it as long as
// its budget ("timeout", pkg/cnicmd) lets it, then fails with code 11 and
// leaves nothing; a DEL that the runtime runs again, after one that
// succeeded or one killed midway, finds its work done.

// attachmentLeft lists what is left of container id's eth0 on bridge br:
// ports of its container, flows of its cookie, in-flight records (claims,
// deleting mark) on the root row. ovs-vswitchd must answer (dump-flows).
func attachmentLeft(t *testing.T, br, id string) []string {
	t.Helper()
	var left []string
	for _, p := range framework.PortsOf(t, ovsdb.KeyContainerID, id) {
		left = append(left, "port "+p)
	}
	for _, f := range framework.FlowsMatching(t, framework.OFTarget(ovsdbAddr, br), flows.AttachmentCookie(id, "eth0").AttachmentDelete().String()) {
		left = append(left, "flow "+f)
	}
	if ids := framework.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids"); strings.Contains(ids, id+"/eth0") {
		left = append(left, "in-flight records: "+ids)
	}
	return left
}

// The default budget waits out an ovs-vswitchd stopped for longer than the
// 10 s that each wait on it had before (an ADD then failed with code 11, as
// on the saturated nodes of the scale benchmark): the ADD, started while
// ovs-vswitchd is stopped, has not ended when ovs-vswitchd goes on 15 s
// later, then succeeds, with its port and flows. DEL leaves nothing.
func TestBusyVswitchdWaited(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	dataDir, network := t.TempDir(), uniq("busyvs")
	n := framework.NewCNI(t, conflist("1.0.0", network, framework.BridgeConf(br, ovsdbAddr, dataDir, nil)), nil)
	c := framework.NewContainer(t)
	t.Cleanup(func() { n.Del(c, "eth0", nil) })

	thaw := framework.FreezeVswitchd(t)
	type added struct {
		r   *current.Result
		err error
	}
	done := make(chan added, 1)
	start := time.Now()
	go func() { r, err := n.Add(c, "eth0", nil); done <- added{r, err} }()
	// Time is the subject: ovs-vswitchd stays stopped for longer than the
	// old bound of a wait on it.
	const stopped = 15 * time.Second
	select {
	case a := <-done:
		t.Fatalf("ADD ended after %v, while ovs-vswitchd was stopped: %v", time.Since(start).Round(time.Millisecond), a.err)
	case <-time.After(stopped):
	}
	thaw()
	var a added
	select {
	case a = <-done:
	case <-time.After(framework.Scaled(3 * time.Minute)): // the plugin's own bound is 2 min
		t.Fatal("ADD did not end once ovs-vswitchd went on")
	}
	t.Logf("ADD took %v, ovs-vswitchd stopped for the first %v", time.Since(start).Round(time.Millisecond), stopped)
	if a.err != nil {
		t.Fatalf("ADD with ovs-vswitchd stopped for %v: %v (code %d), want success", stopped, a.err, framework.CNICode(a.err))
	}
	if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 1 {
		t.Errorf("ports of %s: %v, want 1", c.ID, ports)
	}
	sec := flows.AttachmentCookie(c.ID, "eth0").WithKind(flows.CookieKindPortSecurity)
	if fl := framework.FlowsOf(t, framework.OFTarget(ovsdbAddr, br), sec); len(fl) == 0 {
		t.Errorf("no port security flow of %s after the ADD", c.ID)
	}
	if err := n.Del(c, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if left := attachmentLeft(t, br, c.ID); len(left) > 0 {
		t.Errorf("after DEL: %v", left)
	}
	assertNothingLeft(t, c.ID, dataDir, network)
}

// A budget shorter than ovs-vswitchd's stop, in ovs-bridge's ADD and in
// ovs-portmap's (ovs-vswitchd stopped once ovs-bridge's ADD is done): the
// chain's ADD fails with code 11 saying that ovs-vswitchd did not answer,
// before a runtime that waits a little longer than the plugins' budgets
// would kill it (libcni kills the plugin when the runtime's context ends:
// then the error is no code 11), the failed plugin having rolled back
// while ovs-vswitchd is still stopped: no port, claim, veth or address of
// ovs-bridge's; no host-port record or claim of ovs-portmap's. The
// runtime's DEL then succeeds, or is code 11 where the attachment's flows
// are in the stopped ovs-vswitchd (ovs-bridge's port is in); run again
// once it goes on, it leaves nothing.
func TestBusyVswitchdTimesOut(t *testing.T) {
	requireSandbox(t)
	const budget = 8 * time.Second
	h := framework.NewOVSHost(t)
	dataDir, network := t.TempDir(), uniq("busyto")
	x := &framework.HookExec{}
	timeout := map[string]any{"timeout": budget.String()}
	n := framework.NewCNI(t, conflist("1.0.0", network,
		framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true, "timeout": budget.String()}),
		framework.PortmapConf(ovsdbAddr, timeout)), x)
	for i, plugin := range []string{"ovs-bridge", "ovs-portmap"} {
		t.Run("stopped for "+plugin, func(t *testing.T) {
			c := framework.NewContainer(t)
			caps := mappings(pm(24080+i, 80, "tcp", ""))
			t.Cleanup(func() { n.Del(c, "eth0", caps) })
			reached, goOn := make(chan struct{}), make(chan struct{})
			var once sync.Once
			x.Before = func(p, command string) {
				if p == plugin && command == "ADD" {
					once.Do(func() { close(reached); <-goOn })
				}
			}
			defer func() { x.Before = nil }()
			ctx, cancel := context.WithTimeout(context.Background(), 2*budget+framework.Scaled(5*time.Second))
			defer cancel()
			errc := make(chan error, 1)
			go func() { _, err := n.AddContext(ctx, c, "eth0", caps); errc <- err }()
			select {
			case <-reached:
			case err := <-errc:
				t.Fatalf("ADD ended before %s's: %v", plugin, err)
			case <-time.After(framework.Scaled(time.Minute)):
				t.Fatalf("%s's ADD did not start", plugin)
			}
			thaw := framework.FreezeVswitchd(t)
			close(goOn)
			err := <-errc
			if framework.CNICode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), plugin) || !strings.Contains(err.Error(), "ovs-vswitchd") {
				t.Fatalf("ADD with ovs-vswitchd stopped for %s: %v (code %d), want %s's code 11 about ovs-vswitchd", plugin, err, framework.CNICode(err), plugin)
			}
			t.Logf("ADD: %v", err)
			if ids := framework.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids"); strings.Contains(ids, c.ID+"/eth0") {
				t.Errorf("in-flight records of %s left by the failed ADD: %s", c.ID, ids)
			}
			if plugin == "ovs-bridge" {
				if ports := framework.PortsOf(t, ovsdb.KeyContainerID, c.ID); len(ports) != 0 {
					t.Errorf("ports %v left by the failed ADD", ports)
				}
				assertNothingLeft(t, c.ID, dataDir, network)
			} else {
				ids := framework.Vsctl(t, "get", "Port", c.HostVeth("eth0"), "external_ids")
				if strings.Contains(ids, "ovsflow.io/portmap") || strings.Contains(ids, "ovsflow.io/claim/") {
					t.Errorf("host-port record or claims left by ovs-portmap's failed ADD: %s", ids)
				}
			}
			delErr := n.Del(c, "eth0", caps)
			t.Logf("the runtime's DEL, ovs-vswitchd still stopped: %v", delErr)
			if plugin == "ovs-bridge" && delErr != nil || delErr != nil && framework.CNICode(delErr) != types.ErrTryAgainLater {
				t.Errorf("the runtime's DEL, ovs-vswitchd still stopped: %v (code %d), want success (nothing of ovs-vswitchd's to remove) or code 11", delErr, framework.CNICode(delErr))
			}
			thaw()
			if delErr != nil {
				if err := n.Del(c, "eth0", caps); err != nil {
					t.Fatalf("DEL run again, ovs-vswitchd going on: %v", err)
				}
			}
			if left := attachmentLeft(t, h.Bridge, c.ID); len(left) > 0 {
				t.Errorf("once ovs-vswitchd went on: %v", left)
			}
			assertNothingLeft(t, c.ID, dataDir, network)
		})
	}
}

// A DEL that the runtime runs again finds its work done: after a DEL that
// succeeded, and after one killed midway (libcni's SIGKILL as the
// runtime's context ends) in ovs-portmap's or in ovs-bridge's part, with
// its deleting mark taken and ovs-vswitchd stopped. The DEL run again
// succeeds and leaves nothing of the attachment: no port of its container,
// no flow of its cookie, no in-flight record, no veth, no address.
func TestBusyDelRetried(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	dataDir, network := t.TempDir(), uniq("busydel")
	x := &framework.HookExec{}
	n := framework.NewCNI(t, conflist("1.0.0", network,
		framework.BridgeConf(h.Bridge, ovsdbAddr, dataDir, map[string]any{"isGateway": true}),
		framework.PortmapConf(ovsdbAddr, nil)), x)
	marked := func(id string) error {
		if ids := framework.Vsctl(t, "get", "Open_vSwitch", ".", "external_ids"); !strings.Contains(ids, "ovsflow.io/deleting."+id+"/eth0") {
			return errors.New("no deleting mark of " + id + "/eth0")
		}
		return nil
	}
	for i, tc := range []struct {
		name   string
		killIn string // "": the first DEL succeeds
	}{
		{"after a DEL that succeeded", ""},
		{"after a DEL killed in ovs-portmap", "ovs-portmap"},
		{"after a DEL killed in ovs-bridge", "ovs-bridge"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := framework.NewContainer(t)
			caps := mappings(pm(23080+i, 80, "tcp", ""))
			n.MustAdd(t, c, "eth0", caps)
			t.Cleanup(func() { n.Del(c, "eth0", caps) })
			if fl := framework.FlowsMatching(t, h.OFTarget(), flows.AttachmentCookie(c.ID, "eth0").AttachmentDelete().String()); len(fl) == 0 {
				t.Fatalf("no flow of %s after ADD", c.ID)
			}
			if tc.killIn == "" {
				if err := n.Del(c, "eth0", caps); err != nil {
					t.Fatalf("DEL: %v", err)
				}
			} else {
				reached, goOn := make(chan struct{}), make(chan struct{})
				var once sync.Once
				x.Before = func(plugin, command string) {
					if plugin == tc.killIn && command == "DEL" {
						once.Do(func() { close(reached); <-goOn })
					}
				}
				defer func() { x.Before = nil }() // before the cleanup's DEL
				ctx, kill := context.WithCancel(context.Background())
				defer kill()
				errc := make(chan error, 1)
				go func() { errc <- n.DelContext(ctx, c, "eth0", caps) }()
				select {
				case <-reached:
				case err := <-errc:
					t.Fatalf("DEL ended before %s's: %v", tc.killIn, err)
				case <-time.After(framework.Scaled(time.Minute)):
					t.Fatalf("%s's DEL did not start", tc.killIn)
				}
				thaw := framework.FreezeVswitchd(t)
				close(goOn)
				// Killed once it has taken its mark and waits for ovs-vswitchd.
				framework.Eventually(t, 30*time.Second, tc.killIn+"'s DEL marked", func() error { return marked(c.ID) })
				kill()
				err := <-errc
				thaw()
				if err == nil {
					t.Fatalf("DEL killed in %s's part: succeeded", tc.killIn)
				}
				t.Logf("DEL killed in %s's part: %v", tc.killIn, err)
			}
			if err := n.Del(c, "eth0", caps); err != nil {
				t.Fatalf("DEL run again: %v", err)
			}
			if left := attachmentLeft(t, h.Bridge, c.ID); len(left) > 0 {
				t.Errorf("after the DEL run again: %v", left)
			}
			assertNothingLeft(t, c.ID, dataDir, network)
		})
	}
}
