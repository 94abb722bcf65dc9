package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
)

// The bandwidth scenario (-bandwidth): ADD and DEL of a chain with a
// bandwidth plugin, both directions limited, ours against the reference,
// interleaved at each N like the main scenario, and nothing else.
//
//	W: ovs-bridge + host-local + ovs-bandwidth (a linux-htb QoS row and an
//	   OpenFlow meter), on chain A's bridge and node
//	V: bridge + host-local + bandwidth (a tbf qdisc on the host veth, an ifb
//	   device with another for egress), in a node netns of its own
var bandwidthF = flag.Bool("bandwidth", false, "run only the bandwidth scenario: chain W (ovs-bridge + host-local + ovs-bandwidth) against V (bridge + host-local + the reference bandwidth)")

// bwLimits are the limits of every container: 100 Mbit/s each way, 1 Mbit
// of burst (the values only matter to the traffic, which there is none of).
var bwLimits = map[string]any{"bandwidth": map[string]any{
	"ingressRate": 100_000_000, "ingressBurst": 1_000_000, "egressRate": 100_000_000, "egressBurst": 1_000_000}}

func bandwidthConflists(ovsdb, ipamW, ipamV string) (w, v map[string]any) {
	w = ovsConflist("bench-bw-ovs", nodeA, ovsdb, ipamW)
	w["plugins"] = []any{w["plugins"].([]any)[0],
		map[string]any{"type": "ovs-bandwidth", "ovsdb": ovsdb, "capabilities": map[string]bool{"bandwidth": true}}}
	v = refConflist("bench-bw-ref", "iptables", ipamV)
	v["plugins"] = []any{v["plugins"].([]any)[0],
		map[string]any{"type": "bandwidth", "capabilities": map[string]bool{"bandwidth": true}}}
	return w, v
}

// runBandwidth measures chains W and V and prints their table and a BENCH
// line.
func runBandwidth(ctx context.Context, w io.Writer, nodeNS ns.NetNS, target, work string, levels []int, reps func(int) int, ex *timedExec, nd *netnsDir) error {
	confW, confV := bandwidthConflists(*ovsdbEP, mustMkdir(filepath.Join(work, "ipam-W")), mustMkdir(filepath.Join(work, "ipam-V")))
	cw, err := newChain("W", "ovs-bridge + host-local + ovs-bandwidth", nodeNS, confW, []string{*binDir}, mustMkdir(filepath.Join(work, "cache-W")), ex, nd)
	if err != nil {
		return err
	}
	nodeV, err := nd.create("node-V")
	if err != nil {
		return err
	}
	if err := setUpLo(nodeV); err != nil {
		return err
	}
	cv, err := newChain("V", "bridge + host-local + bandwidth (reference)", nodeV, confV, []string{*binDir}, mustMkdir(filepath.Join(work, "cache-V")), ex, nd)
	if err != nil {
		return err
	}
	chains := []*chain{cw, cv}
	for _, ch := range chains {
		ch.capArgs = bwLimits
		c, _, err := ch.measureAdd(ctx, -1) // warm-up
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if _, err := ch.del(ctx, c, probePort); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	t := &table{head: []string{"N", "chain", "ADD p50 ms", "ADD p90 ms", "DEL p50 ms", "DEL p90 ms", "reps", "limits in force at N"}}
	var bench []string
	for _, n := range levels {
		for _, ch := range chains {
			if _, err := ch.parallel(ctx, n, *callers); err != nil {
				return fmt.Errorf("filling to %d: %w", n, err)
			}
		}
		// What each chain holds, so that a chain that limits nothing is
		// not measured unawares: QoS rows and meters, ifb devices.
		state := map[string]string{}
		out, err := exec.Command("ovs-vsctl", "--db="+*ovsdbEP, "--no-headings", "--columns=_uuid", "find", "QoS",
			"external_ids:ovsflow.io/owner=ovsflow-cni").Output()
		if err != nil {
			return fmt.Errorf("QoS rows: %w", err)
		}
		meters, err := exec.Command("ovs-ofctl", "-O", "OpenFlow14", "dump-meters", target).Output()
		if err != nil {
			return fmt.Errorf("meters: %w", err)
		}
		state["W"] = fmt.Sprintf("%d QoS rows, %d meters", len(strings.Fields(string(out))), strings.Count(string(meters), "type=drop"))
		ifbs, err := cv.inNode("ip", "-o", "link", "show", "type", "ifb")
		if err != nil {
			return err
		}
		state["V"] = fmt.Sprintf("%d ifb devices", strings.Count(ifbs, "\n"))
		add, del := map[string][]time.Duration{}, map[string][]time.Duration{}
		for r := 0; r < reps(n); r++ {
			order := append(append([]*chain(nil), chains[r%2:]...), chains[:r%2]...)
			for _, ch := range order {
				c, d, err := ch.measureAdd(ctx, r)
				if err != nil {
					return err
				}
				add[ch.key] = append(add[ch.key], d)
				if d, err = ch.del(ctx, c, probePort); err != nil {
					return err
				}
				del[ch.key] = append(del[ch.key], d)
			}
		}
		for _, ch := range chains {
			k := ch.key
			t.add(fmt.Sprint(n), k+": "+ch.name, ms(pct(add[k], 50)), ms(pct(add[k], 90)), ms(pct(del[k], 50)), ms(pct(del[k], 90)), fmt.Sprint(len(add[k])), state[k])
			bench = append(bench, fmt.Sprintf("%s_N%d_add_p50=%s %s_N%d_del_p50=%s", k, n, ms(pct(add[k], 50)), k, n, ms(pct(del[k], 50))))
		}
		logf("bandwidth N=%d: %d repetitions measured", n, reps(n))
	}
	for _, ch := range chains {
		if _, err := ch.parallel(ctx, 0, *callers); err != nil {
			return fmt.Errorf("emptying: %w", err)
		}
	}
	fmt.Fprintln(w, "## ADD and DEL with a bandwidth plugin, both directions limited (ms, libcni in-process)")
	fmt.Fprintln(w)
	t.print(w)
	fmt.Fprintln(w, "BENCH bandwidth "+strings.Join(bench, " "))
	return nil
}

// rtOf is the runtime config of c in chain ch: its capability arguments,
// or the port mappings of the main scenario.
func (ch *chain) rtOf(c *container, hostPort int) *libcni.RuntimeConf {
	if ch.capArgs != nil {
		return &libcni.RuntimeConf{ContainerID: c.id, NetNS: c.ns.Path(), IfName: "eth0", CapabilityArgs: ch.capArgs}
	}
	return c.rt(hostPort + ch.portShift)
}
