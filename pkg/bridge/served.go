package bridge

import (
	"context"
	"fmt"

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
	synced, ifaceErr, err := cli.SyncBridge(ctx, br.Name, ofportTimeout)
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
