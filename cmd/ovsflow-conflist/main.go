// Command ovsflow-conflist renders a node's conflist from a template: every
// host-local IPAM section of the template gets one range per pod CIDR of the
// node, with the CIDR's first address as the gateway, and keeps only the
// routes of the families the node has. deploy/install-cni.sh runs it on each
// pass with the node's pod CIDRs.
//
//	ovsflow-conflist -pod-cidrs 198.51.100.0/26,2001:db8:10:1::/64 < template > conflist
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/ovsflow/ovs-cni/pkg/buildinfo"
)

func main() {
	cidrs := flag.String("pod-cidrs", "", "the node's pod CIDRs, comma-separated (IPv4 and/or IPv6)")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("ovsflow-conflist " + buildinfo.Version)
		return
	}
	prefixes, err := parseCIDRs(*cidrs)
	if err == nil {
		var in []byte
		if in, err = io.ReadAll(os.Stdin); err == nil {
			var out []byte
			if out, err = render(in, prefixes); err == nil {
				_, err = os.Stdout.Write(out)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ovsflow-conflist:", err)
		os.Exit(1)
	}
}

// parseCIDRs reads a comma-separated list of network prefixes: each in its
// canonical form (no host bits), with room for a gateway and one pod.
func parseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("pod CIDR %q: %w", f, err)
		}
		if p.Masked() != p {
			return nil, fmt.Errorf("pod CIDR %q has host bits set (the network is %s)", f, p.Masked())
		}
		if p.Addr().BitLen()-p.Bits() < 2 {
			return nil, fmt.Errorf("pod CIDR %q is too small for a gateway and a pod", f)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no pod CIDR given (-pod-cidrs %q)", s)
	}
	return out, nil
}

// render rewrites the template's host-local IPAM sections for prefixes.
func render(template []byte, prefixes []netip.Prefix) ([]byte, error) {
	var conf map[string]any
	if err := json.Unmarshal(template, &conf); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	var ranges []any
	has := map[bool]bool{} // is4 -> present
	for _, p := range prefixes {
		ranges = append(ranges, []any{map[string]any{"subnet": p.String(), "gateway": p.Addr().Next().String()}})
		has[p.Addr().Is4()] = true
	}
	var ipams []map[string]any
	if plugins, ok := conf["plugins"].([]any); ok {
		for _, pl := range plugins {
			if m, ok := pl.(map[string]any); ok {
				if ipam, ok := m["ipam"].(map[string]any); ok {
					ipams = append(ipams, ipam)
				}
			}
		}
	} else if ipam, ok := conf["ipam"].(map[string]any); ok {
		ipams = append(ipams, ipam)
	}
	n := 0
	for _, ipam := range ipams {
		if ipam["type"] != "host-local" {
			continue
		}
		n++
		delete(ipam, "subnet") // the single-range form, superseded by ranges
		ipam["ranges"] = ranges
		if routes, ok := ipam["routes"].([]any); ok {
			kept := []any{}
			for _, r := range routes {
				dst, _ := r.(map[string]any)["dst"].(string)
				if p, err := netip.ParsePrefix(dst); err != nil || has[p.Addr().Is4()] {
					kept = append(kept, r)
				}
			}
			ipam["routes"] = kept
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("template: no host-local ipam section to render the pod CIDRs into")
	}
	out, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("rendering the conflist: %w", err)
	}
	return append(out, '\n'), nil
}
