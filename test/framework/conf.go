package framework

// Conflist builds a network configuration list.
func Conflist(version, name string, plugins ...map[string]any) map[string]any {
	ps := make([]any, len(plugins))
	for i, p := range plugins {
		ps[i] = p
	}
	return map[string]any{"cniVersion": version, "name": name, "plugins": ps}
}

// PM is one runtimeConfig.portMappings entry.
func PM(hostPort, containerPort int, proto, hostIP string) map[string]any {
	return map[string]any{"hostPort": hostPort, "containerPort": containerPort, "protocol": proto, "hostIP": hostIP}
}

// Mappings is the portMappings capability argument of the entries m.
func Mappings(m ...map[string]any) map[string]any {
	l := make([]any, len(m))
	for i := range m {
		l[i] = m[i]
	}
	return map[string]any{"portMappings": l}
}

// Limits is the bandwidth capability argument.
func Limits(ingressRate, ingressBurst, egressRate, egressBurst int) map[string]any {
	return map[string]any{"bandwidth": map[string]any{"ingressRate": ingressRate, "ingressBurst": ingressBurst,
		"egressRate": egressRate, "egressBurst": egressBurst}}
}

// BridgeConf is an ovs-bridge entry on OVSDB db with host-local IPAM on the
// documentation ranges (192.0.2.0/24, 2001:db8:c::/64); extra keys override, nil ones delete.
func BridgeConf(br, db, dataDir string, extra map[string]any) map[string]any {
	c := map[string]any{
		"type": "ovs-bridge", "bridge": br, "ovsdb": db,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": dataDir,
			"ranges": []any{
				[]any{map[string]any{"subnet": "192.0.2.0/24", "gateway": "192.0.2.1"}},
				[]any{map[string]any{"subnet": "2001:db8:c::/64", "gateway": "2001:db8:c::1"}},
			},
			"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
		},
	}
	return Override(c, extra)
}

// PortmapConf is an ovs-portmap entry on OVSDB db; extra keys override, nil ones delete.
func PortmapConf(db string, extra map[string]any) map[string]any {
	return Override(map[string]any{"type": "ovs-portmap", "ovsdb": db, "capabilities": map[string]bool{"portMappings": true}}, extra)
}

// BandwidthConf is an ovs-bandwidth entry on OVSDB db; extra keys override, nil ones delete.
func BandwidthConf(db string, extra map[string]any) map[string]any {
	return Override(map[string]any{"type": "ovs-bandwidth", "ovsdb": db, "capabilities": map[string]bool{"bandwidth": true}}, extra)
}

// Override sets extra's keys in c, deleting those whose value is nil, and
// returns c.
func Override(c, extra map[string]any) map[string]any {
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}
