package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Addresses. 198.18.0.0/15 is the benchmarking range (RFC 2544) and
// 198.51.100.0/24 a documentation range: nothing outside the namespaces
// made here uses them.
const (
	ovsBridge   = "bbr0"            // chain A's OVS bridge (netdev datapath)
	ovsNodeCIDR = "198.51.100.1/24" // chain A's node address, on the bridge's internal interface
	ovsSubnet   = "198.18.0.0/16"   // chain A's pod subnet
	ovsGateway  = "198.18.0.1"
	refSubnet   = "198.19.0.0/16" // chains B and C (each in a netns of its own)
	refGateway  = "198.19.0.1"
	refBridge   = "cni0"
	portBase    = 20000 // first host port of the i-th filler container: portBase+i*portsPer()
	probePort   = 40000 // first host port of the measured container
	replayPort  = 41000 // the replay's container
	ctrPort     = 80
)

// chain is one CNI chain on one node network namespace.
type chain struct {
	key, name string
	node      ns.NetNS // the node: where the plugins run
	cfg       *libcni.CNIConfig
	list      *libcni.NetworkConfigList
	netns     *netnsDir
	cacheDir  string

	attached []*container   // filler containers, in the order they were added
	made     int            // containers ever made, for unique IDs
	probe    ns.NetNS       // netns of the measured container, reused
	ovs      *ovsNode       // chain P: its bridge (A's is nodeA)
	floor    *floorChain    // chain F: no CNI chain, the bare Open vSwitch floor
	capArgs  map[string]any // the capability arguments of every ADD and DEL (nil: port mappings)
	// portShift is added to every host port the chain publishes: chain P
	// shares A's node, where host ports on 127.0.0.1 are one set for all
	// bridges.
	portShift int

	mu *sync.Mutex // made and attached, while the churn scenario runs (shared by copies)
}

type container struct {
	id       string
	ns       ns.NetNS
	hostPort int
}

func (c *container) rt(hostPort int) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: c.id, NetNS: c.ns.Path(), IfName: "eth0",
		CapabilityArgs: map[string]any{"portMappings": portMappings(hostPort, *mappings)}}
}

// portMappings are the k mappings of a container whose first host port is
// hostPort: hostPort+j/2, TCP for even j, UDP for odd (UDP: its ADD and DEL
// flush the mapping's conntrack entries).
func portMappings(hostPort, k int) []map[string]any {
	out := make([]map[string]any, 0, k)
	for j := range k {
		proto := "tcp"
		if j%2 == 1 {
			proto = "udp"
		}
		out = append(out, map[string]any{"hostPort": hostPort + j/2, "containerPort": ctrPort, "protocol": proto})
	}
	return out
}

// portsPer is how many host ports a container publishes.
func portsPer() int { return (*mappings + 1) / 2 }

// ovsNode is where an OVS chain lives: its bridge, node address and pod subnet.
type ovsNode struct {
	bridge, nodeCIDR, subnet, gateway string
}

var (
	nodeA = ovsNode{ovsBridge, ovsNodeCIDR, ovsSubnet, ovsGateway}
	// nodeP is the prototype chain's: a second bridge on the same Open vSwitch.
	nodeP = ovsNode{"bbr1", "203.0.113.1/24", "198.19.0.0/16", "198.19.0.1"}
)

func (o ovsNode) nodeIP() string { return strings.Split(o.nodeCIDR, "/")[0] }

// ovsConflist is chain A: ovs-bridge (gateway on the bridge) + host-local + ovs-portmap,
// configured as the DaemonSet's conflist (the veth left to the netns, which
// the driver deletes after each DEL as a runtime does).
func ovsConflist(name string, o ovsNode, ovsdb, ipamDir string) map[string]any {
	return map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{
		map[string]any{"type": "ovs-bridge", "bridge": o.bridge, "ovsdb": ovsdb, "isGateway": true, "leaveVethToNetns": true,
			"ipam": map[string]any{"type": "host-local", "dataDir": ipamDir,
				"ranges": []any{[]any{map[string]any{"subnet": o.subnet, "gateway": o.gateway}}},
				"routes": []any{map[string]any{"dst": "0.0.0.0/0"}}}},
		map[string]any{"type": "ovs-portmap", "ovsdb": ovsdb, "capabilities": map[string]bool{"portMappings": true}},
	}}
}

// refConflist is chains B and C: the usual runtime defaults of the reference
// chain (../shared/perf-baseline.md): bridge with isGateway, ipMasq and
// hairpinMode; host-local; portmap with snat; one backend for both.
func refConflist(name, backend, ipamDir string) map[string]any {
	return map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{
		map[string]any{"type": "bridge", "bridge": refBridge, "isGateway": true, "ipMasq": true,
			"ipMasqBackend": backend, "hairpinMode": true,
			"ipam": map[string]any{"type": "host-local", "dataDir": ipamDir,
				"ranges": []any{[]any{map[string]any{"subnet": refSubnet, "gateway": refGateway}}},
				"routes": []any{map[string]any{"dst": "0.0.0.0/0"}}}},
		map[string]any{"type": "portmap", "backend": backend, "snat": true, "capabilities": map[string]bool{"portMappings": true}},
	}}
}

// newChain makes a chain whose plugins libcni finds in binDirs.
func newChain(key, name string, node ns.NetNS, conflist map[string]any, binDirs []string, cacheDir string, ex *timedExec, nd *netnsDir) (*chain, error) {
	b, err := json.Marshal(conflist)
	if err != nil {
		return nil, err
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("chain %s conflist: %w", key, err)
	}
	probe, err := nd.create("probe-" + key)
	if err != nil {
		return nil, err
	}
	return &chain{key: key, name: name, node: node, netns: nd, list: list, probe: probe, cacheDir: cacheDir, mu: &sync.Mutex{},
		cfg: libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, ex)}, nil
}

// add runs ADD of the chain for c and returns how long libcni took: the
// time a runtime that uses libcni in-process (containerd, CRI-O) waits.
func (ch *chain) add(ctx context.Context, c *container, hostPort int) (time.Duration, error) {
	var d time.Duration
	err := ch.node.Do(func(ns.NetNS) error {
		start := time.Now()
		if ch.floor != nil {
			err := ch.floor.add(c)
			d = time.Since(start)
			return err
		}
		_, err := ch.cfg.AddNetworkList(withChain(ctx, ch.key), ch.list, ch.rtOf(c, hostPort))
		d = time.Since(start)
		return err
	})
	if err != nil {
		return d, fmt.Errorf("chain %s: ADD %s: %w", ch.key, c.id, err)
	}
	return d, nil
}

func (ch *chain) del(ctx context.Context, c *container, hostPort int) (time.Duration, error) {
	var d time.Duration
	err := ch.node.Do(func(ns.NetNS) error {
		start := time.Now()
		if ch.floor != nil {
			err := ch.floor.del(c)
			d = time.Since(start)
			return err
		}
		err := ch.cfg.DelNetworkList(withChain(ctx, ch.key), ch.list, ch.rtOf(c, hostPort))
		d = time.Since(start)
		return err
	})
	if err != nil {
		return d, fmt.Errorf("chain %s: DEL %s: %w", ch.key, c.id, err)
	}
	ch.gone(c)
	return d, nil
}

// gone does, untimed, what a runtime does after a DEL: it deletes the
// container's netns, and with it what the DEL left there (chain A's veth,
// "leaveVethToNetns"). The probe's netns is reused: its interfaces go
// instead.
func (ch *chain) gone(c *container) {
	if c.ns != ch.probe {
		ch.netns.remove(c.ns)
		return
	}
	_ = c.ns.Do(func(ns.NetNS) error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Type() == "veth" {
				_ = netlink.LinkDel(l)
			}
		}
		return nil
	})
}

func (ch *chain) newContainer() (*container, error) {
	ch.mu.Lock()
	ch.made++
	made := ch.made
	ch.mu.Unlock()
	id := fmt.Sprintf("bench-%s-%05d", strings.ToLower(ch.key), made)
	n, err := ch.netns.create(id)
	if err != nil {
		return nil, err
	}
	return &container{id: id, ns: n, hostPort: portBase + made*portsPer()}, nil
}

// parallel runs ADDs (grow) or DELs (shrink) with `callers` concurrent
// callers until the chain has `target` containers, and returns the wall
// time. The containers' netns are made before the clock starts.
func (ch *chain) parallel(ctx context.Context, target, callers int) (time.Duration, error) {
	if target > len(ch.attached) {
		todo := make([]*container, 0, target-len(ch.attached))
		for len(ch.attached)+len(todo) < target {
			c, err := ch.newContainer()
			if err != nil {
				return 0, err
			}
			todo = append(todo, c)
		}
		ok := make([]bool, len(todo))
		start := time.Now()
		runPool(callers, len(todo), func(i int) {
			ok[i] = ch.addOrUndo(ctx, todo[i])
		})
		d := time.Since(start)
		for i, c := range todo {
			if ok[i] {
				ch.attached = append(ch.attached, c)
			} else {
				c.ns.Close()
			}
		}
		return d, nil
	}
	todo := ch.attached[target:]
	start := time.Now()
	runPool(callers, len(todo), func(i int) {
		if _, err := ch.del(ctx, todo[i], todo[i].hostPort); err != nil {
			failed.record(err)
		}
	})
	d := time.Since(start)
	ch.attached = ch.attached[:target]
	for _, c := range todo {
		c.ns.Close()
	}
	return d, nil
}

// addOrUndo runs ADD for c; when it fails, the failure is counted and a DEL
// cleans up after it, as a runtime does.
func (ch *chain) addOrUndo(ctx context.Context, c *container) bool {
	if _, err := ch.add(ctx, c, c.hostPort); err != nil {
		failed.record(err)
		if _, err := ch.del(ctx, c, c.hostPort); err != nil {
			failed.record(fmt.Errorf("cleanup after the failed ADD: %w", err))
		}
		return false
	}
	return true
}

// runPool runs f(0..n-1) on `callers` goroutines.
func runPool(callers, n int, f func(i int)) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
	)
	for w := 0; w < callers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}

// failures counts the ADDs and DELs that failed during the run: a failed
// operation is counted and the run goes on (a failed ADD is followed by a
// DEL, as a runtime does); the report prints the count and the errors, and
// the run fails when it is not zero.
type failures struct {
	mu   sync.Mutex
	errs []error
}

var failed failures

func (f *failures) record(err error) {
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
	logf("FAILED: %v", err)
}

func (f *failures) all() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]error(nil), f.errs...)
}

// measureAdd adds one more container (the probe), whose netns is reused.
func (ch *chain) measureAdd(ctx context.Context, rep int) (*container, time.Duration, error) {
	c := &container{id: fmt.Sprintf("probe-%s-%d-%d", strings.ToLower(ch.key), len(ch.attached), rep), ns: ch.probe, hostPort: probePort}
	d, err := ch.add(ctx, c, probePort)
	return c, d, err
}

// inNode runs a command inside the chain's node netns and returns its output.
func (ch *chain) inNode(name string, args ...string) (string, error) {
	var out []byte
	err := ch.node.Do(func(ns.NetNS) error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
		}
		return nil
	})
	return string(out), err
}

// setUpLo brings lo up in a node netns (local connections need it).
func setUpLo(n ns.NetNS) error {
	return n.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
}

// serve answers every TCP connection on :port inside netns n with its ID.
func serve(n ns.NetNS, port int, id string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, id)
			c.Close()
		}
	}()
	return l, nil
}

// dialFrom connects to addr from inside netns n and returns what was said.
func dialFrom(n ns.NetNS, addr string) (string, error) {
	var got string
	err := n.Do(func(ns.NetNS) error {
		c, err := net.DialTimeout("tcp4", addr, 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 256)
		k, _ := c.Read(buf)
		got = string(buf[:k])
		return nil
	})
	return got, err
}

func mustMkdir(dir string) string {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fatalf("%v", err)
	}
	return dir
}
