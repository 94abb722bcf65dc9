// Package conflist renders a node's conflist from a template and the node's
// pod CIDRs: every host-local IPAM section gets one range per CIDR, gateway
// the CIDR's first address, and keeps only the routes of the families the
// node has. The node agent (pkg/agent) renders it from the Node's
// spec.podCIDRs; deploy/install-cni.sh runs it (cmd/ovsflow-conflist) where
// there is no agent.
package conflist

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
)

// ParseCIDRs reads a comma-separated list of network prefixes: each in its
// canonical form (no host bits), with room for a gateway and one pod.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
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

// Render rewrites the template's host-local IPAM sections for prefixes.
func Render(template []byte, prefixes []netip.Prefix) ([]byte, error) {
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
