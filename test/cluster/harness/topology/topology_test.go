package topology

import (
	"strings"
	"testing"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	p, err := FromEnv(env())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{p.NodeLine(1), "NODE n1 203.0.113.162 2001:db8:10::2 198.51.100.0/26 2001:db8:10:1::/64"},
		{p.NodeLine(3), "NODE n3 203.0.113.164 2001:db8:10::4 198.51.100.128/26 2001:db8:10:3::/64"},
		{p.Net4At(1).String(), "203.0.113.161"},
		{p.Net6At(1).String(), "2001:db8:10::1"},
		{p.Net4At(30).String(), "203.0.113.190"},
		{p.Routes(1, 2), "198.51.100.64/26 via 203.0.113.163,2001:db8:10:2::/64 via 2001:db8:10::3"},
		{p.Container("n2"), "ovsflow-oid-n2"},
		{p.BridgeName(), "ovsflow-oid"},
		{p.Label(), "ovsflow.io/harness=ovsflow-oid"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestOverrides(t *testing.T) {
	p, err := FromEnv(env("OID_PREFIX", "oidr-long-prefix", "OID_NET4", "192.0.2.192/27", "OID_NET6", "2001:db8:30::/64",
		"OID_POD4", "198.18.0.0/24", "OID_POD6", "2001:db8:30"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.NodeLine(2), "NODE n2 192.0.2.195 2001:db8:30::3 198.18.0.64/26 2001:db8:30:2::/64"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := p.BridgeName(); got != "oidr-long-prefi" {
		t.Errorf("bridge %q: want the prefix's first 15 characters", got)
	}
}

func TestRefused(t *testing.T) {
	for _, c := range []struct {
		env  func(string) string
		want string
	}{
		{env("OID_NET4", "2001:db8::/64"), "OID_NET4"},
		{env("OID_POD4", "198.51.100.0/25"), "OID_POD4"},
		{env("OID_NET6", "2001:db8::/56"), "OID_NET6"},
		{env("OID_POD6", "2001:db8::1:2"), "OID_POD6"},
	} {
		if _, err := FromEnv(c.env); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error naming %s", err, c.want)
		}
	}
	p, _ := FromEnv(env())
	if err := p.CheckNodes(5); err == nil {
		t.Error("-nodes 5 accepted")
	}
	p, _ = FromEnv(env("OID_NET4", "192.0.2.0/30"))
	if err := p.CheckNodes(3); err == nil || !strings.Contains(err.Error(), "OID_NET4") {
		t.Errorf("got %v, want node 3 refused for a /30", err)
	}
}

func TestTwoSubnets(t *testing.T) {
	p, err := FromEnv(env("OID_SUBNETS", "2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{p.NodeLine(1), "NODE n1 203.0.113.162 2001:db8:10::2 198.51.100.0/26 2001:db8:10:1::/64"},
		{p.NodeLine(2), "NODE n2 203.0.113.227 2001:db8:11::3 198.51.100.64/26 2001:db8:10:2::/64"},
		{p.NodeLine(3), "NODE n3 203.0.113.164 2001:db8:10::4 198.51.100.128/26 2001:db8:10:3::/64"},
		{p.NetworkOf(1), "ovsflow-oid-net2"},
		{p.BridgeNameOf(1), "ovsflow-oid-2"},
		{p.UnderlayRoutes(1), "203.0.113.224/27 via 203.0.113.189 src 203.0.113.162,2001:db8:11::/64 via 2001:db8:10::fd src 2001:db8:10::2"},
		{p.UnderlayRoutes(2), "203.0.113.160/27 via 203.0.113.253 src 203.0.113.227,2001:db8:10::/64 via 2001:db8:11::fd src 2001:db8:11::3," +
			"203.0.113.190/32 via 203.0.113.254 src 203.0.113.227,2001:db8:10::fe/128 via 2001:db8:11::fe src 2001:db8:11::3"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if err := p.CheckNodes(4); err != nil {
		t.Error(err)
	}
	one, _ := FromEnv(env())
	if r := one.UnderlayRoutes(2); r != "" {
		t.Errorf("one subnet: underlay routes %q", r)
	}
	if got := (Plan{Prefix: "oidr-long-prefix"}).BridgeNameOf(1); got != "oidr-long-pre-2" {
		t.Errorf("second bridge %q", got)
	}
	for _, e := range []func(string) string{env("OID_SUBNETS", "3"), env("OID_SUBNETS", "2", "OID_NET4B", "203.0.113.160/28")} {
		if _, err := FromEnv(e); err == nil {
			t.Error("a bad two-subnet plan accepted")
		}
	}
}

func TestKubeDefaults(t *testing.T) {
	p, err := FromEnv(env())
	if err != nil {
		t.Fatal(err)
	}
	k, err := p.KubeFromEnv(env())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{strings.Join(k.ClusterCIDRs(), ","), "198.51.100.0/24,2001:db8:10:100::/56"},
		{strings.Join(k.ServiceCIDRs(), ","), "203.0.113.192/27,2001:db8:10:ffff::/112"},
		{k.APIService4().String() + " " + k.APIService6().String(), "203.0.113.193 2001:db8:10:ffff::1"},
		{strings.Join(k.ClusterDNS(), ","), "203.0.113.202,2001:db8:10:ffff::a"},
		{k.Mask4Flag(), "26"},
		{p.APIServer(), "https://203.0.113.190:6443"},
		{p.KubeState(), "/run/ovsflow-oid-kube"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if err := k.CheckNodes(4); err != nil {
		t.Errorf("4 nodes in a /24 of /26s: %v", err)
	}
	if err := k.CheckNodes(5); err == nil || !strings.Contains(err.Error(), "holds 4 range(s) of /26") {
		t.Errorf("5 nodes in a /24 of /26s: %v", err)
	}
}

func TestKubeIPv6OnlyWithoutDNS(t *testing.T) {
	p, err := FromEnv(env())
	if err != nil {
		t.Fatal(err)
	}
	k, err := p.KubeFromEnv(env("OID_KPOD4", "none", "OID_DNS", "0", "OID_KMAXPODS", "210"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.ClusterCIDRs(), ","); got != "2001:db8:10:100::/56" {
		t.Errorf("cluster CIDRs %q", got)
	}
	if k.Mask4Flag() != "" || k.ClusterDNS() != nil || k.MaxPods != 210 || k.CheckNodes(4) != nil {
		t.Errorf("IPv6-only, no DNS: %+v", k)
	}
	k.DNS = true
	if got := strings.Join(k.ClusterDNS(), ","); got != "2001:db8:10:ffff::a,203.0.113.202" {
		t.Errorf("IPv6-only pods' clusterDNS %q: the IPv6 address first", got)
	}
	for _, bad := range [][]string{{"OID_KMASK4", "x"}, {"OID_KPOD6", "198.18.0.0/16"}, {"OID_SVC4", "2001:db8::/64"}, {"OID_KMAXPODS", "-1"}} {
		if _, err := p.KubeFromEnv(env(bad...)); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%s=%s: %v", bad[0], bad[1], err)
		}
	}
}
