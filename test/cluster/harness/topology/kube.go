package topology

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Kube is the Kubernetes cluster's part of the plan (`up -kube`): the
// cluster CIDRs the node IPAM controller cuts into the Nodes' pod ranges,
// the Service ranges, the cluster DNS. Each is overridden by the
// environment variable named beside it.
//
//	Pod4    OID_KPOD4   Plan.Pod4, a /26 per Node (OID_KMASK4); "none": IPv6-only pods
//	Pod6    OID_KPOD6   NET6's first groups:100::/56, a /64 per Node
//	Svc4    OID_SVC4    203.0.113.192/27
//	Svc6    OID_SVC6    NET6's first groups:ffff::/112
//	DNS     OID_DNS     1: CoreDNS at the 10th address of each Service range; 0: no cluster DNS
//	MaxPods OID_KMAXPODS kubelet's maxPods (0: kubelet's default, 110)
type Kube struct {
	Pod4         netip.Prefix // invalid: IPv6-only pods
	Pod6         netip.Prefix
	Mask4, Mask6 int
	Svc4, Svc6   netip.Prefix
	DNS          bool
	MaxPods      int
}

// DefaultSvc4 is the IPv4 Service range unless OID_SVC4 says otherwise.
const DefaultSvc4 = "203.0.113.192/27"

// KubeFromEnv reads the cluster's plan from the environment (getenv).
func (p Plan) KubeFromEnv(getenv func(string) string) (Kube, error) {
	base := strings.TrimSuffix(p.Net6.Addr().String(), "::")
	or := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	k := Kube{Mask6: 64, DNS: getenv("OID_DNS") != "0"}
	var err error
	if v := or("OID_KPOD4", p.Pod4.String()); v != "none" {
		if k.Pod4, err = parse4("OID_KPOD4", v); err != nil {
			return Kube{}, err
		}
	}
	if k.Pod6, err = parse6("OID_KPOD6", or("OID_KPOD6", base+":100::/56")); err != nil {
		return Kube{}, err
	}
	if k.Svc4, err = parse4("OID_SVC4", or("OID_SVC4", DefaultSvc4)); err != nil {
		return Kube{}, err
	}
	if k.Svc6, err = parse6("OID_SVC6", or("OID_SVC6", base+":ffff::/112")); err != nil {
		return Kube{}, err
	}
	if k.Mask4, err = strconv.Atoi(or("OID_KMASK4", "26")); err != nil || k.Mask4 < 8 || k.Mask4 > 30 {
		return Kube{}, fmt.Errorf("OID_KMASK4 %q: want a mask length of 8 to 30", getenv("OID_KMASK4"))
	}
	if k.MaxPods, err = strconv.Atoi(or("OID_KMAXPODS", "0")); err != nil || k.MaxPods < 0 {
		return Kube{}, fmt.Errorf("OID_KMAXPODS %q: want a number of pods", getenv("OID_KMAXPODS"))
	}
	return k, nil
}

func parse6(key, v string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(v)
	if err != nil || !p.Addr().Is6() {
		return netip.Prefix{}, fmt.Errorf("%s %q: want an IPv6 prefix", key, v)
	}
	return p.Masked(), nil
}

// DualStack: the pods have both families (else IPv6 only).
func (k Kube) DualStack() bool { return k.Pod4.IsValid() }

// ClusterCIDRs are the pods' cluster CIDRs, IPv4 first.
func (k Kube) ClusterCIDRs() []string {
	if !k.DualStack() {
		return []string{k.Pod6.String()}
	}
	return []string{k.Pod4.String(), k.Pod6.String()}
}

// ServiceCIDRs are the Service ranges, IPv4 first (the API server's and
// the controller manager's --service-cluster-ip-range).
func (k Kube) ServiceCIDRs() []string { return []string{k.Svc4.String(), k.Svc6.String()} }

// Mask4Flag is the controller manager's IPv4 node mask, "" for IPv6-only
// pods (it refuses an IPv4 mask size then).
func (k Kube) Mask4Flag() string {
	if !k.DualStack() {
		return ""
	}
	return strconv.Itoa(k.Mask4)
}

// CheckNodes refuses n Nodes that the IPv4 cluster CIDR has no range for:
// the node IPAM controller gives each Node one, and a Node without one
// never runs a pod.
func (k Kube) CheckNodes(n int) error {
	if !k.DualStack() {
		return nil
	}
	have := 0
	if d := k.Mask4 - k.Pod4.Bits(); d >= 0 {
		have = 1 << min(d, 16)
	}
	if have < n {
		return fmt.Errorf("-nodes %d: the IPv4 cluster CIDR %s (OID_KPOD4, else OID_POD4) holds %d range(s) of /%d (OID_KMASK4): a larger CIDR, a longer mask or fewer nodes", n, k.Pod4, have, k.Mask4)
	}
	return nil
}

// APIService4 and APIService6 are the kubernetes Service's addresses (the
// first of each range), in the API server's certificate.
func (k Kube) APIService4() netip.Addr { return add(k.Svc4.Addr(), 1) }
func (k Kube) APIService6() netip.Addr { return add(k.Svc6.Addr(), 1) }

// DNS4 and DNS6 are the kube-dns Service's addresses (the 10th of each range, as kubeadm's).
func (k Kube) DNS4() netip.Addr { return add(k.Svc4.Addr(), 10) }
func (k Kube) DNS6() netip.Addr { return add(k.Svc6.Addr(), 10) }

// ClusterDNS is kubelet's clusterDNS: the address of the pods' first
// family first; none without the cluster DNS.
func (k Kube) ClusterDNS() []string {
	switch {
	case !k.DNS:
		return nil
	case !k.DualStack():
		return []string{k.DNS6().String(), k.DNS4().String()}
	}
	return []string{k.DNS4().String(), k.DNS6().String()}
}

// ControlPlane4 and ControlPlane6 are the control plane's first
// addresses (the API server's), on the first subnet.
func (p Plan) ControlPlane4() netip.Addr { return p.SubnetAt4(0, ControlPlaneAt) }

// APIServer is the API server's URL.
func (p Plan) APIServer() string { return "https://" + p.ControlPlane4().String() + ":6443" }

// KubeState is where `up -kube` writes the PKI, the kubeconfigs and each
// node's configs (mounted read-only into every container at the same path).
func (p Plan) KubeState() string { return "/run/" + p.Prefix + "-kube" }
