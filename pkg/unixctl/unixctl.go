// Package unixctl talks to ovs-vswitchd's control socket (the one
// ovs-appctl uses: <run dir>/ovs-vswitchd.<pid>.ctl, JSON-RPC 1.0) for the
// datapaths' conntrack zone limits, which neither OpenFlow nor OVSDB sets.
package unixctl

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/jsonrpc"
)

// ErrNoSocket says that the control socket of ovs-vswitchd could not be
// found from the given endpoint (a tcp: endpoint, or no pid file).
var ErrNoSocket = fmt.Errorf("no ovs-vswitchd control socket")

// Socket returns the control socket of the ovs-vswitchd whose OpenFlow
// management socket (unix:<run dir>/<bridge>.mgmt) is target.
func Socket(target string) (string, error) {
	e, err := endpoint.Parse(target)
	if err != nil || e.Network != "unix" {
		return "", fmt.Errorf("%w for %s", ErrNoSocket, target)
	}
	dir := filepath.Dir(e.Address)
	b, err := os.ReadFile(filepath.Join(dir, "ovs-vswitchd.pid"))
	if err != nil {
		return "", fmt.Errorf("%w in %s: %v", ErrNoSocket, dir, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return "", fmt.Errorf("%w in %s: pid file: %v", ErrNoSocket, dir, err)
	}
	return filepath.Join(dir, fmt.Sprintf("ovs-vswitchd.%d.ctl", pid)), nil
}

// call runs one unixctl command and returns its output.
func call(ctx context.Context, sock, command string, args ...string) (string, error) {
	c, err := jsonrpc.Dial(ctx, endpoint.Endpoint{Network: "unix", Address: sock})
	if err != nil {
		return "", fmt.Errorf("ovs-vswitchd control socket %s: %w", sock, err)
	}
	defer c.Close()
	if args == nil {
		args = []string{}
	}
	var out json.RawMessage
	if err := c.Call(ctx, command, args, &out); err != nil {
		return "", fmt.Errorf("ovs-vswitchd %s: %w", command, err)
	}
	var s string
	_ = json.Unmarshal(out, &s)
	return s, nil
}

// SetZoneLimits sets the conntrack entry limit of each zone on every
// datapath of the ovs-vswitchd behind target (0: no limit). The limits live
// in the datapath: they survive an ovs-vswitchd restart on the kernel
// datapath but not on the userspace one, so reconcile sets them again.
func SetZoneLimits(ctx context.Context, target string, limits map[uint16]uint32) error {
	sock, err := Socket(target)
	if err != nil {
		return err
	}
	return onEachDatapath(ctx, sock, "dpctl/ct-set-limits", ZoneLimitArgs(limits)...)
}

// ZoneLimitArgs renders limits as dpctl/ct-set-limits takes them, by zone:
// "zone=64000,limit=100".
func ZoneLimitArgs(limits map[uint16]uint32) []string {
	args := make([]string, 0, len(limits))
	for _, z := range slices.Sorted(maps.Keys(limits)) {
		args = append(args, fmt.Sprintf("zone=%d,limit=%d", z, limits[z]))
	}
	return args
}

// onEachDatapath runs a dpctl command. Without a datapath name dpctl takes
// the only one there is: one round trip on the usual node. With several (or
// none) that fails, and each is named in turn.
func onEachDatapath(ctx context.Context, sock, command string, args ...string) error {
	_, err := call(ctx, sock, command, args...)
	if err == nil {
		return nil
	}
	out, derr := call(ctx, sock, "dpctl/dump-dps")
	if derr != nil || strings.TrimSpace(out) == "" {
		return err
	}
	for _, dp := range strings.Fields(out) {
		if _, err := call(ctx, sock, command, append([]string{dp}, args...)...); err != nil {
			return fmt.Errorf("datapath %s: %w", dp, err)
		}
	}
	return nil
}
