package portmap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/ofctl"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

const opTimeout = 30 * time.Second

func dial(ctx context.Context, endpoint string) (*ovsdb.Client, error) {
	c, err := ovsdb.Dial(ctx, endpoint)
	if err != nil {
		return nil, asCNIError(err)
	}
	return c, nil
}

func asCNIError(err error) error {
	var claimed *ovsdb.ClaimedError
	switch {
	case errors.Is(err, ovsdb.ErrUnreachable):
		return types.NewError(types.ErrTryAgainLater, "ovsdb unreachable", err.Error())
	case errors.As(err, &claimed):
		return types.NewError(types.ErrInvalidNetworkConfig, "host port conflict: "+claimed.Error(), "")
	}
	return err
}

// prevResult parses the prevResult, which ADD and CHECK require.
func prevResult(conf *Conf) (*current.Result, error) {
	if conf.RawPrevResult == nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "must be called as chained plugin (no prevResult)", "")
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	r, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, fmt.Sprintf("prevResult: %v", err), "")
	}
	return r, nil
}

// ContainerFacts picks, from a result, the first IPv4 and IPv6 address of the
// interface ifname that has a sandbox (or of IPs with no interface), and that
// interface's MAC.
func ContainerFacts(r *current.Result, ifname string) (v4, v6 netip.Addr, mac net.HardwareAddr) {
	idx := -1
	for i, iface := range r.Interfaces {
		if iface.Name == ifname && iface.Sandbox != "" {
			idx = i
			mac, _ = net.ParseMAC(iface.Mac)
			break
		}
	}
	for _, ipc := range r.IPs {
		if ipc.Interface != nil && *ipc.Interface != idx {
			continue
		}
		a, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		if a.Is4() && !v4.IsValid() {
			v4 = a
		} else if a.Is6() && !v6.IsValid() {
			v6 = a
		}
	}
	return v4, v6, mac
}

// NodeIPs are the global unicast addresses of the bridge's internal interface.
func NodeIPs(bridge string) ([]netip.Addr, error) {
	l, err := netlink.LinkByName(bridge)
	if err != nil {
		return nil, fmt.Errorf("bridge interface %q: %w", bridge, err)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("addresses of %q: %w", bridge, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// Plan is what an ADD resolved for one attachment.
type Plan struct {
	Port       ovsdb.OwnedPort
	Target     string
	Attachment flows.Attachment
}

// Resolve turns the config and facts into the attachment's flows facts:
// node addresses, hostIP checks, rules, hairpin sources.
func Resolve(conf *Conf, containerID, ifname string, port ovsdb.OwnedPort, v4, v6 netip.Addr, mac net.HardwareAddr) (*Plan, error) {
	bridge := port.Port.ExternalIDs[ovsdb.KeyBridge]
	nodeIPs := conf.NodeIPs
	if nodeIPs == nil {
		var err error
		if nodeIPs, err = NodeIPs(bridge); err != nil {
			return nil, err
		}
	}
	for i, m := range conf.Mappings {
		if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() && !containsAddr(nodeIPs, m.HostIP) {
			return nil, invalid("portMappings[%d]: hostIP %s is not a node address (%v)", i, m.HostIP, nodeIPs)
		}
	}
	if port.Interface.OFPort == nil || *port.Interface.OFPort <= 0 {
		return nil, fmt.Errorf("port %q has no ofport", port.Port.Name)
	}
	if len(mac) != 6 {
		return nil, fmt.Errorf("prevResult interface %q has no MAC", ifname)
	}
	a := flows.Attachment{
		Cookie: flows.AttachmentCookie(containerID, ifname), OFPort: uint32(*port.Interface.OFPort), MAC: mac,
		IPv4: v4, IPv6: v6, Rules: flows.Resolve(conf.Mappings, nodeIPs, v4, v6),
		SNAT: *conf.SNAT, MasqAll: conf.MasqAll,
	}
	for _, n := range nodeIPs {
		if n.Is4() && !a.HairpinV4.IsValid() {
			a.HairpinV4 = n
		}
		if n.Is6() && !a.HairpinV6.IsValid() {
			a.HairpinV6 = n
		}
	}
	if !a.HairpinV4.IsValid() {
		a.IPv4 = netip.Addr{} // no IPv4 node address: nothing IPv4 to publish
	}
	if !a.HairpinV6.IsValid() {
		a.IPv6 = netip.Addr{}
	}
	return &Plan{Port: port, Target: hostport.OpenFlowTarget(conf.OpenFlow, conf.OVSDB, bridge), Attachment: a}, nil
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

// findPort returns the ovs-bridge port of the attachment.
func findPort(ctx context.Context, cli *ovsdb.Client, containerID, ifname string) (ovsdb.OwnedPort, error) {
	att := ovsdb.Attachment{ContainerID: containerID, IfName: ifname}
	ports, err := cli.FindPorts(ctx, att)
	if err != nil {
		return ovsdb.OwnedPort{}, asCNIError(err)
	}
	if len(ports) != 1 {
		return ovsdb.OwnedPort{}, fmt.Errorf("attachment %s: found %d ovs-bridge ports, want 1 (ovs-portmap must follow ovs-bridge in the conflist)", att, len(ports))
	}
	return ports[0], nil
}

// CmdAdd publishes the mappings and prints prevResult unchanged.
func CmdAdd(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	prev, err := prevResult(conf)
	if err != nil {
		return err
	}
	if len(conf.Mappings) == 0 {
		return types.PrintResult(conf.PrevResult, conf.CNIVersion)
	}
	v4, v6, mac := ContainerFacts(prev, args.IfName)
	if !v4.IsValid() && !v6.IsValid() {
		return types.PrintResult(conf.PrevResult, conf.CNIVersion)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cli, err := dial(ctx, conf.OVSDB)
	if err != nil {
		return err
	}
	defer cli.Close()
	port, err := findPort(ctx, cli, args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	plan, err := Resolve(conf, args.ContainerID, args.IfName, port, v4, v6, mac)
	if err != nil {
		return err
	}
	if err := hostport.Publish(ctx, cli, plan.Port, plan.Target, conf.Pipeline, plan.Attachment); err != nil {
		return asCNIError(err)
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}

// CmdDel withdraws everything of the attachment, found by its identity alone.
func CmdDel(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cli, err := dial(ctx, conf.OVSDB)
	if err != nil {
		if link.Exists(link.HostVethName(args.ContainerID, args.IfName)) {
			return err // the attachment is still here and OVSDB cannot be reached
		}
		return nil
	}
	defer cli.Close()
	ports, err := cli.FindPorts(ctx, ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName})
	if err != nil {
		return asCNIError(err)
	}
	for _, p := range ports {
		if err := hostport.Withdraw(ctx, cli, p); err != nil {
			return asCNIError(err)
		}
	}
	return nil
}

// CmdCheck verifies that the bridge holds exactly the flows the attachment
// needs: it renders them again from the config and prevResult and lets
// ovs-ofctl compare them with what is installed under the attachment's cookie.
func CmdCheck(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	prev, err := prevResult(conf)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cli, err := dial(ctx, conf.OVSDB)
	if err != nil {
		return err
	}
	defer cli.Close()
	port, err := findPort(ctx, cli, args.ContainerID, args.IfName)
	if err != nil {
		return err
	}
	var want []flows.Flow
	target := hostport.OpenFlowTarget(conf.OpenFlow, conf.OVSDB, port.Port.ExternalIDs[ovsdb.KeyBridge])
	cookie := flows.AttachmentCookie(args.ContainerID, args.IfName)
	v4, v6, mac := ContainerFacts(prev, args.IfName)
	if len(conf.Mappings) > 0 && (v4.IsValid() || v6.IsValid()) {
		rec, ok, err := hostport.RecordOf(port)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("attachment %s/%s: no host port record on port %q", args.ContainerID, args.IfName, port.Port.Name)
		}
		c := *conf
		if conf.NodeIPs == nil {
			c.NodeIPs = recordNodeIPs(rec) // the node addresses ADD resolved
		}
		plan, err := Resolve(&c, args.ContainerID, args.IfName, port, v4, v6, mac)
		if err != nil {
			return err
		}
		want = conf.Pipeline.AttachmentFlows(plan.Attachment)
		target = plan.Target
	}
	got, err := ofctl.Bridge{Target: target}.DumpCookie(ctx, cookie)
	if err != nil {
		return err
	}
	return compareFlows(ctx, want, got)
}

// recordNodeIPs lists the node addresses the recorded rules use.
func recordNodeIPs(r hostport.Record) []netip.Addr {
	var out []netip.Addr
	for _, a := range []netip.Addr{r.HairpinV4, r.HairpinV6} {
		if a.IsValid() {
			out = append(out, a)
		}
	}
	for _, rule := range r.Rules {
		if !containsAddr(out, rule.NodeIP) {
			out = append(out, rule.NodeIP)
		}
	}
	return out
}

// compareFlows lets ovs-ofctl parse both sides, so that OVS's own
// normalisation (field order, defaults) does not count as a difference.
func compareFlows(ctx context.Context, want []flows.Flow, got []string) error {
	dir, err := os.MkdirTemp("", "ovs-portmap-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var w strings.Builder
	for _, f := range want {
		w.WriteString(f.String() + "\n")
	}
	wantFile, gotFile := filepath.Join(dir, "want"), filepath.Join(dir, "got")
	if err := os.WriteFile(wantFile, []byte(w.String()), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(gotFile, []byte(strings.Join(got, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "ovs-ofctl", "--no-names", "-O", "OpenFlow14", "diff-flows", wantFile, gotFile).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		return fmt.Errorf("installed flows differ from the expected ones (- expected, + installed):\n%s", strings.TrimSpace(string(out)))
	}
	return nil
}

// CmdGC withdraws the host ports of our attachments not in
// cni.dev/valid-attachments.
func CmdGC(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cli, err := dial(ctx, conf.OVSDB)
	if err != nil {
		return err
	}
	defer cli.Close()
	valid := make(map[ovsdb.Attachment]bool, len(conf.ValidAttachments))
	for _, a := range conf.ValidAttachments {
		valid[ovsdb.Attachment{ContainerID: a.ContainerID, IfName: a.IfName}] = true
	}
	ports, err := cli.OwnedPorts(ctx)
	if err != nil {
		return asCNIError(err)
	}
	for _, p := range ports {
		if p.Port.ExternalIDs[ovsdb.KeyNetwork] != conf.Name || valid[p.Attachment()] {
			continue
		}
		if err := hostport.Withdraw(ctx, cli, p); err != nil {
			return asCNIError(err)
		}
	}
	return nil
}

// CmdStatus reports OVSDB unreachable as code 50.
func CmdStatus(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, conf.OVSDB)
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "ovsdb unreachable", err.Error())
	}
	cli.Close()
	return nil
}
