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
	"path/filepath"
	"strings"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ipam"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// The breakdown replays, step by step and in this process, what ovs-bridge
// and ovs-portmap do for an ADD and a DEL (the same library calls, in the same
// order, on the same bridge, with the same number of containers attached),
// and times each step. What a plugin process adds on top, process start-up,
// is timed separately (a VERSION call). The replay uses its own network name,
// container and host port, so it never touches the measured attachments.
// It mirrors pkg/bridge and pkg/portmap through their public building blocks
// (pkg/ovsdb, pkg/flows, pkg/link; ovs-portmap's part is hostport.Publish
// and hostport.Withdraw, whole): when the plugins change what they do,
// change it too.

// Phases, in the order they run. "ours" is false for the phases whose time
// is another program's: ovs-vswitchd reconfiguring, host-local, the kernel.
type phase struct {
	name string
	ours bool
}

var (
	phBridgeDial   = phase{"ovs-bridge  OVSDB connect (schema embedded)", true}
	phBridgeSelect = phase{"ovs-bridge  OVSDB select: bridge row (all columns)", true}
	phOwnPorts     = phase{"ovs-bridge  OVSDB select: own ports (external_ids)", true}
	phSync         = phase{"ovs-bridge  OVSDB next_cfg check (waits while ovs-vswitchd applies a change)", false}
	phIPAM         = phase{"ovs-bridge  IPAM: host-local ADD (exec)", false}
	phVeth         = phase{"ovs-bridge  netlink: veth with peer in container netns, isolate", false}
	phContainer    = phase{"ovs-bridge  netlink: container sysctls, tx off, up", false}
	phAttach       = phase{"ovs-bridge  OVSDB transaction: insert Port + Interface", true}
	phOFPort       = phase{"ovs-bridge  ofport wait = ovs-vswitchd reconfiguration", false}
	phAddresses    = phase{"ovs-bridge  netlink: container addresses and routes", false}
	phPortSecRec   = phase{"ovs-bridge  OVSDB select + transaction: port security record", true}
	phPortSec      = phase{"ovs-bridge  OpenFlow bundle: port security flows (pkg/openflow)", true}
	phDPortSec     = phase{"ovs-bridge  OpenFlow masked delete: attachment flows (pkg/openflow)", true}
	phGateway      = phase{"ovs-bridge  gateway on bridge (ofport select, address, up)", false}
	phPmDial       = phase{"ovs-portmap OVSDB connect", true}
	phPmSelect     = phase{"ovs-portmap OVSDB select (own port)", true}
	phNodeIPs      = phase{"ovs-portmap netlink: node addresses", false}
	phPublish      = phase{"ovs-portmap hostport.Publish: record + claims, flows, zone limits, node-local nft, conntrack flush, revalidation", true}
	phDPmDial      = phase{"ovs-portmap OVSDB connect", true}
	phDPmSelect    = phase{"ovs-portmap OVSDB select (own port)", true}
	phWithdraw     = phase{"ovs-portmap hostport.Withdraw: flows, conntrack flush, node-local nft, record + claims", true}
	phDBrDial      = phase{"ovs-bridge  OVSDB connect", true}
	phDBrSelect    = phase{"ovs-bridge  OVSDB select (own ports)", true}
	phDetach       = phase{"ovs-bridge  OVSDB transaction: detach port (no wait)", true}
	phVethDel      = phase{"ovs-bridge  netlink: veth delete (kernel)", false}
	phIPAMDel      = phase{"ovs-bridge  IPAM: host-local DEL (exec)", false}
	phVswitchdDel  = phase{"(after DEL) ovs-vswitchd applying the removal, paid by a next ADD's sync", false}
	ofCall         = map[phase]bool{phPortSec: true, phDPortSec: true}
	addPhases      = []phase{phBridgeDial, phBridgeSelect, phOwnPorts, phSync, phVeth, phContainer, phAttach, phOFPort, phIPAM, phAddresses, phPortSecRec, phPortSec, phGateway, phPmDial, phPmSelect, phNodeIPs, phPublish}
	delPhases      = []phase{phDPmDial, phDPmSelect, phWithdraw, phDBrDial, phDBrSelect, phDPortSec, phDetach, phVethDel, phIPAMDel}
	rawConnect     = "raw JSON-RPC: connect + 1 select (no schema)"
	coldConnect    = "pkg/ovsdb Dial, first in a fresh process (as in a plugin)"
	bundleAgain    = "OpenFlow bundle again right after (vswitchd no longer busy)"
	rawOpenFlow    = "raw OpenFlow 1.4: connect + hello + barrier (in-process floor)"
	ofBlocked      = "OpenFlow barrier sent as the ofport wait returns (vswitchd still busy)"
	rawBridgeAll   = "raw JSON-RPC select of the bridge row, all columns (as now)"
	rawBridgeFew   = "raw JSON-RPC select of the bridge row, _uuid + datapath_type only"

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

func (r *replayer) ipamConf() []byte {
	b, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "bench-replay",
		"ipam": map[string]any{"type": "host-local", "dataDir": r.ipamDir,
			"ranges": []any{[]any{map[string]any{"subnet": ovsSubnet, "gateway": ovsGateway,
				"rangeStart": "198.18.250.1", "rangeEnd": "198.18.255.250"}}},
			"routes": []any{map[string]any{"dst": "0.0.0.0/0"}}}})
	return b
}

func (r *replayer) hostLocal(cmd, id, netnsPath string) ([]byte, error) {
	c := exec.Command(filepath.Join(r.binDir, "host-local"))
	c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+id, "CNI_NETNS="+netnsPath,
		"CNI_IFNAME=eth0", "CNI_PATH="+r.binDir)
	c.Stdin = strings.NewReader(string(r.ipamConf()))
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("host-local %s: %w: %s", cmd, err, out)
	}
	return out, nil
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
	hostName := link.HostVethName(id, "eth0")
	att := ovsdb.Attachment{ContainerID: id, IfName: "eth0"}

	// ---- ADD, ovs-bridge (pkg/bridge CmdAdd: port first, then IPAM) ----
	t := &timer{last: time.Now(), to: res.add}
	cli, err := ovsdb.Dial(ctx, r.ovsdbEP)
	if err != nil {
		return err
	}
	t.mark(phBridgeDial)
	br, err := cli.Bridge(ctx, ovsBridge)
	if err != nil || br == nil {
		return fmt.Errorf("bridge %s: %v", ovsBridge, err)
	}
	t.mark(phBridgeSelect)
	if _, err := cli.FindPorts(ctx, att); err != nil {
		return err
	}
	t.mark(phOwnPorts)
	if err := cli.SyncPending(ctx, 10*time.Second); err != nil {
		return err
	}
	t.mark(phSync)
	hostLink, err := link.CreateVeth(link.VethSpec{HostName: hostName, ContName: "eth0", ContNSFd: int(cns.Fd())})
	if err != nil {
		return err
	}
	if err := link.Isolate(hostName); err != nil {
		return err
	}
	t.mark(phVeth)
	var contMAC net.HardwareAddr
	err = cns.Do(func(ns.NetNS) error {
		if err := link.SetConf("eth0", link.Conf{IPv4: map[string]string{"arp_notify": "1"},
			IPv6: map[string]string{"accept_dad": "0", "ndisc_notify": "1", "addr_gen_mode": "0", "accept_ra": "0"}}); err != nil {
			return err
		}
		if err := link.DisableTxChecksum("eth0"); err != nil {
			return err
		}
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		contMAC = l.Attrs().HardwareAddr
		return netlink.LinkSetUp(l)
	})
	if err != nil {
		return err
	}
	t.mark(phContainer)
	ids := map[string]string{ovsdb.KeyOwner: ovsdb.OwnerValue, ovsdb.KeyContainerID: id, ovsdb.KeyIfName: "eth0",
		ovsdb.KeyNetNS: cns.Path(), ovsdb.KeyNetwork: "bench-replay", ovsdb.KeyBridge: ovsBridge}
	if _, err := cli.AttachPort(ctx, br.UUID, ovsdb.PortSpec{Name: hostName, ExternalIDs: ids}); err != nil {
		return err
	}
	t.mark(phAttach)
	ofport, err := cli.WaitOFPort(ctx, hostName, 10*time.Second)
	if err != nil {
		return err
	}
	t.mark(phOFPort)
	// How long ovs-vswitchd keeps the OpenFlow channel waiting after it has
	// published the ofport, measured alongside (the next steps go on).
	blocked := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		if ofBarrier(strings.TrimPrefix(r.target, "unix:")) != nil {
			blocked <- 0
			return
		}
		blocked <- time.Since(start)
	}()
	defer func() {
		if d := <-blocked; d > 0 {
			res.extra[ofBlocked] = append(res.extra[ofBlocked], d)
		}
	}()
	out, err := r.hostLocal("ADD", id, cns.Path())
	if err != nil {
		return err
	}
	t.mark(phIPAM)
	raw, err := current.NewResult(out)
	if err != nil {
		return err
	}
	result, err := current.NewResultFromResult(raw)
	if err != nil {
		return err
	}
	for _, ipc := range result.IPs {
		ipc.Interface = current.Int(1)
	}
	result.Interfaces = []*current.Interface{{Name: hostName, Mac: hostLink.Attrs().HardwareAddr.String()}, {Name: "eth0", Sandbox: cns.Path()}}
	if err := cns.Do(func(ns.NetNS) error { return ipam.ConfigureIface("eth0", result) }); err != nil {
		return err
	}
	t.mark(phAddresses)
	gw := result.IPs[0]
	ctrIP, _ := netip.AddrFromSlice(gw.Address.IP.To4())
	psRec, _ := json.Marshal(record.PortSecurity{OpenFlow: r.target, MAC: contMAC.String(), IPs: []netip.Addr{ctrIP}})
	ports, err := cli.FindPorts(ctx, att)
	if err != nil || len(ports) != 1 {
		return fmt.Errorf("replay port: %d, %v", len(ports), err)
	}
	if err := cli.SetPortExternalIDs(ctx, ports[0].Port.UUID, map[string]string{record.KeyPortSecurity: string(psRec)}); err != nil {
		return err
	}
	t.mark(phPortSecRec)
	cookie := flows.AttachmentCookie(id, "eth0")
	if err := openflow.Apply(ctx, r.target, flows.PortSecurityBundle(flows.PortSecurity{Cookie: cookie, OFPort: uint32(ofport),
		MAC: contMAC, IPs: []netip.Addr{ctrIP}})); err != nil {
		return err
	}
	t.mark(phPortSec)
	if _, err := cli.WaitOFPort(ctx, ovsBridge, 10*time.Second); err != nil {
		return err
	}
	bl, err := netlink.LinkByName(ovsBridge)
	if err != nil {
		return err
	}
	_ = link.SetSysctl("net/ipv6/conf/"+ovsBridge+"/accept_dad", "0")
	if err := netlink.AddrReplace(bl, &netlink.Addr{IPNet: &net.IPNet{IP: gw.Gateway, Mask: gw.Address.Mask}}); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(bl); err != nil {
		return err
	}
	t.mark(phGateway)
	cli.Close()

	// ---- ADD, ovs-portmap ----
	t.last = time.Now()
	cli, err = ovsdb.Dial(ctx, r.ovsdbEP)
	if err != nil {
		return err
	}
	t.mark(phPmDial)
	ports, err = cli.FindPorts(ctx, att)
	if err != nil || len(ports) != 1 {
		return fmt.Errorf("replay port: %d, %v", len(ports), err)
	}
	t.mark(phPmSelect)
	addrs, err := netlinksafe.AddrList(bl, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	var nodeIPs []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
			nodeIPs = append(nodeIPs, ip.Unmap())
		}
	}
	t.mark(phNodeIPs)
	a := flows.Attachment{Cookie: cookie, OFPort: uint32(ofport), MAC: contMAC, IPv4: ctrIP,
		Rules: flows.Resolve([]flows.Mapping{{Protocol: flows.TCP, HostPort: probePort + 1, ContainerPort: ctrPort},
			{Protocol: flows.UDP, HostPort: probePort + 1, ContainerPort: ctrPort}}, nodeIPs, ctrIP, netip.Addr{}),
		SNAT: true}
	for _, n := range nodeIPs {
		if n.Is4() && !a.HairpinV4.IsValid() {
			a.HairpinV4 = n
		}
	}
	pl := flows.DefaultPipeline()
	if err := hostport.Publish(ctx, cli, ports[0], r.target, "", pl, a); err != nil {
		return err
	}
	t.mark(phPublish)
	start := time.Now()
	if err := openflow.Apply(ctx, r.target, pl.Bundle(a)); err != nil {
		return err
	}
	res.extra[bundleAgain] = append(res.extra[bundleAgain], time.Since(start))
	cli.Close()

	// ---- DEL, ovs-portmap then ovs-bridge (libcni runs a DEL in reverse) ----
	t = &timer{last: time.Now(), to: res.del}
	cli, err = ovsdb.Dial(ctx, r.ovsdbEP)
	if err != nil {
		return err
	}
	t.mark(phDPmDial)
	ports, err = cli.FindPorts(ctx, att)
	if err != nil || len(ports) != 1 {
		return fmt.Errorf("replay port: %d, %v", len(ports), err)
	}
	t.mark(phDPmSelect)
	if err := hostport.Withdraw(ctx, cli, ports[:1]); err != nil {
		return err
	}
	t.mark(phWithdraw)
	cli.Close()
	t.last = time.Now()
	cli, err = ovsdb.Dial(ctx, r.ovsdbEP)
	if err != nil {
		return err
	}
	defer cli.Close()
	t.mark(phDBrDial)
	ports, err = cli.FindPorts(ctx, att)
	if err != nil || len(ports) != 1 {
		return fmt.Errorf("replay port: %d, %v", len(ports), err)
	}
	t.mark(phDBrSelect)
	if err := openflow.DeleteFlows(ctx, r.target, cookie.AttachmentDelete()); err != nil {
		return err
	}
	t.mark(phDPortSec)
	if err := cli.DetachPorts(ctx, ports[0].Port.UUID); err != nil {
		return err
	}
	t.mark(phDetach)
	if err := link.Delete(hostName); err != nil {
		return err
	}
	t.mark(phVethDel)
	if _, err := r.hostLocal("DEL", id, cns.Path()); err != nil {
		return err
	}
	t.mark(phIPAMDel)
	if err := cli.SyncPending(ctx, 10*time.Second); err != nil {
		return err
	}
	t.mark(phVswitchdDel)
	return nil
}

// ovsdbFloors times what connecting costs through pkg/ovsdb and over raw
// JSON-RPC, and what get_schema would cost.
func (r *replayer) ovsdbFloors(ctx context.Context, res *replayResult) error {
	start := time.Now()
	cli, err := ovsdb.Dial(ctx, r.ovsdbEP)
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
