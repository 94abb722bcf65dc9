package hostport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// Loopback host ports (flows.HostPorts.Loopback). A node process that
// connects to 127.0.0.1:hostPort is translated by chain output to the
// container; the packet keeps its source 127.0.0.1 until chain postrouting
// masquerades it, and the kernel routes it out of the bridge's internal
// interface only when route_localnet is on there (without it, 127.0.0.0/8
// is martian off lo, and the reply, 127.0.0.1 again once conntrack undoes
// the masquerade, would be dropped on the way in as well). route_localnet
// is turned on for that one interface, never for "all"; it is turned on
// only once the guards of table ip ovsflow_hostport are in (they are
// declared in the same netlink batch as the localhost map whose elements
// must be in first), so that the interface never accepts what
// CVE-2020-8558 is about: a packet to 127.0.0.0/8 from the wire. The guards
// drop, on every interface but lo, a packet that arrives to or from
// 127.0.0.0/8 (prerouting, before conntrack) and one that would leave from
// it untranslated (postrouting, after NAT): what the kernel drops as
// martian without route_localnet, on every interface whatever its setting.
// IPv6 has no such switch, and drops ::1 off lo always: ::1 is not served.

// routeLocalnet is the sysctl of interface name.
func routeLocalnet(name string) string {
	return filepath.Join("/proc/sys/net/ipv4/conf", name, "route_localnet")
}

// routeLocalnetOn reads route_localnet of interface name.
func routeLocalnetOn(name string) (bool, error) {
	cur, err := os.ReadFile(routeLocalnet(name))
	if err != nil {
		return false, fmt.Errorf("route_localnet of bridge interface %q: %w", name, err)
	}
	return strings.TrimSpace(string(cur)) != "0", nil
}

// setRouteLocalnet sets route_localnet of interface name.
func setRouteLocalnet(name string, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	if err := os.WriteFile(routeLocalnet(name), []byte(v), 0o644); err != nil {
		return fmt.Errorf("route_localnet of bridge interface %q: %w", name, err)
	}
	return nil
}

// EnsureRouteLocalnet turns route_localnet on for the internal interface of
// bridge br, recording on br (record.KeyRouteLocalnet) that it did, first,
// so that uninstall turns it off again; an interface where it is on
// already (ours, or the operator's) is left as it is. Call it only once the
// guards are in (RebuildNodeLocal). Publish does the same, the record in
// its own transaction.
func EnsureRouteLocalnet(ctx context.Context, cli *ovsdb.Client, br *ovsdb.Bridge) error {
	on, err := routeLocalnetOn(br.Name)
	if err != nil || on {
		return err
	}
	if br.ExternalIDs[record.KeyRouteLocalnet] == "" {
		if err := cli.SetBridgeExternalIDs(ctx, br.UUID, map[string]string{record.KeyRouteLocalnet: "1"}); err != nil {
			return err
		}
	}
	return setRouteLocalnet(br.Name, true)
}

// ResetRouteLocalnet turns route_localnet off again for the internal
// interface of bridge br when br records that ovs-portmap turned it on
// (uninstall, before the guards go); ok reports whether it did. An
// interface that is gone is not an error.
func ResetRouteLocalnet(br ovsdb.Bridge) (ok bool, err error) {
	if br.ExternalIDs[record.KeyRouteLocalnet] == "" {
		return false, nil
	}
	if err := setRouteLocalnet(br.Name, false); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}
