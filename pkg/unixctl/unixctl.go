// Package unixctl talks to ovs-vswitchd's control socket (the one
// ovs-appctl uses: <run dir>/ovs-vswitchd.<pid>.ctl, JSON-RPC 1.0, found
// once by Find) for what neither OpenFlow nor OVSDB offers: the datapaths'
// conntrack zone limits, the wait for the datapath's flow cache to follow a
// flow change (StartRevalidation), and the traces and counters of
// ovs-portmap's tools.
package unixctl

import (
	"context"
	"encoding/json"
	"errors"
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
// found: none was given and no pid file names one, or the one given or named
// is not there.
var ErrNoSocket = errors.New("no ovs-vswitchd control socket")

// DefaultRunDir is the run directory OVS's tools use when OVS_RUNDIR is not
// set (that of the distributions' packages).
const DefaultRunDir = "/var/run/openvswitch"

// Find returns the control socket of the ovs-vswitchd whose OpenFlow
// management socket is target: control when it is given, else the one
// ovs-appctl would find, the pid file ovs-vswitchd.pid naming
// ovs-vswitchd.<pid>.ctl in the run directory. The run directories tried
// are, in order, that of a unix: target (ovs-vswitchd puts <bridge>.mgmt in
// its own), $OVS_RUNDIR and DefaultRunDir. An ovs-vswitchd started with
// another --pidfile or --unixctl is found only through control.
func Find(target endpoint.Endpoint, control string) (string, error) {
	if control != "" {
		if _, err := os.Stat(control); err != nil {
			return "", fmt.Errorf("%w at %s: %w", ErrNoSocket, control, err)
		}
		return control, nil
	}
	var dirs []string
	if target.Network == "unix" {
		dirs = append(dirs, filepath.Dir(target.Address))
	}
	if d := os.Getenv("OVS_RUNDIR"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, DefaultRunDir)
	var tried []string
	for _, dir := range slices.Compact(dirs) {
		sock, err := fromPidFile(dir)
		if err == nil {
			return sock, nil
		}
		tried = append(tried, err.Error())
	}
	return "", fmt.Errorf("%w for %s (%s)", ErrNoSocket, target, strings.Join(tried, "; "))
}

// timedOut gives an error that the context's deadline ended the suite's
// timeout sentinel: ovs-vswitchd did not answer in time.
func timedOut(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w (%v)", endpoint.ErrTimeout, err)
	}
	return err
}

// fromPidFile returns the control socket that dir's pid file names, if it is
// there.
func fromPidFile(dir string) (string, error) {
	pf := filepath.Join(dir, "ovs-vswitchd.pid")
	b, err := os.ReadFile(pf)
	if err != nil {
		return "", err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return "", fmt.Errorf("pid file %s: %w", pf, err)
	}
	sock := filepath.Join(dir, fmt.Sprintf("ovs-vswitchd.%d.ctl", pid))
	if _, err := os.Stat(sock); err != nil {
		return "", err
	}
	return sock, nil
}

// call runs one unixctl command and returns its output. It waits for
// ovs-vswitchd until ctx ends: then the error is endpoint.ErrTimeout (CNI
// code 11), as for OpenFlow.
func call(ctx context.Context, sock, command string, args ...string) (string, error) {
	c, err := jsonrpc.Dial(ctx, endpoint.Endpoint{Network: "unix", Address: sock})
	if err != nil {
		return "", fmt.Errorf("ovs-vswitchd control socket %s: %w", sock, timedOut(err))
	}
	defer c.Close()
	if args == nil {
		args = []string{}
	}
	var out json.RawMessage
	if err := c.Call(ctx, command, args, &out); err != nil {
		return "", fmt.Errorf("ovs-vswitchd %s: %w", command, timedOut(err))
	}
	var s string
	_ = json.Unmarshal(out, &s)
	return s, nil
}

// SetZoneLimits sets the conntrack entry limit of each zone on every
// datapath of the ovs-vswitchd whose control socket is sock (0: no limit). The limits live
// in the datapath: they survive an ovs-vswitchd restart on the kernel
// datapath but not on the userspace one, so reconcile sets them again.
func SetZoneLimits(ctx context.Context, sock string, limits map[uint16]uint32) error {
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
