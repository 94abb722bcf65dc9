// Package topology is the Docker harness's addressing plan: the nodes'
// network, each node's addresses and pod ranges, the names of everything the
// harness makes. It is pure: the same environment gives the same plan.
//
//	NET4 203.0.113.160/27   .161 the Docker host (the network's gateway), .161+i node i, +30 the control plane
//	NET6 2001:db8:10::/64   ::1 the Docker host, ::(1+i) node i
//	POD4 198.51.100.0/24    a /26 per node: node i's starts at 64*(i-1)
//	POD6 2001:db8:10        node i's pods in POD6:i::/64
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
}

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

// Node is node i's name (1-based).
func Node(i int) string { return "n" + strconv.Itoa(i) }

// Net4At is the address k of the nodes' IPv4 network (1: the Docker host).
func (p Plan) Net4At(k int) netip.Addr { return add(p.Net4.Addr(), k) }

// Net6At is the address k of the nodes' IPv6 network (1: the Docker host).
func (p Plan) Net6At(k int) netip.Addr { return add(p.Net6.Addr(), k) }

// Node4 and Node6 are node i's addresses.
func (p Plan) Node4(i int) netip.Addr { return p.Net4At(1 + i) }
func (p Plan) Node6(i int) netip.Addr { return p.Net6At(1 + i) }

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
	if !p.Net4.Contains(p.Node4(n)) {
		return fmt.Errorf("-nodes %d: OID_NET4 %s has no address for node %d", n, p.Net4, n)
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
