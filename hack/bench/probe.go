package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/ovsflow/ovs-cni/pkg/bridge"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/portmap"
	"github.com/ovsflow/ovs-cni/pkg/portsec"
)

// The breakdown runs, in this process, ovs-bridge's and ovs-portmap's own
// CmdAdd, then their CmdDel in the order libcni runs a DEL (ovs-portmap
// first), on the same bridge, with the same number of containers attached:
// ovs-bridge's named steps are timed as they run (bridge.StepTimer),
// ovs-portmap's command is one row. What a plugin process adds on top,
// process start-up, is timed separately (a VERSION call). The breakdown
// uses its own network name, container and host port, so it never touches
// the measured attachments.

// Phases, in the order they run. "ours" is false for the phases whose time
// is another program's: ovs-vswitchd reconfiguring, host-local, the kernel.
type phase struct {
	name string
	ours bool
}

// bridgeSteps describes ovs-bridge's steps (pkg/bridge: CmdAdd's in
// add.go, CmdDel's), keyed by command and step name, and says which are
// ours. A step not listed (a new one) shows under its name, counted as ours.
var bridgeSteps = map[string]phase{
	"ADD bridge":            {"OVSDB select: bridge row", true},
	"ADD previous":          {"OVSDB select: own ports (an earlier ADD's)", true},
	"ADD netns":             {"open the container netns", false},
	"ADD replace previous":  {"replace an earlier ADD's port (none here)", true},
	"ADD ipam start":        {"IPAM started in the background (host-local exec)", true},
	"ADD sync":              {"OVSDB next_cfg check (waits while ovs-vswitchd applies a change)", false},
	"ADD mac":               {"random MAC", true},
	"ADD claim":             {"OVSDB transaction: ofport and cookie claim", true},
	"ADD veth":              {"netlink: veth with peer in container netns, isolate", false},
	"ADD container":         {"netlink: container sysctls, tx off, up", false},
	"ADD ipam wait":         {"IPAM: what is left of host-local ADD (exec)", false},
	"ADD allowed":           {"OVSDB select: allowedAddresses of other ports; netlink: the bridge's addresses", true},
	"ADD addresses, netdev": {"netlink: container addresses and routes", false},
	"ADD port flows":        {"OpenFlow bundle: port security flows (pkg/openflow)", true},
	"ADD port":              {"OVSDB transaction: insert Port + Interface with the address claims, ofport wait = ovs-vswitchd reconfiguration", false},
	"ADD announce":          {"netlink: gratuitous ARP / unsolicited NA", false},
	"ADD allowed again":     {"OVSDB select: allowedAddresses, after the insert", true},
	"ADD addresses":         {"netlink: container addresses and routes, once the port is in", false},
	"ADD gateway":           {"gateway on bridge (address, up; recorded)", false},
	"ADD host ports":        {"host ports (Mesos only)", true},
	"DEL mark":              {"OVSDB select + transaction: deleting mark", true},
	"DEL flows":             {"OpenFlow bundle: tombstone, attachment flows deleted (pkg/openflow)", true},
	"DEL claimed flows":     {"OpenFlow delete: flows of an ADD that died before its insert (none here)", true},
	"DEL host ports":        {"host ports (Mesos only; ovs-portmap's are gone)", true},
	"DEL limits":            {"limits of ovs-bandwidth, had its DEL not run (none here)", true},
	"DEL port security":     {"nothing: its flows went with the attachment's cookie, its record goes with the port", true},
	"DEL port":              {"OVSDB transaction: port deleted, mark removed (no wait)", true},
	"DEL veth":              {"netlink: veth delete (kernel)", false},
	"DEL ipam":              {"IPAM: host-local DEL (exec)", false},
}

// bridgeStep is the phase of ovs-bridge's step named step of command (ADD, DEL).
func bridgeStep(command, step string) phase {
	p, ok := bridgeSteps[command+" "+step]
	if !ok {
		p = phase{step, true}
	}
	return phase{"ovs-bridge  " + step + ": " + p.name, p.ours}
}

var (
	phBridgeRest    = phase{"ovs-bridge  around the steps: config, OVSDB connect, result", true}
	phPortmapAdd    = phase{"ovs-portmap CmdAdd: config, OVSDB connect, own port, node addresses, hostport.Publish", true}
	phSync          = bridgeStep("ADD", "sync")
	phOFPort        = bridgeStep("ADD", "port")
	phPortmapDel    = phase{"ovs-portmap CmdDel: config, OVSDB connect, deleting mark, hostport.Withdraw (flows, conntrack flush, node-local nft, record + claims)", true}
	phBridgeDelRest = phase{"ovs-bridge  around the steps: config, OVSDB connect", true}
	phVswitchdDel   = phase{"(after DEL) ovs-vswitchd applying the removal, paid by a next ADD's sync", false}
	ofCall          = map[phase]bool{bridgeStep("ADD", "port flows"): true, bridgeStep("DEL", "flows"): true}
	// addPhases and delPhases are the phases in the order they first ran.
	addPhases    = []phase{}
	delPhases    = []phase{}
	rawConnect   = "raw JSON-RPC: connect + 1 select (no schema)"
	coldConnect  = "pkg/ovsdb Dial, first in a fresh process (as in a plugin)"
	bundleAgain  = "OpenFlow port security bundle again right after (vswitchd no longer busy)"
	rawOpenFlow  = "raw OpenFlow 1.4: connect + hello + barrier (in-process floor)"
	ofBlocked    = "OpenFlow barrier sent as the ofport wait returns (vswitchd still busy)"
	rawBridgeAll = "raw JSON-RPC select of the bridge row, all columns (as now)"
	rawBridgeFew = "raw JSON-RPC select of the bridge row, _uuid + datapath_type only"

	rawSchema   = "raw JSON-RPC: get_schema alone"
	dialConnect = "pkg/ovsdb Dial + Close"
)

type replayer struct {
	ovsdbEP  string
	target   string // OpenFlow target of the bridge
	binDir   string
	ipamDir  string
	netns    *netnsDir
	made     int
	nodeIPv4 []netip.Addr
}

// replayResult is the time of each phase over the repetitions.
type replayResult struct {
	level int
	add   map[phase][]time.Duration
	del   map[phase][]time.Duration
	extra map[string][]time.Duration
}

// addTime adds the time of one ADD phase, listing the phase in addPhases
// when it first runs.
func (res *replayResult) addTime(p phase, d time.Duration) { timeIn(res.add, &addPhases, p, d) }

// delTime is addTime for a DEL phase.
func (res *replayResult) delTime(p phase, d time.Duration) { timeIn(res.del, &delPhases, p, d) }

func timeIn(to map[phase][]time.Duration, order *[]phase, p phase, d time.Duration) {
	if _, seen := to[p]; !seen && !slices.Contains(*order, p) {
		*order = append(*order, p)
	}
	to[p] = append(to[p], d)
}

// ipamSection is the replay's host-local config, in ovs-bridge's network
// config.
func (r *replayer) ipamSection() map[string]any {
	return map[string]any{"type": "host-local", "dataDir": r.ipamDir,
		"ranges": []any{[]any{map[string]any{"subnet": ovsSubnet, "gateway": ovsGateway,
			"rangeStart": "198.18.250.1", "rangeEnd": "198.18.255.250"}}},
		"routes": []any{map[string]any{"dst": "0.0.0.0/0"}}}
}

// bridgeConf is ovs-bridge's network config for the replay: the measured
// chain's (ovsConflist), under the replay's network name and IPAM range.
func (r *replayer) bridgeConf() []byte {
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "bench-replay", "type": "ovs-bridge",
		"bridge": ovsBridge, "ovsdb": r.ovsdbEP, "isGateway": true, "ipam": r.ipamSection()})
	return b
}

// portmapConf is ovs-portmap's network config for the replay, with
// ovs-bridge's result as its prevResult and the replay's host ports.
func (r *replayer) portmapConf(prev []byte) []byte {
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "bench-replay", "type": "ovs-portmap",
		"ovsdb": r.ovsdbEP, "prevResult": json.RawMessage(prev),
		"runtimeConfig": map[string]any{"portMappings": []any{
			map[string]any{"hostPort": replayPort, "containerPort": ctrPort, "protocol": "tcp"},
			map[string]any{"hostPort": replayPort, "containerPort": ctrPort, "protocol": "udp"}}}})
	return b
}

// inProcess runs a plugin command (ADD or DEL) in this process as skel
// would: the CNI_* variables set (IPAM delegation reads them), stdout (the
// result) taken.
func inProcess(command string, cmd func(*skel.CmdArgs) error, args *skel.CmdArgs) ([]byte, error) {
	for k, v := range map[string]string{"CNI_COMMAND": command, "CNI_CONTAINERID": args.ContainerID, "CNI_NETNS": args.Netns,
		"CNI_IFNAME": args.IfName, "CNI_PATH": args.Path} {
		os.Setenv(k, v)
		defer os.Unsetenv(k)
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	stdout := os.Stdout
	os.Stdout = wr
	outc := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(rd)
		outc <- b
	}()
	err = cmd(args)
	os.Stdout = stdout
	wr.Close()
	out := <-outc
	rd.Close()
	return out, err
}

// run replays `reps` ADD+DEL pairs.
func (r *replayer) run(ctx context.Context, level, reps int, ep string) (*replayResult, error) {
	res := &replayResult{level: level, add: map[phase][]time.Duration{}, del: map[phase][]time.Duration{}, extra: map[string][]time.Duration{}}
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	for i := 0; i < reps; i++ {
		if err := r.once(ctx, res); err != nil {
			return res, err
		}
		// The floors are for a quiet ovs-vswitchd: the replayed DEL waited
		// for the port removal, but its veth deletion (a link change) makes
		// ovs-vswitchd reconfigure the whole bridge again after that, about
		// 0.1 s at N=500 (hack/vswitchd-events.sh).
		time.Sleep(time.Second)
		if err := r.ovsdbFloors(ctx, res); err != nil {
			return res, err
		}
		out, err := exec.Command(self, "-cold-dial", ep).Output()
		if err != nil {
			return res, fmt.Errorf("cold dial: %w", err)
		}
		var first int64
		fmt.Sscan(string(out), &first)
		res.extra[coldConnect] = append(res.extra[coldConnect], time.Duration(first)*time.Microsecond)
	}
	return res, nil
}

// timer appends the time since the last mark to a phase.
type timer struct {
	last time.Time
	to   map[phase][]time.Duration
}

func (t *timer) mark(p phase) {
	now := time.Now()
	t.to[p] = append(t.to[p], now.Sub(t.last))
	t.last = now
}

func (r *replayer) once(ctx context.Context, res *replayResult) (err error) {
	r.made++
	id := fmt.Sprintf("replay-%d-%d", res.level, r.made)
	cns, err := r.netns.create(id)
	if err != nil {
		return err
	}
	defer cns.Close()
	att := ovsdb.Attachment{ContainerID: id, IfName: "eth0"}

	// ---- ADD, ovs-bridge and ovs-portmap: their real CmdAdd, in-process ----
	// ovs-bridge's steps are timed by bridge.StepTimer as they run; what
	// lies around them (config, OVSDB connect, result) is the rest of the
	// call. How long ovs-vswitchd keeps the OpenFlow channel waiting after
	// it has published the ofport is measured alongside, from the end of
	// the "port" step (the next steps go on).
	blocked := make(chan time.Duration, 1)
	var stepped time.Duration
	bridge.StepTimer = func(step string, took time.Duration) {
		res.addTime(bridgeStep("ADD", step), took)
		stepped += took
		if step == "port" {
			go func() {
				start := time.Now()
				if ofBarrier(strings.TrimPrefix(r.target, "unix:")) != nil {
					blocked <- 0
					return
				}
				blocked <- time.Since(start)
			}()
		}
	}
	defer func() { bridge.StepTimer = nil }()
	start := time.Now()
	out, err := inProcess("ADD", bridge.CmdAdd, &skel.CmdArgs{ContainerID: id, Netns: cns.Path(), IfName: "eth0", Path: r.binDir,
		StdinData: r.bridgeConf()})
	if err != nil {
		return fmt.Errorf("ovs-bridge ADD: %w", err)
	}
	res.addTime(phBridgeRest, time.Since(start)-stepped)
	select {
	case d := <-blocked:
		if d > 0 {
			res.extra[ofBlocked] = append(res.extra[ofBlocked], d)
		}
	case <-time.After(5 * time.Second):
	}
	start = time.Now()
	if _, err := inProcess("ADD", portmap.CmdAdd, &skel.CmdArgs{ContainerID: id, Netns: cns.Path(), IfName: "eth0", Path: r.binDir,
		StdinData: r.portmapConf(out)}); err != nil {
		return fmt.Errorf("ovs-portmap ADD: %w", err)
	}
	res.addTime(phPortmapAdd, time.Since(start))
	cli, err := ovsdb.Dial(ctx, endpoint.MustParse(r.ovsdbEP))
	if err != nil {
		return err
	}
	ports, err := cli.FindPorts(ctx, att)
	if err != nil || len(ports) != 1 {
		cli.Close()
		return fmt.Errorf("replay port: %d, %v", len(ports), err)
	}
	cli.Close()
	// The port security bundle again: what an OpenFlow call costs once
	// ovs-vswitchd is idle (the split of "port flows" in the report).
	if r, ok := (portsec.Feature{}).Rebuild(ports[0]); ok {
		b := openflow.Bundle{r.Cookie.Delete()}
		for _, f := range r.Flows {
			b = append(b, f)
		}
		start = time.Now()
		if err := openflow.Apply(ctx, r.Target, b); err != nil {
			return err
		}
		res.extra[bundleAgain] = append(res.extra[bundleAgain], time.Since(start))
	}

	// ---- DEL, ovs-portmap then ovs-bridge (libcni runs a DEL in reverse) ----
	start = time.Now()
	if _, err := inProcess("DEL", portmap.CmdDel, &skel.CmdArgs{ContainerID: id, Netns: cns.Path(), IfName: "eth0", Path: r.binDir,
		StdinData: r.portmapConf(out)}); err != nil {
		return fmt.Errorf("ovs-portmap DEL: %w", err)
	}
	res.delTime(phPortmapDel, time.Since(start))
	stepped = 0
	bridge.StepTimer = func(step string, took time.Duration) {
		res.delTime(bridgeStep("DEL", step), took)
		stepped += took
	}
	start = time.Now()
	if _, err := inProcess("DEL", bridge.CmdDel, &skel.CmdArgs{ContainerID: id, Netns: cns.Path(), IfName: "eth0", Path: r.binDir,
		StdinData: r.bridgeConf()}); err != nil {
		return fmt.Errorf("ovs-bridge DEL: %w", err)
	}
	res.delTime(phBridgeDelRest, time.Since(start)-stepped)
	t := &timer{last: time.Now(), to: res.del}
	cli, err = ovsdb.Dial(ctx, endpoint.MustParse(r.ovsdbEP))
	if err != nil {
		return err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cli.SyncPending(sctx); err != nil {
		return err
	}
	t.mark(phVswitchdDel)
	return nil
}

// ovsdbFloors times what connecting costs through pkg/ovsdb and over raw
// JSON-RPC, and what get_schema would cost.
func (r *replayer) ovsdbFloors(ctx context.Context, res *replayResult) error {
	start := time.Now()
	cli, err := ovsdb.Dial(ctx, endpoint.MustParse(r.ovsdbEP))
	if err != nil {
		return err
	}
	cli.Close()
	res.extra[dialConnect] = append(res.extra[dialConnect], time.Since(start))

	path := strings.TrimPrefix(r.ovsdbEP, "unix:")
	start = time.Now()
	if err := rawRPC(path, "transact", []any{"Open_vSwitch", map[string]any{"op": "select", "table": "Bridge",
		"where": []any{[]any{"name", "==", ovsBridge}}, "columns": []string{"_uuid"}}}); err != nil {
		return err
	}
	res.extra[rawConnect] = append(res.extra[rawConnect], time.Since(start))

	conn, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer conn.Close()
	start = time.Now()
	if err := rpcOn(conn, "get_schema", []any{"Open_vSwitch"}); err != nil {
		return err
	}
	res.extra[rawSchema] = append(res.extra[rawSchema], time.Since(start))
	for _, q := range []struct {
		key  string
		cols []string
	}{{rawBridgeAll, nil}, {rawBridgeFew, []string{"_uuid", "datapath_type"}}} {
		op := map[string]any{"op": "select", "table": "Bridge", "where": []any{[]any{"name", "==", ovsBridge}}}
		if q.cols != nil {
			op["columns"] = q.cols
		}
		start = time.Now()
		if err := rpcOn(conn, "transact", []any{"Open_vSwitch", op}); err != nil {
			return err
		}
		res.extra[q.key] = append(res.extra[q.key], time.Since(start))
	}

	start = time.Now()
	if err := ofBarrier(strings.TrimPrefix(r.target, "unix:")); err != nil {
		return err
	}
	res.extra[rawOpenFlow] = append(res.extra[rawOpenFlow], time.Since(start))
	return nil
}

// ofBarrier opens an OpenFlow 1.4 session on the bridge's management socket
// and does one barrier round trip: what an in-process OpenFlow client pays
// before and after its flow_mods, instead of an ovs-ofctl process.
func ofBarrier(path string) error {
	conn, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	const ofp14 = 5
	msg := func(typ uint8, xid uint32) []byte {
		return []byte{ofp14, typ, 0, 8, byte(xid >> 24), byte(xid >> 16), byte(xid >> 8), byte(xid)}
	}
	if _, err := conn.Write(append(msg(0, 1), msg(20, 2)...)); err != nil { // HELLO, BARRIER_REQUEST
		return err
	}
	hdr := make([]byte, 8)
	for {
		if _, err := io.ReadFull(conn, hdr); err != nil {
			return err
		}
		body := make([]byte, int(hdr[2])<<8|int(hdr[3])-8)
		if _, err := io.ReadFull(conn, body); err != nil {
			return err
		}
		switch hdr[1] {
		case 21: // BARRIER_REPLY
			return nil
		case 1: // ERROR
			return fmt.Errorf("openflow error from %s", path)
		}
	}
}

// rawRPC connects, sends one JSON-RPC request and reads its reply: the
// floor for an OVSDB client that knows its tables and skips the schema.
func rawRPC(path, method string, params []any) error {
	conn, err := net.Dial("unix", path)
	if err != nil {
		return err
	}
	defer conn.Close()
	return rpcOn(conn, method, params)
}

func rpcOn(conn net.Conn, method string, params []any) error {
	if err := json.NewEncoder(conn).Encode(map[string]any{"method": method, "params": params, "id": 1}); err != nil {
		return err
	}
	var reply struct {
		Error any `json:"error"`
	}
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&reply); err != nil {
		return err
	}
	if reply.Error != nil {
		return fmt.Errorf("%s: %v", method, reply.Error)
	}
	return nil
}

// execFloor times a plugin's start-up alone: CNI_COMMAND=VERSION, which
// parses nothing and touches no network.
func execFloor(path string) (time.Duration, error) {
	c := exec.Command(path)
	c.Env = append(os.Environ(), "CNI_COMMAND=VERSION")
	c.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
	start := time.Now()
	out, err := c.Output()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%s VERSION: %w: %s", path, err, out)
	}
	return d, nil
}
