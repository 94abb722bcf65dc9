package unixctl

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Trace runs ofproto/trace on bridge for flow (ovs-ofctl flow syntax) and
// returns its text. ctNext gives, in turn, the ct_state each
// recirculation after a ct action resumes with ("trk,new", "trk,est,rpl";
// --ct-next); the recirculations past them resume with trk|new, as
// ofproto/trace's default.
func Trace(ctx context.Context, sock, bridge, flow string, ctNext ...string) (string, error) {
	args := []string{bridge, flow}
	for _, s := range ctNext {
		args = append(args, "--ct-next", s)
	}
	return call(ctx, sock, "ofproto/trace", args...)
}

// ZoneCount is the conntrack entries of one zone and the zone's limit (0: no
// limit of its own; the datapath's default applies).
type ZoneCount struct {
	Zone         uint16
	Count, Limit uint32
}

// ZoneCounts reads the conntrack entries and limit of each zone
// (dpctl/ct-get-limits) on the only datapath of the ovs-vswitchd whose
// control socket is sock, or on datapath dp when it is given.
func ZoneCounts(ctx context.Context, sock, dp string, zones ...uint16) ([]ZoneCount, error) {
	var args []string
	if dp != "" {
		args = append(args, dp)
	}
	if len(zones) > 0 {
		zs := make([]string, len(zones))
		for i, z := range zones {
			zs[i] = strconv.Itoa(int(z))
		}
		args = append(args, "zone="+strings.Join(zs, ","))
	}
	out, err := call(ctx, sock, "dpctl/ct-get-limits", args...)
	if err != nil {
		return nil, err
	}
	return ParseZoneCounts(out)
}

// ParseZoneCounts reads dpctl/ct-get-limits' lines
// "zone=64000,limit=65536,count=3"; the "default limit=N" line is skipped.
func ParseZoneCounts(out string) ([]ZoneCount, error) {
	var zs []ZoneCount
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "zone=") {
			continue
		}
		var z ZoneCount
		for _, kv := range strings.Split(line, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("dpctl/ct-get-limits line %q: %w", line, err)
			}
			switch k {
			case "zone":
				if n > 0xffff {
					return nil, fmt.Errorf("dpctl/ct-get-limits line %q: zone out of range", line)
				}
				z.Zone = uint16(n)
			case "limit":
				z.Limit = uint32(n)
			case "count":
				z.Count = uint32(n)
			}
		}
		zs = append(zs, z)
	}
	return zs, nil
}

// Datapaths lists the datapaths of the ovs-vswitchd whose control socket is
// sock (dpctl/dump-dps: "netdev@ovs-netdev", "system@ovs-system").
func Datapaths(ctx context.Context, sock string) ([]string, error) {
	out, err := call(ctx, sock, "dpctl/dump-dps")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// LearnedPort returns the port bridge's MAC learning table holds mac on,
// on VLAN vlan (fdb/show): an OpenFlow port number or LOCAL, which NORMAL
// sends a frame to mac to; "" when it holds none.
func LearnedPort(ctx context.Context, sock, bridge string, mac net.HardwareAddr, vlan uint16) (string, error) {
	out, err := call(ctx, sock, "fdb/show", bridge)
	if err != nil {
		return "", err
	}
	return ParseLearnedPort(out, mac, vlan), nil
}

// ParseLearnedPort reads fdb/show's table (" port  VLAN  MAC  Age") for
// mac on vlan.
func ParseLearnedPort(out string, mac net.HardwareAddr, vlan uint16) string {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != strconv.Itoa(int(vlan)) {
			continue
		}
		if m, err := net.ParseMAC(f[2]); err == nil && m.String() == mac.String() {
			return f[0]
		}
	}
	return ""
}
