// Command ovsflow-conflist renders a node's conflist from a template (see
// pkg/conflist) for a node without the node agent: deploy/install-cni.sh
// runs it with the node's pod CIDRs (conflist.RenderStatic).
//
//	ovsflow-conflist -pod-cidrs 198.51.100.0/26,2001:db8:10:1::/64 < template > conflist
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
	"github.com/ovsflow/ovs-cni/pkg/conflist"
)

func main() {
	cidrs := flag.String("pod-cidrs", "", "the node's pod CIDRs, comma-separated (IPv4 and/or IPv6)")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("ovsflow-conflist " + buildinfo.Version)
		return
	}
	prefixes, err := conflist.ParseCIDRs(*cidrs)
	if err == nil {
		var in []byte
		if in, err = io.ReadAll(os.Stdin); err == nil {
			var out []byte
			if out, err = conflist.RenderStatic(in, prefixes); err == nil {
				_, err = os.Stdout.Write(out)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ovsflow-conflist:", err)
		os.Exit(1)
	}
}
