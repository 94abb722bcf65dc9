package e2e

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

var meterLine = regexp.MustCompile(`(?m)^meter=(\d+) `)

// meterIDs lists the OpenFlow meters of the host's bridge, sorted.
func meterIDs(h *framework.OVSHost, t *testing.T) []string {
	t.Helper()
	out, err := run("ovs-ofctl", "-O", "OpenFlow14", "dump-meters", h.OFTarget())
	if err != nil {
		t.Fatalf("dump-meters: %v: %s", err, out)
	}
	var ids []string
	for _, m := range meterLine.FindAllStringSubmatch(out, -1) {
		ids = append(ids, m[1])
	}
	slices.Sort(ids)
	return ids
}

// ourRows lists the rows of table (QoS, Queue) tagged with the suite's
// owner.
func ourRows(t *testing.T, table string) []string {
	t.Helper()
	out := framework.Vsctl(t, "--no-headings", "-f", "csv", "--columns=_uuid", "find", table, "external_ids:"+ovsdb.KeyOwner+"="+ovsdb.OwnerValue)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// TestAgentUninstallShaped: after a pod with both bandwidth limits and a
// host port with newConnectionRate, `ovsflow-agent uninstall` leaves no
// QoS or Queue row of the suite (root tables: nothing collects them with
// the port) and no meter of the suite (its egress meter, its
// new-connection meter), and leaves a foreign QoS row, Queue row and
// meter on the same bridge alone.
func TestAgentUninstallShaped(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	framework.PrepareBridge(t, h.Bridge) // as node-prep.sh leaves a bridge
	n := framework.NewCNI(t, conflist("1.1.0", "uninstbw", framework.BridgeConf(h.Bridge, ovsdbAddr, t.TempDir(), map[string]any{"isGateway": true}),
		map[string]any{"type": "ovs-portmap", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"portMappings": true},
			"newConnectionRate": 20, "newConnectionBurst": 10},
		map[string]any{"type": "ovs-bandwidth", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"bandwidth": true}}), nil)

	c := framework.NewContainer(t)
	args := mappings(pm(31082, 80, "tcp", ""))
	maps.Copy(args, framework.Limits(bwRate, bwBurst, bwRate, bwBurst))
	n.MustAdd(t, c, "eth0", args)
	t.Cleanup(func() { n.Del(c, "eth0", args) })

	// Someone else's QoS, Queue and meter.
	foreignQoS := framework.Vsctl(t, "create", "QoS", "type=linux-htb", "external_ids:owner=someone-else")
	foreignQueue := framework.Vsctl(t, "create", "Queue", "other_config:max-rate=1000", "external_ids:owner=someone-else")
	t.Cleanup(func() {
		run("ovs-vsctl", "--db="+ovsdbAddr, "--timeout=10", "destroy", "QoS", foreignQoS)
		run("ovs-vsctl", "--db="+ovsdbAddr, "--timeout=10", "destroy", "Queue", foreignQueue)
	})
	const foreignMeter = "4242"
	if out, err := run("ovs-ofctl", "-O", "OpenFlow14", "add-meter", h.OFTarget(), "meter="+foreignMeter+",kbps,burst,band=type=drop,rate=1000,burst_size=100"); err != nil {
		t.Fatalf("add-meter: %v: %s", err, out)
	}

	ofport := uint32(ofportOf(t, c))
	wantBefore := []string{foreignMeter, fmt.Sprint(flows.MeterOf(ofport)), fmt.Sprint(flows.ConnMeterOf(ofport, 0))}
	slices.Sort(wantBefore)
	if got := meterIDs(h, t); !slices.Equal(got, wantBefore) || len(ourRows(t, "QoS")) == 0 || len(ourRows(t, "Queue")) == 0 {
		t.Fatalf("before: meters %v (want %v), QoS rows %v, Queue rows %v of the suite: the test proves nothing",
			got, wantBefore, ourRows(t, "QoS"), ourRows(t, "Queue"))
	}

	src, bin, conf := t.TempDir(), t.TempDir(), t.TempDir()
	out, err := run(filepath.Join(binDir, "ovsflow-agent"), "uninstall", "-ovsdb", ovsdbAddr, "-plugin-src", src,
		"-cni-bin-dir", bin, "-cni-conf-dir", conf, "-conf-template", "/etc/ovsflow/10-ovsflow.conflist")
	t.Logf("uninstall said:\n%s", out)
	if err != nil {
		t.Fatalf("uninstall: %v", err)
	}

	for _, table := range []string{"QoS", "Queue"} {
		if left := ourRows(t, table); len(left) > 0 {
			t.Errorf("%s rows of the suite left: %v", table, left)
		}
	}
	if got := meterIDs(h, t); !slices.Equal(got, []string{foreignMeter}) {
		t.Errorf("meters after uninstall: got %v, want the foreign one only [%s]", got, foreignMeter)
	}
	for table, uuid := range map[string]string{"QoS": foreignQoS, "Queue": foreignQueue} {
		if _, err := run("ovs-vsctl", "--db="+ovsdbAddr, "--timeout=10", "get", table, uuid, "external_ids"); err != nil {
			t.Errorf("the foreign %s row %s went: %v", table, uuid, err)
		}
	}
	if err := n.Del(c, "eth0", args); err != nil {
		t.Errorf("DEL after uninstall: %v", err)
	}
}

// TestBandwidthMetersFollowAttachment: an egress meter goes with its
// attachment whoever removes it: a GC as a runtime runs it (each plugin's
// GC in conflist order, ovs-bridge's first, which removes the port and its
// flows before ovs-bandwidth's runs), a second ADD of the same container
// and ifname (ovs-bridge replaces the previous attachment; the new port
// gets another ofport, hence another meter, when the first one could not
// have its home ofport), and DEL.
func TestBandwidthMetersFollowAttachment(t *testing.T) {
	requireSandbox(t)
	bw := framework.Limits(bwRate, bwBurst, bwRate, bwBurst)
	network := func(t *testing.T) (*framework.OVSHost, *framework.CNI, []map[string]any) {
		h := framework.NewOVSHost(t)
		entries := []map[string]any{framework.BridgeConf(h.Bridge, ovsdbAddr, t.TempDir(), map[string]any{"isGateway": true}),
			{"type": "ovs-bandwidth", "ovsdb": ovsdbAddr, "capabilities": map[string]bool{"bandwidth": true}}}
		return h, framework.NewCNI(t, conflist("1.1.0", "bwmeters", entries...), nil), entries
	}
	meterOf := func(t *testing.T, c *framework.Container) []string {
		return []string{fmt.Sprint(flows.MeterOf(uint32(ofportOf(t, c))))}
	}

	t.Run("GC", func(t *testing.T) {
		h, n, entries := network(t)
		c := framework.NewContainer(t)
		n.MustAdd(t, c, "eth0", bw)
		t.Cleanup(func() { n.Del(c, "eth0", bw) })
		if got, want := meterIDs(h, t), meterOf(t, c); !slices.Equal(got, want) {
			t.Fatalf("meters after ADD: got %v, want %v", got, want)
		}
		for _, entry := range entries {
			gc := maps.Clone(entry)
			gc["cniVersion"], gc["name"], gc["cni.dev/valid-attachments"] = "1.1.0", "bwmeters", []any{}
			if _, err := execPlugin(t, entry["type"].(string), "GC", c, "eth0", gc); err != nil {
				t.Fatal(err)
			}
		}
		if got := meterIDs(h, t); len(got) != 0 {
			t.Errorf("meters after GC: got %v, want none", got)
		}
		for _, table := range []string{"QoS", "Queue"} {
			if left := ourRows(t, table); len(left) > 0 {
				t.Errorf("%s rows of the suite after GC: %v", table, left)
			}
		}
	})

	// A meter left without its port and its flow (as an ovs-bridge before
	// withdrawing limits left them, or a port removed behind the plugins'
	// back with its flows): ovs-bandwidth's GC finds it by its ID; the
	// meter of a live port and a foreign meter stay.
	t.Run("sweep", func(t *testing.T) {
		h, n, entries := network(t)
		live, gone := framework.NewContainer(t), framework.NewContainer(t)
		for _, c := range []*framework.Container{live, gone} {
			n.MustAdd(t, c, "eth0", bw)
			t.Cleanup(func() { n.Del(c, "eth0", bw) })
		}
		const foreign = "4242"
		if out, err := run("ovs-ofctl", "-O", "OpenFlow14", "add-meter", h.OFTarget(), "meter="+foreign+",kbps,burst,band=type=drop,rate=1000,burst_size=100"); err != nil {
			t.Fatalf("add-meter: %v: %s", err, out)
		}
		want := append(meterOf(t, live), foreign)
		slices.Sort(want)
		cookie := flows.AttachmentCookie(gone.ID, "eth0").WithKind(flows.CookieKindBandwidth)
		if out, err := run("ovs-ofctl", "-O", "OpenFlow14", "del-flows", h.OFTarget(), fmt.Sprintf("cookie=%s/-1", cookie)); err != nil {
			t.Fatalf("del-flows: %v: %s", err, out)
		}
		framework.Vsctl(t, "del-port", h.Bridge, gone.HostVeth("eth0"))
		if got := meterIDs(h, t); len(got) != 3 {
			t.Fatalf("meters before GC: got %v, want the live port's, the gone one's and the foreign one (else the test proves nothing)", got)
		}
		gc := maps.Clone(entries[1])
		gc["cniVersion"], gc["name"] = "1.1.0", "bwmeters"
		gc["cni.dev/valid-attachments"] = []any{map[string]any{"containerID": live.ID, "ifname": "eth0"}}
		if _, err := execPlugin(t, "ovs-bandwidth", "GC", live, "eth0", gc); err != nil {
			t.Fatal(err)
		}
		if got := meterIDs(h, t); !slices.Equal(got, want) {
			t.Errorf("meters after GC: got %v, want %v", got, want)
		}
		if err := n.Check(live, "eth0", bw); err != nil {
			t.Errorf("CHECK of the live attachment after GC: %v", err)
		}
	})

	for _, second := range []map[string]any{bw, nil} {
		t.Run(fmt.Sprintf("replacement with limits %v, then DEL", second != nil), func(t *testing.T) {
			h, n, _ := network(t)
			c := framework.NewContainer(t)
			// The first port cannot have its home ofport: another
			// interface asks for it.
			home := ovsdb.HomeOFPort(ovsdb.Attachment{ContainerID: c.ID, IfName: "eth0"})
			blocker := uniq("blk")
			framework.Vsctl(t, "add-port", h.Bridge, blocker, "--", "set", "Interface", blocker, "type=internal", fmt.Sprintf("ofport_request=%d", home))
			n.MustAdd(t, c, "eth0", bw)
			t.Cleanup(func() { n.Del(c, "eth0", second) })
			first := meterOf(t, c)
			if got := meterIDs(h, t); !slices.Equal(got, first) || first[0] == fmt.Sprint(flows.MeterOf(uint32(home))) {
				t.Fatalf("meters after the first ADD: got %v, want %v, not the home ofport %d's", got, first, home)
			}
			framework.Vsctl(t, "del-port", h.Bridge, blocker)
			n.MustAdd(t, c, "eth0", second)
			var want []string
			if second != nil {
				want = meterOf(t, c)
			}
			if got := meterIDs(h, t); !slices.Equal(got, want) {
				t.Errorf("meters after the second ADD: got %v (after the first %v), want the new port's only %v", got, first, want)
			}
			if err := n.Check(c, "eth0", second); err != nil {
				t.Errorf("CHECK after the second ADD: %v", err)
			}
			if err := n.Del(c, "eth0", second); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if got := meterIDs(h, t); len(got) != 0 {
				t.Errorf("meters after DEL: got %v, want none", got)
			}
		})
	}
}
