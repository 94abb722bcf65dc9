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

	"github.com/ovsflow/ovs-cni/pkg/noderanges"
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
	return render(template, prefixes, false)
}

// RenderMTU is Render that also gives every ovs-bridge entry the pods'
// MTU mtu (the node agent's overlay: the uplink's less the tunnel's
// overhead), or keeps the template's where it is lower; 0 leaves the
// template's.
func RenderMTU(template []byte, prefixes []netip.Prefix, mtu int) ([]byte, error) {
	if mtu <= 0 {
		return Render(template, prefixes)
	}
	var conf map[string]any
	if err := json.Unmarshal(template, &conf); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	entries := []map[string]any{conf}
	if plugins, ok := conf["plugins"].([]any); ok {
		entries = nil
		for _, pl := range plugins {
			if m, ok := pl.(map[string]any); ok {
				entries = append(entries, m)
			}
		}
	}
	for _, m := range entries {
		if m["type"] != "ovs-bridge" {
			continue
		}
		if have, ok := m["mtu"].(float64); ok && have > 0 && int(have) <= mtu {
			continue
		}
		m["mtu"] = mtu
	}
	b, err := json.Marshal(conf)
	if err != nil {
		return nil, fmt.Errorf("rendering the conflist: %w", err)
	}
	return Render(b, prefixes)
}

// RenderStatic is Render for a node without the node agent
// (deploy/install-cni.sh, given the node's pod CIDRs): without the key by
// which ovs-bridge waits for the agent to confirm the ranges
// (noderanges.Key), as no agent would, and the ranges are the operator's.
func RenderStatic(template []byte, prefixes []netip.Prefix) ([]byte, error) {
	return render(template, prefixes, true)
}

func render(template []byte, prefixes []netip.Prefix, static bool) ([]byte, error) {
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
	type section struct {
		path string // where it is in the template, for errors
		ipam map[string]any
	}
	var ipams []section
	if plugins, ok := conf["plugins"].([]any); ok {
		for i, pl := range plugins {
			if m, ok := pl.(map[string]any); ok {
				if static && m["type"] == "ovs-bridge" {
					delete(m, noderanges.Key)
				}
				if ipam, ok := m["ipam"].(map[string]any); ok {
					ipams = append(ipams, section{fmt.Sprintf("plugins[%d].ipam", i), ipam})
				}
			}
		}
	} else if ipam, ok := conf["ipam"].(map[string]any); ok {
		ipams = append(ipams, section{"ipam", ipam})
	}
	n := 0
	for _, sec := range ipams {
		ipam := sec.ipam
		if ipam["type"] != "host-local" {
			continue
		}
		n++
		delete(ipam, "subnet") // the single-range form, superseded by ranges
		ipam["ranges"] = ranges
		if raw, ok := ipam["routes"]; ok {
			kept, err := keepRoutes(sec.path+".routes", raw, has)
			if err != nil {
				return nil, fmt.Errorf("template: %w", err)
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

// keepRoutes returns the entries of a host-local routes list (at path in
// the template) whose destination is of a family in has; an entry of
// another shape than {"dst": PREFIX, ...} is an error naming it.
func keepRoutes(path string, raw any, has map[bool]bool) ([]any, error) {
	routes, ok := raw.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: %s is not a list", path, jsonText(raw))
	}
	kept := []any{}
	for i, r := range routes {
		at := fmt.Sprintf("%s[%d]", path, i)
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: %s is not an object", at, jsonText(r))
		}
		v, ok := m["dst"]
		if !ok {
			return nil, fmt.Errorf("%s.dst: missing", at)
		}
		dst, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s.dst: %s is not a string", at, jsonText(v))
		}
		p, err := netip.ParsePrefix(dst)
		if err != nil {
			return nil, fmt.Errorf("%s.dst: %q is not a network prefix", at, dst)
		}
		if has[p.Addr().Is4()] {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// jsonText is v as the template spelled it (near enough, for an error).
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
