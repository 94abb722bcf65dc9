// Package topology is the Docker harness's addressing plan: the nodes'
// network, each node's addresses and pod ranges, the names of everything the
// harness makes. It is pure: the same environment gives the same plan.
//
//	NET4 203.0.113.160/27   .161 the Docker host (the network's gateway), .161+i node i, +30 the control plane
//	NET6 2001:db8:10::/64   ::1 the Docker host, ::(1+i) node i
//	POD4 198.51.100.0/24    a /26 per node: node i's starts at 64*(i-1)
//	POD6 2001:db8:10        node i's pods in POD6:i::/64
//
// With two subnets (OID_SUBNETS=2, `up -kube -subnets 2`) the even nodes
// are on a second network instead, joined to the first by a router
// container (the Docker host's own routes untouched):
//
//	NET4B 203.0.113.224/27  .225 the Docker host, .225+i node i, +29 the router, +30 the control plane
//	NET6B 2001:db8:11::/64  ::1 the Docker host, ::(1+i) node i, ::fd the router, ::fe the control plane
//	on NET4 and NET6: +29 and ::fd the router
//
// The control plane is on both networks (it is no Node: no tunnel of its
// own, and it reaches each Node's pod ranges via the Node's address on its
// network); a node reaches the other network through the router, and the
// control plane's first address directly on its own network.
package topology

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// The defaults, each overridden by the environment variable named beside it.
const (
	DefaultPrefix = "ovsflow-oid"      // OID_PREFIX
	DefaultNet4   = "203.0.113.160/27" // OID_NET4
	DefaultNet6   = "2001:db8:10::/64" // OID_NET6
	DefaultPod4   = "198.51.100.0/24"  // OID_POD4
	DefaultNet4B  = "203.0.113.224/27" // OID_NET4B (with two subnets)
	DefaultNet6B  = "2001:db8:11::/64" // OID_NET6B
	MaxNodes      = 4                  // a /26 of POD4 each: four fill a /24
	podMask4      = 26
)

// Plan is one harness's addressing plan.
type Plan struct {
	Prefix   string       // every container, network, volume and image is named Prefix-*
	Net4     netip.Prefix // the nodes' Docker network
	Net6     netip.Prefix
	Pod4     netip.Prefix // a /24: a /26 per node
	Pod6Base string       // node i's pods in Pod6Base:i::/64 (OID_POD6, else Net6's first groups)
	// Subnets is 1, or 2: the even nodes on Net4B and Net6B, behind a
	// router (OID_SUBNETS).
	Subnets int
	Net4B   netip.Prefix
	Net6B   netip.Prefix
}

// The addresses of the router and of the control plane on each network.
const (
	RouterAt       = 29
	ControlPlaneAt = 30
)

// FromEnv reads the plan from the environment (getenv), defaults filled in.
func FromEnv(getenv func(string) string) (Plan, error) {
	or := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	p := Plan{Prefix: or("OID_PREFIX", DefaultPrefix)}
	var err error
	if p.Net4, err = parse4("OID_NET4", or("OID_NET4", DefaultNet4)); err != nil {
		return Plan{}, err
	}
	if p.Pod4, err = parse4("OID_POD4", or("OID_POD4", DefaultPod4)); err != nil {
		return Plan{}, err
	}
	if p.Pod4.Bits() > 32-8 {
		return Plan{}, fmt.Errorf("OID_POD4 %s: want a /24 or larger (a /26 per node)", p.Pod4)
	}
	if p.Net6, err = netip.ParsePrefix(or("OID_NET6", DefaultNet6)); err != nil || !p.Net6.Addr().Is6() || p.Net6.Bits() != 64 {
		return Plan{}, fmt.Errorf("OID_NET6 %q: want an IPv6 /64", getenv("OID_NET6"))
	}
	p.Net6 = p.Net6.Masked()
	p.Pod6Base = getenv("OID_POD6")
	if p.Pod6Base == "" {
		p.Pod6Base = strings.TrimSuffix(p.Net6.Addr().String(), "::")
	}
	if _, err := netip.ParsePrefix(p.Pod6Base + ":1::/64"); err != nil {
		return Plan{}, fmt.Errorf("OID_POD6 %q: want the first three groups of an IPv6 /48, such as 2001:db8:10", p.Pod6Base)
	}
	switch getenv("OID_SUBNETS") {
	case "", "1":
		p.Subnets = 1
	case "2":
		p.Subnets = 2
	default:
		return Plan{}, fmt.Errorf("OID_SUBNETS %q (-subnets): want 1 or 2", getenv("OID_SUBNETS"))
	}
	if p.Net4B, err = parse4("OID_NET4B", or("OID_NET4B", DefaultNet4B)); err != nil {
		return Plan{}, err
	}
	if p.Net6B, err = netip.ParsePrefix(or("OID_NET6B", DefaultNet6B)); err != nil || !p.Net6B.Addr().Is6() || p.Net6B.Bits() != 64 {
		return Plan{}, fmt.Errorf("OID_NET6B %q: want an IPv6 /64", getenv("OID_NET6B"))
	}
	p.Net6B = p.Net6B.Masked()
	if p.Subnets == 2 && (p.Net4B.Overlaps(p.Net4) || p.Net4B.Overlaps(p.Pod4) || p.Net6B.Overlaps(p.Net6)) {
		return Plan{}, fmt.Errorf("OID_NET4B %s, OID_NET6B %s: want networks apart from OID_NET4 %s, OID_POD4 %s and OID_NET6 %s", p.Net4B, p.Net6B, p.Net4, p.Pod4, p.Net6)
	}
	return p, nil
}

func parse4(key, v string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%s %q: want an IPv4 prefix", key, v)
	}
	return p.Masked(), nil
}

// Label is the label of everything the harness makes (its docker filter).
func (p Plan) Label() string { return "ovsflow.io/harness=" + p.Prefix }

// BridgeName is the Linux bridge of the Docker network (15 characters at most).
func (p Plan) BridgeName() string {
	if len(p.Prefix) > 15 {
		return p.Prefix[:15]
	}
	return p.Prefix
}

// Container is the Docker name of a node ("n1") or of the control plane ("cp").
func (p Plan) Container(node string) string { return p.Prefix + "-" + node }

// Network is the Docker network's name.
func (p Plan) Network() string { return p.Prefix + "-net" }

// Subnet is the subnet node i is on: 0, or 1 (the second network) for an
// even node when the plan has two.
func (p Plan) Subnet(i int) int {
	if p.Subnets == 2 && i%2 == 0 {
		return 1
	}
	return 0
}

// NetworkOf is the Docker network of subnet s.
func (p Plan) NetworkOf(s int) string {
	if s == 1 {
		return p.Prefix + "-net2"
	}
	return p.Network()
}

// BridgeNameOf is the Linux bridge of subnet s's Docker network.
func (p Plan) BridgeNameOf(s int) string {
	if s == 1 {
		return strings.TrimSuffix(p.BridgeName()[:min(len(p.BridgeName()), 13)], "-") + "-2"
	}
	return p.BridgeName()
}

// Nets are subnet s's networks.
func (p Plan) Nets(s int) (netip.Prefix, netip.Prefix) {
	if s == 1 {
		return p.Net4B, p.Net6B
	}
	return p.Net4, p.Net6
}

// SubnetAt4 and SubnetAt6 are the address k of subnet s's networks (1: the Docker host).
func (p Plan) SubnetAt4(s, k int) netip.Addr { n4, _ := p.Nets(s); return add(n4.Addr(), k) }
func (p Plan) SubnetAt6(s, k int) netip.Addr { _, n6 := p.Nets(s); return add(n6.Addr(), k) }

// Router6 and ControlPlane6 are the IPv6 addresses of the router and
// of the control plane on subnet s (::fd, ::fe).
func (p Plan) Router6(s int) netip.Addr       { return p.SubnetAt6(s, 0xfd) }
func (p Plan) ControlPlane6(s int) netip.Addr { return p.SubnetAt6(s, 0xfe) }

// UnderlayRoutes are node i's routes to what is not on its subnet (none
// with one subnet), as node-init.sh reads them ("DST via ADDR src ADDR,..."): the
// other subnet through the router; the control plane's first addresses
// (the API server's) directly on this subnet, where it has addresses too.
func (p Plan) UnderlayRoutes(i int) string {
	if p.Subnets < 2 {
		return ""
	}
	s := p.Subnet(i)
	o4, o6 := p.Nets(1 - s)
	// From the node's own address: the bridge interface holds the pods'
	// gateway addresses too, which IPv6's source selection may prefer.
	src4, src6 := p.Node4(i), p.Node6(i)
	r := []string{
		fmt.Sprintf("%s via %s src %s", o4, p.SubnetAt4(s, RouterAt), src4),
		fmt.Sprintf("%s via %s src %s", o6, p.Router6(s), src6),
	}
	if s != 0 {
		r = append(r, fmt.Sprintf("%s/32 via %s src %s", p.SubnetAt4(0, ControlPlaneAt), p.SubnetAt4(s, ControlPlaneAt), src4),
			fmt.Sprintf("%s/128 via %s src %s", p.ControlPlane6(0), p.ControlPlane6(s), src6))
	}
	return strings.Join(r, ",")
}

// Node is node i's name (1-based).
func Node(i int) string { return "n" + strconv.Itoa(i) }

// Net4At is the address k of the nodes' IPv4 network (1: the Docker host).
func (p Plan) Net4At(k int) netip.Addr { return add(p.Net4.Addr(), k) }

// Net6At is the address k of the nodes' IPv6 network (1: the Docker host).
func (p Plan) Net6At(k int) netip.Addr { return add(p.Net6.Addr(), k) }

// Node4 and Node6 are node i's addresses (on its subnet's networks).
func (p Plan) Node4(i int) netip.Addr { return p.SubnetAt4(p.Subnet(i), 1+i) }
func (p Plan) Node6(i int) netip.Addr { return p.SubnetAt6(p.Subnet(i), 1+i) }

// Pod4Of is node i's IPv4 pod range (without Kubernetes: the harness's).
func (p Plan) Pod4Of(i int) netip.Prefix {
	return netip.PrefixFrom(add(p.Pod4.Addr(), 64*(i-1)), podMask4)
}

// Pod6Of is node i's IPv6 pod range (without Kubernetes).
func (p Plan) Pod6Of(i int) netip.Prefix {
	return netip.MustParsePrefix(fmt.Sprintf("%s:%x::/64", p.Pod6Base, i))
}

// CheckNodes refuses a node count the plan has no addresses for.
func (p Plan) CheckNodes(n int) error {
	if n < 1 || n > MaxNodes {
		return fmt.Errorf("-nodes %d: want 1 to %d", n, MaxNodes)
	}
	for i := 1; i <= n; i++ {
		if n4, _ := p.Nets(p.Subnet(i)); !n4.Contains(p.Node4(i)) || p.Subnets == 2 && p.SubnetAt4(p.Subnet(i), RouterAt).Compare(p.Node4(i)) <= 0 {
			key := map[int]string{0: "OID_NET4", 1: "OID_NET4B"}[p.Subnet(i)]
			return fmt.Errorf("-nodes %d: %s %s has no address for node %d", n, key, n4, i)
		}
	}
	return nil
}

// NodeLine is the line `up` prints for node i without Kubernetes:
// NODE <name> <node IPv4> <node IPv6> <pod IPv4 CIDR> <pod IPv6 CIDR>.
func (p Plan) NodeLine(i int) string {
	return fmt.Sprintf("NODE %s %s %s %s %s", Node(i), p.Node4(i), p.Node6(i), p.Pod4Of(i), p.Pod6Of(i))
}

// Routes is node i's routes to the other nodes' pod ranges (n nodes), as
// node-init.sh reads them: "CIDR via ADDR,...".
func (p Plan) Routes(i, n int) string {
	var r []string
	for j := 1; j <= n; j++ {
		if j != i {
			r = append(r, fmt.Sprintf("%s via %s", p.Pod4Of(j), p.Node4(j)), fmt.Sprintf("%s via %s", p.Pod6Of(j), p.Node6(j)))
		}
	}
	return strings.Join(r, ",")
}

func add(a netip.Addr, k int) netip.Addr {
	for ; k > 0; k-- {
		a = a.Next()
	}
	return a
}
