package kubeconf

import (
	"path/filepath"
	"strconv"
	"strings"
)

// ControlPlane is what the control plane's command lines say of the
// cluster: etcd on the loopback only, kube-apiserver on Advertise,
// kube-controller-manager with node IPAM (--allocate-node-cidrs: each Node
// gets a spec.podCIDRs of each family of ClusterCIDRs) and the
// ServiceAccount token controller, and kube-scheduler; their binaries in
// Bin, their PKI and kubeconfigs in PKI (the pki package's layout).
type ControlPlane struct {
	Bin, PKI, EtcdData, Name   string
	Advertise                  string
	ClusterCIDRs, ServiceCIDRs []string
	Mask4, Mask6               int // 0 Mask4: IPv6-only pods (the controller manager refuses an IPv4 mask size there)
	// APIQPS: the controller manager's and the scheduler's requests per
	// second to the API server (their burst twice that); 0: theirs (20
	// and 50).
	APIQPS int
}

// Process is a command line of the control plane.
type Process struct {
	Name string
	Args []string
}

// Processes are the control plane's command lines, in the order they start.
func (c ControlPlane) Processes() []Process {
	p := func(f string) string { return filepath.Join(c.PKI, f) }
	bin := func(b string) string { return filepath.Join(c.Bin, b) }
	services := strings.Join(c.ServiceCIDRs, ",")
	cm := p("controller-manager.kubeconfig")
	controller := []string{bin("kube-controller-manager"), "--kubeconfig", cm,
		"--authentication-kubeconfig", cm, "--authorization-kubeconfig", cm,
		"--bind-address", "127.0.0.1", "--leader-elect=false", "--use-service-account-credentials",
		"--service-account-private-key-file", p("sa.key"), "--root-ca-file", p("ca.crt"),
		"--allocate-node-cidrs", "--cluster-cidr", strings.Join(c.ClusterCIDRs, ",")}
	if c.Mask4 != 0 {
		controller = append(controller, "--node-cidr-mask-size-ipv4", strconv.Itoa(c.Mask4))
	}
	controller = append(controller, "--node-cidr-mask-size-ipv6", strconv.Itoa(c.Mask6),
		"--service-cluster-ip-range", services, "--profiling=false")
	sc := p("scheduler.kubeconfig")
	scheduler := []string{bin("kube-scheduler"), "--kubeconfig", sc,
		"--authentication-kubeconfig", sc, "--authorization-kubeconfig", sc,
		"--bind-address", "127.0.0.1", "--leader-elect=false", "--profiling=false"}
	if c.APIQPS > 0 {
		qps := []string{"--kube-api-qps", strconv.Itoa(c.APIQPS), "--kube-api-burst", strconv.Itoa(2 * c.APIQPS)}
		controller, scheduler = append(controller, qps...), append(scheduler, qps...)
	}
	return []Process{
		{"etcd", []string{bin("etcd"), "--data-dir", c.EtcdData, "--name", c.Name,
			"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
			"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
			"--initial-cluster", c.Name + "=http://127.0.0.1:2380", "--listen-metrics-urls", "http://127.0.0.1:2381"}},
		{"kube-apiserver", []string{bin("kube-apiserver"), "--etcd-servers", "http://127.0.0.1:2379",
			"--advertise-address", c.Advertise, "--bind-address", "0.0.0.0", "--secure-port", "6443",
			"--service-cluster-ip-range", services,
			"--client-ca-file", p("ca.crt"), "--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
			"--kubelet-client-certificate", p("apiserver-kubelet-client.crt"), "--kubelet-client-key", p("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority", p("ca.crt"), "--kubelet-preferred-address-types", "InternalIP",
			"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
			"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
			"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
			"--allow-privileged=false", "--profiling=false"}},
		{"kube-controller-manager", controller},
		{"kube-scheduler", scheduler},
	}
}

// Script is the control plane's command lines as cp-init.sh runs them:
// one "supervise NAME ARGS..." line each, every word single-quoted.
func (c ControlPlane) Script() []byte {
	var b strings.Builder
	for _, p := range c.Processes() {
		b.WriteString("supervise " + p.Name)
		for _, a := range p.Args {
			b.WriteString(" '" + strings.ReplaceAll(a, "'", `'\''`) + "'")
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}
