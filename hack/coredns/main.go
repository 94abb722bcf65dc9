// Command coredns is CoreDNS with the plugins the cluster's Corefile
// (deploy/coredns.yaml) and kubeadm's default Corefile use, and no other:
// the released binary's default set (clouds, tracing, dnstap, geoip, ...)
// is most of its build, which the harness does from source on every cold
// machine. The harness's cached build (test/cluster/harness/kubebuild) builds it; the image keeps
// upstream's name.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// The plugins' order in a server block is CoreDNS's (core/dnsserver's
// generated Directives), restricted to those linked in; a Corefile that
// names another plugin is refused when it is loaded.
func init() {
	dnsserver.Directives = []string{
		"reload", "ready", "health", "prometheus", "errors", "log",
		"loadbalance", "cache", "hosts", "kubernetes", "loop", "forward",
	}
}

func main() { coremain.Run() }
