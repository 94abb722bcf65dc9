package resilience

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// Codes of the CNI spec (pkg/types): 4 invalid environment variables, 6
// decoding failure, 7 invalid network config, 11 try again later.
const (
	codeEnv    = types.ErrInvalidEnvironmentVariables
	codeDecode = types.ErrDecodingFailure
	codeConfig = types.ErrInvalidNetworkConfig
	codeAgain  = types.ErrTryAgainLater
	accepted   = ^uint(0) // the input is valid: ADD succeeds (and DEL cleans up)
)

// invokePlugin runs one plugin command as a runtime does: CNI_* variables in
// the environment, the config on stdin.
func invokePlugin(x *pluginExec, plugin, command string, stdin []byte, env map[string]string) ([]byte, error) {
	environ := os.Environ()
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	environ = append(environ, "CNI_COMMAND="+command, "CNI_PATH="+binDir)
	return x.ExecPlugin(context.Background(), filepath.Join(binDir, plugin), stdin, environ)
}

// Hostile strings: shell metacharacters (each would create the canary file
// if it ever reached a shell), OVSDB JSON-RPC and OpenFlow syntax.
func hostileStrings(canary string) []string {
	return []string{
		"$(touch " + canary + ")",
		"`touch " + canary + "`",
		"x; touch " + canary,
		"x | touch " + canary,
		"x && touch " + canary + " #",
		`x"},{"op":"delete","table":"Bridge","where":[]}]`,
		`x","external_ids":{"ovsflow.io/owner":"ovsflow-cni"}`,
		"x,actions=drop",
		"priority=65535,actions=drop\ntable=0",
		"x\x00y",
		"../../../../etc/passwd",
	}
}

// A table of malformed and hostile inputs, fed to the real binaries: each
// gets the right CNI error code and a message naming the field, in bounded
// time, and leaves nothing behind; no input string ever reaches a shell.
func TestMalformedInput(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	dataDir := t.TempDir()
	const network = "mal"
	canary := filepath.Join(t.TempDir(), "pwned")
	x := &pluginExec{}
	au := audit{n: node{db: ovsdbAddr, bridge: h.Bridge}, dataDir: dataDir, netw: network, subnets: testSubnets,
		allVethsAreOurs: true}

	bridgeBase := func() map[string]any {
		return map[string]any{"cniVersion": "1.0.0", "name": network, "type": "ovs-bridge", "bridge": h.Bridge,
			"ovsdb": ovsdbAddr, "isGateway": true, "ipam": map[string]any{"type": "host-local", "dataDir": dataDir,
				"ranges": []any{[]any{map[string]any{"subnet": "192.0.2.0/24", "gateway": "192.0.2.1"}},
					[]any{map[string]any{"subnet": "2001:db8:c::/64", "gateway": "2001:db8:c::1"}}}}}
	}
	goodMapping := func() []any { return []any{pm(8080, 80, "tcp", "")} }
	// prevResult of ovs-portmap cases that fail before reading the node.
	fakePrev := map[string]any{"cniVersion": "1.0.0",
		"interfaces": []any{map[string]any{"name": "eth0", "sandbox": "/var/run/netns/x", "mac": "02:00:00:00:00:07"}},
		"ips":        []any{map[string]any{"address": "192.0.2.250/24", "interface": 0}}}
	portmapBase := func() map[string]any {
		return map[string]any{"cniVersion": "1.0.0", "name": network, "type": "ovs-portmap", "ovsdb": ovsdbAddr,
			"runtimeConfig": map[string]any{"portMappings": goodMapping()}, "prevResult": fakePrev}
	}
	with := func(base func() map[string]any, path string, v any) func() []byte {
		return func() []byte {
			m := base()
			keys := strings.Split(path, ".")
			cur := m
			for _, k := range keys[:len(keys)-1] {
				next, ok := cur[k].(map[string]any)
				if !ok {
					next = map[string]any{}
					cur[k] = next
				}
				cur = next
			}
			cur[keys[len(keys)-1]] = v
			b, err := json.Marshal(m)
			if err != nil {
				panic(err)
			}
			return b
		}
	}
	raw := func(s string) func() []byte { return func() []byte { return []byte(s) } }
	many := func(n int, f func(i int) any) []any {
		l := make([]any, n)
		for i := range l {
			l[i] = f(i)
		}
		return l
	}
	mesos := func(entries []any) map[string]any {
		return map[string]any{"org.apache.mesos": map[string]any{"network_info": map[string]any{"port_mappings": entries}}}
	}
	mp := func(m ...map[string]any) []any {
		l := make([]any, len(m))
		for i := range m {
			l[i] = m[i]
		}
		return l
	}

	type tc struct {
		name    string
		plugin  string
		stdin   func() []byte
		env     map[string]string // CNI_* overrides
		code    uint
		msg     []string // the message names these (case-insensitively)
		chained bool     // ovs-portmap after a real ovs-bridge ADD (stdin is the ovs-portmap part)
	}
	B, P := "ovs-bridge", "ovs-portmap"
	cases := []tc{
		// Not JSON, not an object.
		{"bridge: invalid JSON", B, raw(`{"cniVersion":"1.0.0","name":`), nil, codeDecode, nil, false},
		{"bridge: JSON array", B, raw(`[1,2,3]`), nil, codeDecode, nil, false},
		{"bridge: empty stdin", B, raw(``), nil, codeDecode, nil, false},
		{"portmap: invalid JSON", P, raw(`{"cniVersion":"1.0.0","name":"mal","type":"ovs-portmap",,}`), nil, codeDecode, nil, false},
		{"portmap: truncated 100k mappings", P, func() []byte {
			b := with(portmapBase, "runtimeConfig.portMappings", many(100000, func(i int) any { return pm(1+i%65535, 80, "tcp", "") }))()
			return b[:len(b)/2]
		}, nil, codeDecode, nil, false},
		// Wrong types: code 6 naming the key.
		{"bridge: bridge is a number", B, with(bridgeBase, "bridge", 5), nil, codeDecode, []string{"bridge"}, false},
		{"bridge: mtu is a string", B, with(bridgeBase, "mtu", "1500"), nil, codeDecode, []string{"mtu"}, false},
		{"bridge: vlan is a bool", B, with(bridgeBase, "vlan", true), nil, codeDecode, []string{"vlan"}, false},
		{"bridge: trunk is an object", B, with(bridgeBase, "trunk", map[string]any{}), nil, codeDecode, []string{"trunk"}, false},
		{"bridge: trunk id is a string", B, with(bridgeBase, "trunk", []any{map[string]any{"id": "10"}}), nil, codeDecode, []string{"id"}, false},
		{"bridge: isGateway is a string", B, with(bridgeBase, "isGateway", "yes"), nil, codeDecode, []string{"isGateway"}, false},
		{"bridge: portSecurity is a string", B, with(bridgeBase, "portSecurity", "off"), nil, codeDecode, []string{"portSecurity"}, false},
		{"bridge: ipam is a string", B, with(bridgeBase, "ipam", "host-local"), nil, codeDecode, []string{"ipam"}, false},
		{"bridge: runtimeConfig.mac is a number", B, with(bridgeBase, "runtimeConfig", map[string]any{"mac": 5}), nil, codeDecode, []string{"mac"}, false},
		{"bridge: Mesos host_port is a string", B, with(bridgeBase, "args", mesos(mp(map[string]any{"host_port": "80", "container_port": 80}))), nil, codeDecode, []string{"host_port"}, false},
		{"portmap: snat is a string", P, with(portmapBase, "snat", "yes"), nil, codeDecode, []string{"snat"}, false},
		{"portmap: hostIPs is a string", P, with(portmapBase, "hostIPs", nodeV4), nil, codeDecode, []string{"hostIPs"}, false},
		{"portmap: dnatZone is a string", P, with(portmapBase, "dnatZone", "64000"), nil, codeDecode, []string{"dnatZone"}, false},
		{"portmap: portMappings is an object", P, with(portmapBase, "runtimeConfig.portMappings", map[string]any{}), nil, codeDecode, []string{"portMappings"}, false},
		{"portmap: hostPort is a string", P, with(portmapBase, "runtimeConfig.portMappings", []any{map[string]any{"hostPort": "8080", "containerPort": 80}}), nil, codeDecode, []string{"hostPort"}, false},
		{"portmap: hostPort is a float", P, with(portmapBase, "runtimeConfig.portMappings", []any{map[string]any{"hostPort": 80.5, "containerPort": 80}}), nil, codeDecode, []string{"hostPort"}, false},
		{"portmap: hostPort is 2^64", P, raw(`{"cniVersion":"1.0.0","name":"mal","type":"ovs-portmap","runtimeConfig":{"portMappings":[{"hostPort":18446744073709551616,"containerPort":80}]}}`), nil, codeDecode, []string{"hostPort"}, false},
		{"portmap: prevResult is a string", P, with(portmapBase, "prevResult", "x"), nil, codeDecode, []string{"prevResult"}, false},
		{"portmap: prevResult address is not an IP", P, with(portmapBase, "prevResult", map[string]any{"cniVersion": "1.0.0",
			"ips": []any{map[string]any{"address": "192.0.2.300/24"}}}), nil, codeDecode, []string{"prevResult"}, false},
		// Huge inputs.
		{"portmap: 100k mappings", P, with(portmapBase, "runtimeConfig.portMappings", many(100000, func(i int) any { return pm(1+i%65535, 80, "tcp", "") })),
			nil, codeConfig, []string{"runtimeConfig.portMappings", "100000"}, false},
		{"portmap: 100k Mesos mappings", P, func() []byte {
			m := portmapBase()
			delete(m, "runtimeConfig")
			m["args"] = mesos(many(100000, func(i int) any { return map[string]any{"host_port": 1 + i%65535, "container_port": 80} }))
			b, _ := json.Marshal(m)
			return b
		}, nil, codeConfig, []string{"port_mappings", "100000"}, false},
		{"bridge: 100k Mesos mappings", B, with(bridgeBase, "args", mesos(many(100000, func(i int) any { return map[string]any{"host_port": 1 + i%65535, "container_port": 80} }))),
			nil, codeConfig, []string{"port_mappings", "100000"}, false},
		{"bridge: 100k trunk entries, the last one bad", B, with(bridgeBase, "trunk", many(100000, func(i int) any {
			if i == 99999 {
				return map[string]any{"id": 5000}
			}
			return map[string]any{"id": 1 + i%4094}
		})), nil, codeConfig, []string{"trunk", "5000"}, false},
		{"bridge: 100k full trunk ranges, the last one bad", B, with(bridgeBase, "trunk", many(100000, func(i int) any {
			if i == 99999 {
				return map[string]any{"minID": 0, "maxID": 4094}
			}
			return map[string]any{"minID": 1, "maxID": 4094}
		})), nil, codeConfig, []string{"trunk"}, false},
		{"portmap: 100k hostIPs, one bad", P, with(portmapBase, "hostIPs", many(100000, func(i int) any {
			if i == 99999 {
				return "0.0.0.0"
			}
			return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
		})), nil, codeConfig, []string{"hostIPs"}, false},
		{"portmap: 1 MB string in protocol", P, with(portmapBase, "runtimeConfig.portMappings", []any{pm(8080, 80, strings.Repeat("u", 1<<20), "")}), nil, codeConfig, []string{"protocol"}, false},
		// Duplicates.
		{"portmap: host port mapped twice", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "tcp", ""), pm(8080, 81, "tcp", ""))), nil, codeConfig, []string{"runtimeConfig.portMappings[1]", "mapped twice"}, false},
		{"bridge: Mesos host port mapped twice", B, with(bridgeBase, "args", mesos(mp(map[string]any{"host_port": 8080, "container_port": 80}, map[string]any{"host_port": 8080, "container_port": 81}))), nil, codeConfig, []string{"mapped twice"}, false},
		// Ports 0, 65536, -1.
		{"portmap: hostPort 0", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(0, 80, "tcp", ""))), nil, codeConfig, []string{"hostPort 0"}, false},
		{"portmap: hostPort 65536", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(65536, 80, "tcp", ""))), nil, codeConfig, []string{"hostPort 65536"}, false},
		{"portmap: hostPort -1", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(-1, 80, "tcp", ""))), nil, codeConfig, []string{"hostPort -1"}, false},
		{"portmap: containerPort 0", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 0, "tcp", ""))), nil, codeConfig, []string{"containerPort 0"}, false},
		{"portmap: containerPort 65536", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 65536, "tcp", ""))), nil, codeConfig, []string{"containerPort 65536"}, false},
		{"portmap: containerPort -1", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, -1, "tcp", ""))), nil, codeConfig, []string{"containerPort -1"}, false},
		{"bridge: Mesos host_port -1", B, with(bridgeBase, "args", mesos(mp(map[string]any{"host_port": -1, "container_port": 80}))), nil, codeConfig, []string{"hostPort -1"}, false},
		{"bridge: Mesos container_port 65536", B, with(bridgeBase, "args", mesos(mp(map[string]any{"host_port": 80, "container_port": 65536}))), nil, codeConfig, []string{"containerPort 65536"}, false},
		{"portmap: dnatZone 0", P, with(portmapBase, "dnatZone", 0), nil, codeConfig, []string{"dnatZone"}, false},
		{"portmap: snatZone 65536", P, with(portmapBase, "snatZone", 65536), nil, codeConfig, []string{"snatZone"}, false},
		{"portmap: dnatZone = snatZone", P, with(portmapBase, "snatZone", 64000), nil, codeConfig, []string{"dnatZone", "snatZone"}, false},
		{"bridge: mtu -1", B, with(bridgeBase, "mtu", -1), nil, codeConfig, []string{"mtu"}, false},
		{"bridge: mtu 65536", B, with(bridgeBase, "mtu", 65536), nil, codeConfig, []string{"mtu"}, false},
		{"bridge: vlan 0", B, with(bridgeBase, "vlan", 0), nil, codeConfig, []string{"vlan"}, false},
		{"bridge: vlan 4095", B, with(bridgeBase, "vlan", 4095), nil, codeConfig, []string{"vlan"}, false},
		{"bridge: vlan -1", B, with(bridgeBase, "vlan", -1), nil, codeConfig, []string{"vlan"}, false},
		// Names.
		{"bridge: name of 16 characters", B, with(bridgeBase, "bridge", "abcdefghijklmnop"), nil, codeConfig, []string{`"bridge"`}, false},
		{"bridge: name of 1000 characters", B, with(bridgeBase, "bridge", strings.Repeat("b", 1000)), nil, codeConfig, []string{`"bridge"`}, false},
		{"bridge: empty name", B, with(bridgeBase, "bridge", ""), nil, codeConfig, []string{`"bridge"`}, false},
		{"bridge: ovsdb ssl endpoint", B, with(bridgeBase, "ovsdb", "ssl:127.0.0.1:6640"), nil, codeConfig, []string{`"ovsdb"`}, false},
		{"bridge: ovsdb unix: without a path", B, with(bridgeBase, "ovsdb", "unix:"), nil, codeConfig, []string{`"ovsdb"`}, false},
		{"bridge: ovsdb tcp port with OpenFlow syntax", B, with(bridgeBase, "ovsdb", "tcp:127.0.0.1:6640,actions=drop"), nil, codeConfig, []string{`"ovsdb"`}, false},
		{"bridge: ovsdb socket that does not exist", B, with(bridgeBase, "ovsdb", "unix:/run/ovsflow/none/db.sock"), nil, codeAgain, []string{"ovsdb"}, false},
		{"bridge: datapathType dpdk", B, with(bridgeBase, "datapathType", "dpdk"), nil, codeConfig, []string{"datapathType"}, false},
		{"portmap: protocol icmp", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "icmp", ""))), nil, codeConfig, []string{"protocol"}, false},
		{"portmap: protocol tcp6", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "tcp6", ""))), nil, codeConfig, []string{"protocol"}, false},
		{"portmap: hostIP with a zone", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "tcp", "fe80::1%eth0"))), nil, codeConfig, []string{"hostIP"}, false},
		{"portmap: hostIP CIDR", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "tcp", "198.51.100.0/24"))), nil, codeConfig, []string{"hostIP"}, false},
		{"portmap: hostIPs ::", P, with(portmapBase, "hostIPs", []any{"::"}), nil, codeConfig, []string{"hostIPs"}, false},
		{"portmap: openflow relative path", P, with(portmapBase, "openflow", "unix:br0.mgmt"), nil, codeConfig, []string{`"openflow"`}, false},
		{"portmap: backend iptables", P, with(portmapBase, "backend", "iptables"), nil, codeConfig, []string{`"backend"`}, false},
		{"portmap: markMasqBit", P, with(portmapBase, "markMasqBit", 13), nil, codeConfig, []string{"markMasqBit"}, false},
		{"portmap: prevResult with a null interface", P, with(portmapBase, "prevResult", map[string]any{"cniVersion": "1.0.0",
			"interfaces": []any{nil}, "ips": []any{map[string]any{"address": "192.0.2.250/24"}}}), nil, codeDecode, []string{"prevResult"}, false},
		{"portmap: prevResult with a null IP", P, with(portmapBase, "prevResult", map[string]any{"cniVersion": "1.0.0", "ips": []any{nil}}), nil, codeDecode, []string{"prevResult"}, false},
		{"portmap: no prevResult", P, func() []byte { m := portmapBase(); delete(m, "prevResult"); b, _ := json.Marshal(m); return b }, nil, codeConfig, []string{"prevResult"}, false},
		// CNI_ARGS and the environment.
		{"bridge: CNI_ARGS pair without =", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_ARGS": "MAC=02:00:00:00:00:01;touch"}, codeConfig, []string{"CNI_ARGS"}, false},
		{"bridge: CNI_ARGS MAC of 7 bytes", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_ARGS": "MAC=02:00:00:00:00:01:02"}, codeConfig, []string{"mac"}, false},
		{"bridge: CNI_ARGS multicast MAC", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_ARGS": "MAC=01:00:5e:00:00:01"}, codeConfig, []string{"mac"}, false},
		{"bridge: runtimeConfig broadcast MAC", B, with(bridgeBase, "runtimeConfig", map[string]any{"mac": "ff:ff:ff:ff:ff:ff"}), nil, codeConfig, []string{"mac"}, false},
		{"bridge: args.cni.mac not a MAC", B, with(bridgeBase, "args", map[string]any{"cni": map[string]any{"mac": "nope"}}), nil, codeConfig, []string{"mac"}, false},
		{"bridge: ifname with whitespace", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_IFNAME": "eth0 x"}, codeEnv, []string{"interface"}, false},
		{"bridge: ifname of 16 characters", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_IFNAME": "abcdefghijklmnop"}, codeEnv, []string{"interface"}, false},
		{"bridge: ifname ..", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_IFNAME": ".."}, codeEnv, []string{"interface"}, false},
		{"bridge: ifname with /", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_IFNAME": "a/b"}, codeEnv, []string{"interface"}, false},
		{"bridge: netns that does not exist", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_NETNS": "/var/run/netns/no-such-netns"}, 0, []string{"netns"}, false},
		// Accepted: valid inputs that look odd.
		{"bridge: ifname with shell metacharacters is a valid Linux name", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_IFNAME": "e;$(x)`y`"}, accepted, nil, false},
		{"bridge: CNI_ARGS with unknown keys and IgnoreUnknown", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_ARGS": "IgnoreUnknown=1;K8S_POD_NAME=a;b=$(touch " + canary + ")"}, accepted, nil, false},
		{"portmap: the same mapping twice", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "tcp", ""), pm(8080, 80, "TCP", ""))), nil, accepted, nil, true},
		{"portmap: IPv4-mapped IPv6 hostIP", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "tcp", "::ffff:"+nodeV4))), nil, accepted, nil, true},
		{"portmap: IPv4-mapped IPv6 in hostIPs", P, with(portmapBase, "hostIPs", []any{"::ffff:" + nodeV4}), nil, accepted, nil, true},
		// Chained, against the node: a hostIP that is not a node address.
		{"portmap: hostIP not a node address", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "tcp", "203.0.113.9"))), nil, codeConfig, []string{"hostIP", "203.0.113.9"}, true},
		{"portmap: IPv4-mapped hostIP not a node address", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "tcp", "::ffff:203.0.113.9"))), nil, codeConfig, []string{"hostIP"}, true},
	}
	// Hostile strings in every string field.
	for i, s := range hostileStrings(canary) {
		add := func(name, plugin string, stdin func() []byte, env map[string]string, code uint, msg ...string) {
			for _, v := range env {
				if strings.ContainsRune(v, 0) {
					return // an environment variable cannot hold NUL
				}
			}
			cases = append(cases, tc{fmt.Sprintf("%s #%d", name, i), plugin, stdin, env, code, msg, false})
		}
		add("bridge: hostile bridge", B, with(bridgeBase, "bridge", s), nil, codeConfig, `"bridge"`)
		add("bridge: hostile ovsdb", B, with(bridgeBase, "ovsdb", s), nil, codeConfig, `"ovsdb"`)
		add("bridge: hostile openflow", B, with(bridgeBase, "openflow", s), nil, codeConfig, `"openflow"`)
		add("bridge: hostile datapathType", B, with(bridgeBase, "datapathType", s), nil, codeConfig, "datapathType")
		add("bridge: hostile runtimeConfig.mac", B, with(bridgeBase, "runtimeConfig", map[string]any{"mac": s}), nil, codeConfig, "mac")
		add("bridge: hostile CNI_ARGS MAC", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_ARGS": "MAC=" + s}, codeConfig)
		add("bridge: hostile Mesos protocol", B, with(bridgeBase, "args", mesos(mp(map[string]any{"host_port": 80, "container_port": 80, "protocol": s}))), nil, codeConfig, "protocol")
		add("bridge: hostile container ID", B, with(bridgeBase, "cniVersion", "1.0.0"), map[string]string{"CNI_CONTAINERID": s}, codeEnv, "containerID")
		add("bridge: hostile logFile, bad bridge", B, func() []byte {
			return with(func() map[string]any { m := bridgeBase(); m["bridge"] = s; return m }, "logFile", filepath.Join(t.TempDir(), s))()
		}, nil, codeConfig, `"bridge"`)
		add("portmap: hostile ovsdb", P, with(portmapBase, "ovsdb", s), nil, codeConfig, `"ovsdb"`)
		add("portmap: hostile openflow", P, with(portmapBase, "openflow", s), nil, codeConfig, `"openflow"`)
		add("portmap: hostile hostIP", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, "tcp", s))), nil, codeConfig, "hostIP")
		add("portmap: hostile protocol", P, with(portmapBase, "runtimeConfig.portMappings", mp(pm(8080, 80, s, ""))), nil, codeConfig, "protocol")
		add("portmap: hostile hostIPs", P, with(portmapBase, "hostIPs", []any{s}), nil, codeConfig, "hostIPs")
		add("portmap: hostile backend", P, with(portmapBase, "backend", s), nil, codeConfig, `"backend"`)
		add("portmap: hostile container ID (DEL)", P, with(portmapBase, "cniVersion", "1.0.0"), map[string]string{"CNI_CONTAINERID": s}, codeEnv, "containerID")
	}

	used := map[string]attachment{}
	tried, good, valid, leaked := 0, 0, 0, 0
	var slowest time.Duration // a figure: how long the slowest answer took
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tried++
			ctr := framework.NewContainer(t)
			env := map[string]string{"CNI_CONTAINERID": ctr.ID, "CNI_NETNS": ctr.NS.Path(), "CNI_IFNAME": "eth0"}
			for k, v := range c.env {
				env[k] = v
			}
			a := attachment{id: env["CNI_CONTAINERID"], ifname: env["CNI_IFNAME"]}
			used[a.key()] = a
			stdin := c.stdin()
			var prevResult map[string]any
			if c.chained {
				out, err := invokePlugin(x, B, "ADD", must(json.Marshal(bridgeBase())), env)
				if err != nil {
					t.Fatalf("ovs-bridge ADD: %v", err)
				}
				json.Unmarshal(out, &prevResult)
				var m map[string]any
				json.Unmarshal(stdin, &m)
				m["prevResult"] = prevResult
				stdin = must(json.Marshal(m))
			}
			command := "ADD"
			if strings.HasSuffix(c.name, "(DEL)") || strings.Contains(c.name, "(DEL) #") {
				command = "DEL"
			}
			x.takeLog()
			start := time.Now()
			out, err := invokePlugin(x, c.plugin, command, stdin, env)
			slowest = max(slowest, time.Since(start))
			// It answers: the harness's hang guard (hangAfter) did not fire.
			for _, inv := range x.takeLog() {
				if inv.Hung {
					t.Errorf("%s: %s %s hung (no exit %s after it started); its goroutines:\n%s", command, inv.Plugin, inv.Command, hangAfter, inv.Stderr)
				}
			}
			if c.code == accepted {
				valid++
				if err != nil {
					t.Errorf("%s: got %v, want success", command, err)
				}
				if c.chained {
					r, _ := current.NewResult(out)
					t.Logf("result %v", r)
				}
			} else {
				code := cniCode(err)
				if err == nil || (c.code != 0 && code != c.code) {
					t.Errorf("%s: got %v (code %d), want code %d", command, err, code, c.code)
				} else {
					good++
				}
				for _, m := range c.msg {
					if err != nil && !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(m)) {
						t.Errorf("%s: message %q does not name %s", command, err, m)
					}
				}
			}
			if c.chained && c.code != accepted {
				// ovs-portmap's failure left nothing of its own on the port.
				for _, row := range au.n.rows(t, "Port") {
					if row.ExternalIDs["ovsflow.io/container-id"] != a.id {
						continue
					}
					for k := range row.ExternalIDs {
						if strings.HasPrefix(k, "ovsflow.io/claim/") || k == "ovsflow.io/portmap" {
							t.Errorf("after the failed ADD: port %s has %s", row.Name, k)
						}
					}
				}
			}
			if c.chained || c.code == accepted {
				// The runtime's DEL, with a valid config.
				if c.chained {
					if _, err := invokePlugin(x, P, "DEL", must(json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": network, "type": P, "ovsdb": ovsdbAddr})), env); err != nil {
						t.Errorf("ovs-portmap DEL: %v", err)
					}
				}
				if _, err := invokePlugin(x, B, "DEL", must(json.Marshal(bridgeBase())), env); err != nil {
					t.Errorf("ovs-bridge DEL: %v", err)
				}
			}
			a.ips = nil
			if r := au.run(t, map[string]attachment{a.key(): a}, nil); len(r.leaked) > 0 {
				leaked += len(r.leaked)
				t.Errorf("left behind: %s", r)
				cleanupAttachment(t, au.n, a)
			}
		})
	}
	// ovs-bridge's CHECK reads the prevResult's interfaces too.
	t.Run("bridge CHECK: prevResult with a null interface", func(t *testing.T) {
		tried++
		ctr := framework.NewContainer(t)
		env := map[string]string{"CNI_CONTAINERID": ctr.ID, "CNI_NETNS": ctr.NS.Path(), "CNI_IFNAME": "eth0"}
		a := attachment{id: ctr.ID, ifname: "eth0"}
		used[a.key()] = a
		conf := bridgeBase()
		out, err := invokePlugin(x, B, "ADD", must(json.Marshal(conf)), env)
		if err != nil {
			t.Fatalf("ADD: %v", err)
		}
		var prev map[string]any
		json.Unmarshal(out, &prev)
		prev["interfaces"] = append([]any{nil}, prev["interfaces"].([]any)...)
		conf["prevResult"] = prev
		_, err = invokePlugin(x, B, "CHECK", must(json.Marshal(conf)), env)
		if cniCode(err) != codeDecode || !strings.Contains(err.Error(), "prevResult") {
			t.Errorf("CHECK: got %v (code %d), want code %d naming prevResult", err, cniCode(err), codeDecode)
		} else {
			good++
		}
		if _, err := invokePlugin(x, B, "DEL", must(json.Marshal(bridgeBase())), env); err != nil {
			t.Errorf("DEL: %v", err)
		}
		if r := au.run(t, map[string]attachment{a.key(): a}, nil); len(r.leaked) > 0 {
			leaked += len(r.leaked)
			t.Errorf("left behind: %s", r)
			cleanupAttachment(t, au.n, a)
		}
	})
	if _, err := os.Stat(canary); err == nil {
		t.Errorf("the canary %s exists: an input string reached a shell", canary)
	}
	if r := au.run(t, used, nil); len(r.leaked) > 0 {
		t.Errorf("after all cases: %s", r)
	}
	framework.Figure(t, "malformed", "tried", tried, "rejected_as_expected", good, "valid_accepted", valid, "wrong", tried-good-valid, "leaked", leaked,
		"slowest_answer_ms", slowest.Milliseconds())
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
