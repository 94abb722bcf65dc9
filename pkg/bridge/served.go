package bridge

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// ensureServed makes sure ovs-vswitchd has opened bridge br. A bridge it
// has not opened yet (datapath_id unset: just created, by this ADD or
// another) is synced once (ovsdb.SyncBridge); one it still cannot open
// after that is a permanent failure, not a "try again later": the message
// names the datapath type and why, and a bridge of ours that holds nothing
// else is removed, so that the next ADD, with the config fixed, creates it
// anew.
func ensureServed(ctx context.Context, cli *ovsdb.Client, conf *NetConf, br *ovsdb.Bridge) (*ovsdb.Bridge, error) {
	if br.Served() {
		return br, nil
	}
	synced, ifaceErr, err := cli.SyncBridge(ctx, br.Name)
	if err != nil {
		return nil, err
	}
	if synced == nil {
		return nil, fmt.Errorf("bridge %q: removed while this ADD used it", br.Name)
	}
	if synced.Served() {
		return synced, nil
	}
	kernel := synced.DatapathType == "" || synced.DatapathType == "system"
	msg := fmt.Sprintf("ovs-vswitchd cannot open bridge %q on the %s datapath", br.Name, map[bool]string{true: "kernel", false: synced.DatapathType}[kernel])
	noModule := false
	if ifaceErr != "" {
		msg += ": " + ifaceErr
	} else if kernel && !kernelDatapath() {
		noModule = true
		msg += `: the kernel has no openvswitch module (generic netlink family "ovs_datapath" not found)`
	} else {
		msg += " (see ovs-vswitchd's log)"
	}
	if removed, rerr := cli.RemoveBareBridge(ctx, *synced); rerr != nil {
		msg += fmt.Sprintf("; removing it: %v", rerr)
	} else if removed {
		msg += "; removed the bridge, which this plugin had created"
	}
	if noModule {
		msg += `; set "datapathType": "netdev" for the userspace datapath`
	}
	key := fmt.Sprintf("%q", conf.DatapathType)
	if conf.DatapathType == "" {
		key = `unset ("system")`
	}
	return nil, cnierr.Invalid(`"datapathType" %s: %s`, key, msg)
}

// kernelDatapath reports whether the kernel has the openvswitch module:
// ovs-vswitchd opens a kernel datapath through its generic netlink family.
func kernelDatapath() bool {
	_, err := netlink.GenlFamilyGet("ovs_datapath")
	return err == nil
}

// otherNetNS explains ovs-vswitchd's refusal of the host veth (an
// ovsdb.AttachError) when ovs-vswitchd runs in another network namespace
// than the plugin, which made the veth in its own: ovs-vswitchd cannot see
// it ("No such device"). The plugin must run in the node's network
// namespace, where ovs-vswitchd is. ovs-vswitchd is found by its pidfile
// beside the OVSDB socket (its run directory); when it is not there, the
// message says what is likely.
func otherNetNS(conf *NetConf, err error) error {
	var ae *ovsdb.AttachError
	if !errors.As(err, &ae) {
		return err
	}
	ep := conf.Endpoints.OVSDB
	if ep.Network == "unix" {
		pidfile := filepath.Join(filepath.Dir(ep.Address), "ovs-vswitchd.pid")
		if b, rerr := os.ReadFile(pidfile); rerr == nil {
			pid := strings.TrimSpace(string(b))
			theirs, err1 := os.Readlink("/proc/" + pid + "/ns/net")
			ours, err2 := os.Readlink("/proc/self/ns/net")
			if err1 == nil && err2 == nil {
				if theirs != ours {
					return fmt.Errorf("%w: ovs-vswitchd (pid %s, %s) runs in another network namespace than this plugin (%s), and cannot see the veth it made: run the plugin in the node's network namespace, where ovs-vswitchd runs (for a sandbox, ip netns exec NAME)", err, pid, theirs, ours)
				}
				return err
			}
		}
	}
	return fmt.Errorf("%w: is the plugin running in the network namespace of ovs-vswitchd? The bridge's datapath cannot see an interface made elsewhere", err)
}
