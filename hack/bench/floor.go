package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Chain F is the Open vSwitch floor: what any CNI plugin that attaches a
// container to this ovs-vswitchd has to pay at least, with nothing of this
// suite in it. Its ADD creates a veth whose container end is up in the
// probe's netns (host end isolated and up, as ovs-bridge makes it), attaches
// the host end with a bare `ovs-vsctl add-port` (which waits until
// ovs-vswitchd has applied it) on chain A's bridge, so with the same N ports
// and flows as A's ADD sees, and runs the IPAM plugin it would need
// (host-local ADD, exec). Its DEL is `ovs-vsctl del-port` (waits too), the
// veth deleted, host-local DEL. No flows, no port security, no host ports:
// the gap between A and F is what this suite adds on top of Open vSwitch.
type floorChain struct {
	ovsdbEP, bridge string
	hostLocal       string
	ipamConf        []byte
}

// floorHost is the host end of F's veth; one F container exists at a time.
const floorHost = "bfloor0"

func newFloorChain(ep, bridge, binDir, ipamDir string) *floorChain {
	conf, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "bench-floor",
		"ipam": map[string]any{"type": "host-local", "dataDir": ipamDir,
			"ranges": []any{[]any{map[string]any{"subnet": ovsSubnet, "gateway": ovsGateway,
				"rangeStart": "198.18.240.1", "rangeEnd": "198.18.249.250"}}}}})
	return &floorChain{ovsdbEP: ep, bridge: bridge, hostLocal: filepath.Join(binDir, "host-local"), ipamConf: conf}
}

func (f *floorChain) ipam(cmd string, c *container) error {
	x := exec.Command(f.hostLocal)
	x.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_CONTAINERID="+c.id, "CNI_NETNS="+c.ns.Path(),
		"CNI_IFNAME=eth0", "CNI_PATH="+filepath.Dir(f.hostLocal))
	x.Stdin = strings.NewReader(string(f.ipamConf))
	if out, err := x.CombinedOutput(); err != nil {
		return fmt.Errorf("host-local %s %s: %w: %s", cmd, c.id, err, out)
	}
	return nil
}

func (f *floorChain) vsctl(args ...string) error {
	out, err := exec.Command("ovs-vsctl", append([]string{"--db=" + f.ovsdbEP, "--timeout=30"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ovs-vsctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// add runs F's ADD for c from the node netns (the caller's thread is in it).
func (f *floorChain) add(c *container) error {
	la := netlink.NewLinkAttrs()
	la.Name = floorHost
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(c.ns.Fd()))}); err != nil {
		return fmt.Errorf("veth %s: %w", floorHost, err)
	}
	for key, val := range map[string]string{"ipv4/conf/" + floorHost + "/arp_ignore": "8", "ipv6/conf/" + floorHost + "/disable_ipv6": "1"} {
		if err := os.WriteFile("/proc/sys/net/"+key, []byte(val), 0o644); err != nil {
			return fmt.Errorf("sysctl %s: %w", key, err)
		}
	}
	host, err := netlink.LinkByName(floorHost)
	if err != nil {
		return fmt.Errorf("veth %s: %w", floorHost, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("veth %s up: %w", floorHost, err)
	}
	if err := c.ns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(l)
	}); err != nil {
		return fmt.Errorf("container end of %s up: %w", floorHost, err)
	}
	if err := f.vsctl("add-port", f.bridge, floorHost, "--", "set", "port", floorHost, "external_ids:ovsflow.io/bench=floor"); err != nil {
		return err
	}
	return f.ipam("ADD", c)
}

// del undoes add; what is already gone is not an error.
func (f *floorChain) del(c *container) error {
	if err := f.vsctl("--if-exists", "del-port", f.bridge, floorHost); err != nil {
		return err
	}
	if l, err := netlink.LinkByName(floorHost); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			return fmt.Errorf("veth %s: %w", floorHost, err)
		}
	}
	return f.ipam("DEL", c)
}

// reconfCounter reads ovs-vswitchd's bridge_reconfigure coverage counter
// (one per full reconfiguration of its bridges) over its unixctl socket,
// in-process: a JSON-RPC request the main loop answers in well under a
// millisecond, so it can be read around every measured ADD and DEL.
type reconfCounter struct{ sock string }

func newReconfCounter(rundir string) (*reconfCounter, error) {
	pid, err := os.ReadFile(filepath.Join(rundir, "ovs-vswitchd.pid"))
	if err != nil {
		return nil, fmt.Errorf("ovs-vswitchd pid: %w", err)
	}
	r := &reconfCounter{sock: filepath.Join(rundir, "ovs-vswitchd."+strings.TrimSpace(string(pid))+".ctl")}
	if _, err := r.read(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *reconfCounter) read() (int, error) {
	c, err := net.DialTimeout("unix", r.sock, 2*time.Second)
	if err != nil {
		return 0, fmt.Errorf("unixctl %s: %w", r.sock, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req, _ := json.Marshal(map[string]any{"id": 0, "method": "coverage/read-counter", "params": []string{"bridge_reconfigure"}})
	if _, err := c.Write(req); err != nil {
		return 0, fmt.Errorf("unixctl %s: %w", r.sock, err)
	}
	var resp struct {
		Result *string `json:"result"`
		Error  any     `json:"error"`
	}
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return 0, fmt.Errorf("unixctl %s: %w", r.sock, err)
	}
	if resp.Result == nil {
		return 0, fmt.Errorf("unixctl coverage/read-counter: %v", resp.Error)
	}
	return strconv.Atoi(strings.TrimSpace(*resp.Result))
}

// count is the counter now, or -1 when it cannot be read (then the
// reconfiguration columns say so; the run goes on).
func (r *reconfCounter) count() int {
	if r == nil {
		return -1
	}
	n, err := r.read()
	if err != nil {
		return -1
	}
	return n
}
