package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/bandwidth"
	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/gateway"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/ipam"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/netns"
	"github.com/ovsflow/ovs-cni/pkg/noderanges"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/portsec"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

func portExternalIDs(args *skel.CmdArgs, conf *NetConf, contMAC string) map[string]string {
	ids := map[string]string{
		ovsdb.KeyOwner:       ovsdb.OwnerValue,
		ovsdb.KeyContainerID: args.ContainerID,
		ovsdb.KeyIfName:      args.IfName,
		ovsdb.KeyNetNS:       args.Netns,
		ovsdb.KeyNetwork:     conf.Name,
		ovsdb.KeyBridge:      conf.Bridge,
		ovsdb.KeyMAC:         contMAC,
	}
	if pod := record.PodOf(args.Args); pod != "" {
		ids[record.KeyPod] = pod
	}
	// The namespace itself, not only its path: the orphan sweep tells a
	// sandbox gone from one whose path names another namespace now.
	if ino := netns.Inode(args.Netns); ino != 0 {
		ids[ovsdb.KeyNetNSInode] = strconv.FormatUint(ino, 10)
	}
	if len(conf.Allowed) > 0 {
		ids[record.KeyAllowedAddresses] = "true"
	}
	if conf.IPAM.Type != "" {
		if raw := ipamSection(args.StdinData); raw != "" {
			ids[record.KeyIPAM] = raw
		}
	}
	return ids
}

// ipamSection is the "ipam" object of a network config, compacted ("" if
// there is none).
func ipamSection(stdin []byte) string {
	var nc struct {
		IPAM json.RawMessage `json:"ipam"`
	}
	var b bytes.Buffer
	if json.Unmarshal(stdin, &nc) != nil || len(nc.IPAM) == 0 || json.Compact(&b, nc.IPAM) != nil {
		return ""
	}
	return b.String()
}

// releaseWith is the IPAM plugin and network config that release the
// addresses of ports: the "ipam" section their ADD recorded (record.KeyIPAM)
// in place of the current config's, else the current config.
func releaseWith(conf *NetConf, stdin []byte, ports []ovsdb.OwnedPort) (string, []byte, error) {
	for _, p := range ports {
		raw := p.Port.ExternalIDs[record.KeyIPAM]
		if raw == "" || raw == ipamSection(stdin) {
			continue
		}
		var typ struct {
			Type string `json:"type"`
		}
		var nc map[string]json.RawMessage
		if err := json.Unmarshal([]byte(raw), &typ); err != nil || typ.Type == "" {
			return "", nil, fmt.Errorf("port %q: recorded ipam %q: no type", p.Port.Name, raw)
		}
		if err := json.Unmarshal(stdin, &nc); err != nil {
			return "", nil, fmt.Errorf("network config: %w", err)
		}
		nc["ipam"] = json.RawMessage(raw)
		b, err := json.Marshal(nc)
		if err != nil {
			return "", nil, fmt.Errorf("network config with the recorded ipam: %w", err)
		}
		return typ.Type, b, nil
	}
	return conf.IPAM.Type, stdin, nil
}

// notOwnNetNS refuses a CNI_NETNS that is the plugin's own network
// namespace (the node's): the container end would land in the node. The CNI
// library checks this only after the plugin ran.
func notOwnNetNS(path string) error {
	var own, target syscall.Stat_t
	if syscall.Stat("/proc/thread-self/ns/net", &own) != nil || syscall.Stat(path, &target) != nil {
		return nil // ns.GetNS reports a bad path
	}
	if own.Dev == target.Dev && own.Ino == target.Ino {
		return cnierr.New(cnierr.Environment,
			fmt.Sprintf("CNI_NETNS %q is the plugin's own network namespace, not a container's", path), "")
	}
	return nil
}

// macError gives a MAC already used on the node the code of a bad "mac".
func macError(err error) error {
	var inUse *ovsdb.MACInUseError
	if errors.As(err, &inUse) {
		return invalid(`"mac" %s: %v`, inUse.MAC, err)
	}
	return err
}

// portVLAN is how the port's VLAN is configured, for the port flows.
func portVLAN(conf *NetConf) flows.PortVLAN {
	switch {
	case conf.VLAN != nil:
		return flows.Access
	case len(conf.Trunks) > 0:
		return flows.Trunk
	}
	return flows.Untagged
}

// addresses runs IPAM and puts its addresses, routes and DNS into result.
// It reports whether it allocated any (the caller releases them when ADD
// fails later).
func addresses(ctx context.Context, conf *NetConf, args *skel.CmdArgs, result *current.Result, contIndex int) (bool, error) {
	if conf.IPAM.Type == "" {
		return false, nil
	}
	r, err := ipam.Add(ctx, conf.IPAM.Type, args.StdinData)
	return useIPAM(conf, r, err, result, contIndex)
}

// useIPAM puts what an IPAM ADD returned (r, or its error) into result,
// reporting whether the call allocated addresses.
func useIPAM(conf *NetConf, r types.Result, err error, result *current.Result, contIndex int) (bool, error) {
	if err != nil {
		return false, fmt.Errorf("ipam %q: %w", conf.IPAM.Type, err)
	}
	ipamResult, err := current.NewResultFromResult(r)
	if err != nil {
		return true, fmt.Errorf("ipam %q result: %w", conf.IPAM.Type, err)
	}
	result.IPs, result.Routes = ipamResult.IPs, ipamResult.Routes
	if len(ipamResult.DNS.Nameservers) > 0 || len(ipamResult.DNS.Search) > 0 {
		result.DNS = ipamResult.DNS
	}
	for _, ipc := range result.IPs {
		ipc.Interface = current.Int(contIndex)
	}
	return true, nil
}

// attachSecured inserts the port with the ofport and cookie reserved in
// res, whose flows are already in, with the port security record, and waits
// for ovs-vswitchd to attach it. So no bundle waits behind the insert's
// reconfiguration of the bridge, and the port has its flows from its first
// frame. When the insert meets a sweep (reconcile), the flows go in again
// after it, since a sweep after an ovs-vswitchd restart rebuilds only what
// ports record. When ovs-vswitchd gives the port another number (one it
// still held for a port removed meanwhile), the flows follow. ps are the
// facts of the flows, with the reserved ofport.
func attachSecured(ctx context.Context, cli *ovsdb.Client, conf *NetConf, br *ovsdb.Bridge, ps flows.PortSecurity, spec ovsdb.PortSpec, res *ovsdb.Reservation) (string, int, error) {
	if err := withPortSecRecord(spec, record.NewPortSecurity(portSecTarget(conf), ps)); err != nil {
		return "", 0, err
	}
	// The port takes its addresses in its insert (claim, then act: its
	// flows match an ofport no port has before it).
	var allowed []string
	spec.Claims, spec.Excludes, allowed = record.AddressClaims(conf.Bridge, ps)
	for _, k := range allowed {
		spec.ExternalIDs[k] = ovsdb.ClaimValue
	}
	for attempt := 0; ; attempt++ {
		spec.OFPort, spec.Reservation = res.OFPort, res
		portUUID, err := cli.AttachPort(ctx, br.UUID, spec)
		var taken *ovsdb.OFPortTakenError
		switch {
		case errors.As(err, &taken) && conf.OFPortRequest != nil:
			return "", 0, ofportTaken(conf)
		case errors.Is(err, ovsdb.ErrClaimLost) && conf.OFPortRequest != nil && attempt < 8:
			_ = cli.Release(ctx, *res)
			if *res, err = reserveOFPort(ctx, cli, conf, res.Attachment); err != nil {
				return "", 0, err
			}
		case (errors.As(err, &taken) || errors.Is(err, ovsdb.ErrClaimLost)) && attempt < 8:
			// Requested by an interface a caller outside the suite
			// inserted, or the claim outlived ClaimTTL.
			from := res.OFPort
			if taken != nil {
				from++
			}
			_ = cli.Release(ctx, *res)
			if *res, err = reserve(ctx, cli, res.Attachment, from); err != nil {
				return "", 0, err
			}
		case errors.Is(err, ovsdb.ErrSweeping) && attempt < 8:
			if err := cli.AfterSweep(ctx, *res); err != nil {
				return "", 0, err
			}
		case err != nil:
			return "", 0, addressError(macError(err))
		default:
			got, err := cli.WaitOFPort(ctx, spec.Name)
			if err != nil {
				return "", 0, otherNetNS(conf, err)
			}
			if err := requestedOFPort(conf, got); err != nil {
				return "", 0, err
			}
			if got != res.OFPort {
				if err := securePort(ctx, cli, conf, br, onPort(ps, got), ""); err != nil {
					return "", 0, err
				}
			}
			return portUUID, got, nil
		}
		if err := securePort(ctx, cli, conf, br, onPort(ps, res.OFPort), ""); err != nil {
			return "", 0, err
		}
	}
}

// withPortSecRecord puts rec, if it records anything, into the external_ids
// the port is inserted with.
func withPortSecRecord(spec ovsdb.PortSpec, rec record.PortSecurity) error {
	raw, ok, err := rec.Value()
	if ok && err == nil {
		spec.ExternalIDs[record.KeyPortSecurity] = raw
	}
	return err
}

// reserve claims an ofport from home on and the attachment's cookie
// (ovsdb.Reserve). A cookie held by another attachment (their 40-bit hashes
// meet) is refused: the two would remove each other's flows.
func reserve(ctx context.Context, cli *ovsdb.Client, att ovsdb.Attachment, home int) (ovsdb.Reservation, error) {
	c := flows.AttachmentCookie(att.ContainerID, att.IfName)
	res, err := cli.Reserve(ctx, att, home, c.String())
	var taken *ovsdb.IdentityTakenError
	if errors.As(err, &taken) {
		return res, cnierr.New(cnierr.Environment,
			fmt.Sprintf("CNI_CONTAINERID %q with CNI_IFNAME %q: its flows' cookie %s is that of attachment %s", att.ContainerID, att.IfName, c, taken.Holder),
			"choose another container ID or interface name")
	}
	return res, err
}

// reserveOFPort claims the attachment's ofport (reserve): the one
// "ofport_request" names, or else the first free one from its home on. A
// requested one that another interface requests or holds is code 7.
func reserveOFPort(ctx context.Context, cli *ovsdb.Client, conf *NetConf, att ovsdb.Attachment) (ovsdb.Reservation, error) {
	if conf.OFPortRequest == nil {
		return reserve(ctx, cli, att, ovsdb.HomeOFPort(att))
	}
	res, err := reserve(ctx, cli, att, *conf.OFPortRequest)
	if err != nil {
		return res, err
	}
	if res.OFPort != *conf.OFPortRequest {
		_ = cli.Release(ctx, res)
		return ovsdb.Reservation{}, ofportTaken(conf)
	}
	return res, nil
}

// requestedOFPort refuses a port that ovs-vswitchd numbered otherwise than
// "ofport_request" asked (another interface held the number unrequested).
func requestedOFPort(conf *NetConf, got int) error {
	if conf.OFPortRequest != nil && got != *conf.OFPortRequest {
		return ofportTaken(conf)
	}
	return nil
}

func ofportTaken(conf *NetConf) error {
	return invalid(`"ofport_request" %d: another interface on the node requests or holds it`, *conf.OFPortRequest)
}

// lookupBridge finds (or, with createBridge, creates) the configured bridge.
func lookupBridge(ctx context.Context, cli *ovsdb.Client, conf *NetConf) (*ovsdb.Bridge, error) {
	var br *ovsdb.Bridge
	var err error
	if conf.CreateBridge {
		br, err = cli.EnsureBridge(ctx, conf.Bridge, conf.DatapathType)
	} else {
		br, err = cli.Bridge(ctx, conf.Bridge)
	}
	if err != nil {
		return nil, err
	}
	if br == nil {
		return nil, invalid(`"bridge" %q does not exist (create it, or set "createBridge": true)`, conf.Bridge)
	}
	return ensureServed(ctx, cli, conf, br)
}

// replacePrevious clears what an earlier ADD of the same attachment left (a
// retried ADD replaces its own attachment), and makes sure ovs-vswitchd has
// let go of an old device of the same name (that ADD's, or one a DEL just
// removed) before the new one appears: else it keeps reading the deleted one.
//
// It reports whether there was anything to replace; when there was not, the
// caller still has to wait for pending changes (ovsdb.SyncPending) before
// the new device appears.
func replacePrevious(ctx context.Context, cli *ovsdb.Client, conf *NetConf, args *skel.CmdArgs, previous []ovsdb.OwnedPort, hostName string) (bool, error) {
	if len(previous) == 0 && !link.Exists(hostName) {
		return false, nil
	}
	var err error
	if len(previous) > 0 {
		// The old port's host ports, limits and flows go with it (their records are on the row).
		if err := cutOff(ctx, conf, previous); err != nil {
			return true, err
		}
		if err := withdrawChained(ctx, cli, previous); err != nil {
			return true, err
		}
		err = cli.DetachPortsAndSync(ctx, ovsdb.PortUUIDs(previous)...)
	} else {
		err = cli.SyncPending(ctx)
	}
	if err != nil {
		return true, err
	}
	if conf.IPAM.Type != "" {
		// host-local refuses a second allocation for the same container.
		_ = ipam.Del(ctx, conf.IPAM.Type, args.StdinData)
	}
	return true, link.Delete(hostName) // its container end goes with it
}

// cutOff makes the ports drop everything they receive, then removes all
// their flows, in one bundle per bridge: a tombstone flow per port
// (flows.TombstoneBundle) outlives the port by a few seconds, so that nothing
// passes between its flows going and ovs-vswitchd removing it, and DEL need
// not wait for that. Without ovs-vswitchd (no OpenFlow socket) nothing is
// forwarded anyway.
func cutOff(ctx context.Context, conf *NetConf, ports []ovsdb.OwnedPort) error {
	byTarget := map[endpoint.Endpoint]openflow.Bundle{}
	for _, p := range ports {
		br := p.Port.ExternalIDs[ovsdb.KeyBridge]
		if br == "" {
			br = conf.Bridge
		}
		target := portsec.Target(p, conf.Endpoints.OpenFlowOf(br))
		if p.Interface.OFPort != nil && *p.Interface.OFPort > 0 {
			byTarget[target] = append(byTarget[target], flows.TombstoneBundle(uint32(*p.Interface.OFPort))...)
		}
		a := p.Attachment()
		byTarget[target] = append(byTarget[target], flows.AttachmentCookie(a.ContainerID, a.IfName).AttachmentDelete())
	}
	for target, b := range byTarget {
		if err := openflow.Apply(ctx, target, b); err != nil && !openflow.NotServed(err) {
			return err
		}
	}
	return nil
}

// securePort installs the port's table-0 flows for ps (pkg/portsec) and,
// given portUUID, first records them on the port for reconcile.
func securePort(ctx context.Context, cli *ovsdb.Client, conf *NetConf, br *ovsdb.Bridge, ps flows.PortSecurity, portUUID string) error {
	return addressError(portsec.Apply(ctx, cli, portSecTarget(conf), ps, br.Secure(), conf.Bridge, portUUID, record.Gateways(br.ExternalIDs)))
}

// addressError gives a lost address claim (record.AddressClaims) code 7,
// naming the address and its holder.
func addressError(err error) error {
	var claimed *ovsdb.ClaimedError
	if !errors.As(err, &claimed) {
		return err
	}
	bridge, a, ok := record.AddressOfKey(claimed.Key)
	if !ok {
		return err
	}
	what := "the address"
	if strings.HasPrefix(claimed.Key, record.KeyAllowedAddressPrefix) {
		what = `in the "allowedAddresses"`
	}
	return cnierr.Wrap(cnierr.Config, fmt.Sprintf("address %s on bridge %q is %s of attachment %s (port %q)",
		a, bridge, what, claimed.Holder, claimed.Port), err)
}

// portSecTarget is the OpenFlow target of the port flows, recorded with
// them.
func portSecTarget(conf *NetConf) endpoint.Endpoint {
	return conf.Endpoints.OpenFlowOf(conf.Bridge)
}

// publishMesos publishes the port mappings Apache Mesos passes in args: Mesos
// calls one plugin, not a chain, so ovs-bridge does what ovs-portmap would,
// through the same code (one pipeline, one cookie per attachment), with
// ovs-portmap's defaults (node addresses of the bridge interface, snat on).
//
// port is the attachment's port as this ADD just wrote it (no need to read
// it back), ps the facts of its port flows (its MAC and addresses).
func publishMesos(ctx context.Context, cli *ovsdb.Client, args *skel.CmdArgs, conf *NetConf, ps flows.PortSecurity, port ovsdb.OwnedPort) error {
	v4, v6 := hostport.FirstAddrs(ps.IPs)
	if !v4.IsValid() && !v6.IsValid() {
		return nil
	}
	plan, err := hostport.Resolve(hostport.Options{Mappings: conf.Mappings, SNAT: true, OVSDB: conf.Endpoints.OVSDB,
		VswitchdControl: conf.VswitchdControl},
		args.ContainerID, args.IfName, port, v4, v6, ps.MAC)
	if err != nil {
		return err
	}
	if err := hostport.Publish(ctx, cli, plan.Port, plan.Target, plan.Control, flows.DefaultPipeline(), plan.HostPorts, nil); err != nil {
		return err
	}
	cnilog.Note("host ports %v", plan.HostPorts.Rules)
	return nil
}

// checkAllowed refuses (code 7) an ADD that would let one attachment send
// as another on the bridge, or as the bridge itself: its own addresses or
// allowedAddresses holding an address of the bridge's interface (the
// node's, the gateways there) or a gateway recorded on the bridge or given
// by IPAM; its allowedAddresses containing the address or the link-local
// address of another attachment; or its own address in another's
// allowedAddresses. Attachments that allow the same addresses (a VIP two
// containers take over from each other) do not conflict. Without
// allowedAddresses it reads only the ports that have some
// (record.KeyAllowedAddresses).
//
// Own addresses, link-local addresses and single allowed addresses are
// also claimed in OVSDB, atomically, by the port's insert or its record
// (record.AddressClaims); ranges of allowedAddresses (IPv4 prefixes
// shorter than /32) are checked only here. ADD runs it before it installs
// anything for its addresses and again after its port and record are in
// (see CmdAdd): of two concurrent ADDs that conflict over a range, the
// second read keeps both from passing.
func checkAllowed(ctx context.Context, cli *ovsdb.Client, conf *NetConf, br *ovsdb.Bridge, att ovsdb.Attachment, result *current.Result) error {
	var own []netip.Addr
	for _, ipc := range result.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			own = append(own, a.Unmap())
		}
	}
	if len(own) == 0 && len(conf.Allowed) == 0 {
		return nil
	}
	bridgeHas := bridgeAddrs(br, result)
	for _, ip := range own {
		if bridgeHas[ip] {
			return invalid(`address %s is an address of bridge %q (the node's or a gateway's)`, ip, conf.Bridge)
		}
	}
	for _, pre := range conf.Allowed {
		for ip := range bridgeHas {
			if pre.Contains(ip) {
				return invalid(`"allowedAddresses" %s contains %s, an address of bridge %q (the node's or a gateway's)`, pre, ip, conf.Bridge)
			}
		}
	}
	var ports []ovsdb.OwnedPort
	var err error
	if len(conf.Allowed) > 0 {
		ports, err = cli.OwnedPorts(ctx)
	} else {
		ports, err = cli.OwnedPortsWith(ctx, record.KeyAllowedAddresses, "true")
	}
	if err != nil {
		return err
	}
	for _, p := range ports {
		other := p.Attachment()
		if other == att || p.Port.ExternalIDs[ovsdb.KeyBridge] != conf.Bridge {
			continue
		}
		rec, ok := record.PortSecurityOf(p)
		if !ok {
			continue
		}
		ll := flows.LinkLocalOf(rec.MAC.HardwareAddr())
		for _, pre := range conf.Allowed {
			for _, ip := range rec.IPs {
				if pre.Contains(ip) {
					return invalid(`"allowedAddresses" %s contains %s, the address of attachment %s on bridge %q`, pre, ip, other, conf.Bridge)
				}
			}
			if ll.IsValid() && pre.Contains(ll) {
				return invalid(`"allowedAddresses" %s contains %s, the link-local address of attachment %s on bridge %q`, pre, ll, other, conf.Bridge)
			}
		}
		for _, ip := range own {
			for _, pre := range rec.Allowed {
				if pre.Contains(ip) {
					return invalid(`address %s is in the "allowedAddresses" %s of attachment %s on bridge %q`, ip, pre, other, conf.Bridge)
				}
			}
		}
	}
	return nil
}

// bridgeAddrs are the addresses the bridge holds itself: those of its
// internal interface (the node's, and the gateways put there), the
// gateways recorded on its row (isGateway), and the gateways IPAM gave in
// result.
func bridgeAddrs(br *ovsdb.Bridge, result *current.Result) map[netip.Addr]bool {
	has := map[netip.Addr]bool{}
	for _, ipc := range result.IPs {
		if g, ok := netip.AddrFromSlice(ipc.Gateway); ok {
			has[g.Unmap()] = true
		}
	}
	for k := range br.ExternalIDs {
		if s, ok := strings.CutPrefix(k, record.KeyGatewayPrefix); ok {
			if p, err := netip.ParsePrefix(s); err == nil {
				has[p.Addr().Unmap()] = true
			}
		}
	}
	// The interface exists once ovs-vswitchd has made it; until then it
	// has no address.
	if l, err := netlink.LinkByName(br.Name); err == nil {
		addrs, _ := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				has[ip.Unmap()] = true
			}
		}
	}
	return has
}

// portSecurity is what the port flows of the attachment allow on ofport:
// the container interface's MAC and the addresses in result so far (MAC
// only without IPAM), the link-local address of the MAC (which
// prepareContainer pins), and the network's settings. ADD builds it each
// time what it knows changes (the lease, with dhcp); the flows and the
// port's record both come from it.
func portSecurity(conf *NetConf, args *skel.CmdArgs, mac openflow.MAC, result *current.Result, ofport int) flows.PortSecurity {
	ps := flows.PortSecurity{Cookie: flows.AttachmentCookie(args.ContainerID, args.IfName), OFPort: uint32(ofport),
		MAC: mac, LinkLocal: flows.LinkLocalOf(mac.HardwareAddr()), L2Only: conf.IPAM.Type == "",
		AllowRouter: conf.AllowRouter, AllowDHCPServer: conf.AllowDHCPServer,
		Allowed: conf.Allowed, AllowVRRP: conf.AllowVRRP,
		VLAN: portVLAN(conf), Disabled: !*conf.PortSecurity}
	for _, ipc := range result.IPs {
		if a, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			ps.IPs = append(ps.IPs, a.Unmap())
		}
	}
	if conf.IsGateway {
		// The gateways setupGateway puts on the bridge: the port's
		// replies to Services go back through them (pkg/flows, gateway.go).
		ps.Gateways = gateways(result)
	}
	return ps
}

// onPort is ps on another ofport.
func onPort(ps flows.PortSecurity, ofport int) flows.PortSecurity {
	ps.OFPort = uint32(ofport)
	return ps
}

func ipList(r *current.Result) []string {
	out := make([]string, 0, len(r.IPs))
	for _, ip := range r.IPs {
		out = append(out, ip.Address.String())
	}
	return out
}

// prepareContainer runs inside the container netns before the addresses are
// known: sysctls, TX offload, and, with up, the link up (dhcp needs it; on
// the userspace datapath its carrier then reaches ovs-vswitchd while IPAM
// runs). It returns the MAC.
func prepareContainer(ifname string, netdev, up, noRA bool) (openflow.MAC, error) {
	// Addresses come from IPAM and are unique: skip DAD so IPv6 works at once,
	// and announce them (gratuitous ARP / unsolicited NA) when the link comes
	// up. The link-local address is the EUI-64 one of the MAC, whatever the
	// netns' default, because port security allows exactly that one.
	conf := link.Conf{IPv4: map[string]string{"arp_notify": "1"},
		IPv6: map[string]string{"accept_dad": "0", "ndisc_notify": "1", "addr_gen_mode": "0"}}
	if noRA {
		// Addresses and routes come from IPAM: no router advertisement
		// may change them (port security drops them from containers; this
		// also covers those from behind the uplink).
		conf.IPv6["accept_ra"] = "0"
	}
	if err := link.SetConf(ifname, conf); err != nil {
		return openflow.MAC{}, err
	}
	if netdev {
		if err := link.DisableTxChecksum(ifname); err != nil {
			return openflow.MAC{}, err
		}
	}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return openflow.MAC{}, fmt.Errorf("looking up %q: %w", ifname, err)
	}
	if up {
		if err := netlink.LinkSetUp(l); err != nil {
			return openflow.MAC{}, fmt.Errorf("setting %q up: %w", ifname, err)
		}
	}
	mac, ok := openflow.MACFrom(l.Attrs().HardwareAddr)
	if !ok {
		return mac, fmt.Errorf("%q has MAC %q, not a 48-bit one", ifname, l.Attrs().HardwareAddr)
	}
	return mac, nil
}

// configureAddresses runs inside the container netns after IPAM: addresses,
// routes, link up.
func configureAddresses(ctx context.Context, ifname string, result *current.Result) error {
	if len(result.IPs) > 0 {
		if err := ipam.Configure(ctx, ifname, result); err != nil {
			return fmt.Errorf("configuring %q: %w", ifname, err)
		}
	}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("looking up %q: %w", ifname, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("setting %q up: %w", ifname, err)
	}
	return nil
}

// gateways returns the IPAM gateways of result, each with its subnet's
// prefix: the addresses isGateway puts on the bridge.
func gateways(result *current.Result) []netip.Prefix {
	var gws []netip.Prefix
	for _, ipc := range result.IPs {
		g, ok := netip.AddrFromSlice(ipc.Gateway)
		if !ok {
			continue
		}
		bits, _ := ipc.Address.Mask.Size()
		if p := netip.PrefixFrom(g.Unmap(), bits); p.IsValid() && !slices.Contains(gws, p) {
			gws = append(gws, p)
		}
	}
	return gws
}

// setupGateway puts each IPAM gateway, with its subnet's prefix, on the
// bridge's internal interface, brings it up and records it on the bridge
// (for reconcile). The port claims its gateways first (pkg/gateway): with
// its row, or here when the port went in without them (dhcp); the bridge's
// record is read again after the claim, since a withdrawal may have
// removed it and the address since the bridge was first read. When it
// records a gateway, it puts the gateway's flows (pkg/flows, gateway.go)
// on the bridge at target again: the port's bundle had them, but a
// reconcile or a withdrawal since may have removed them as a gateway's
// without a record.
func setupGateway(ctx context.Context, cli *ovsdb.Client, br *ovsdb.Bridge, target endpoint.Endpoint, result *current.Result, portUUID string, claimed bool) error {
	bridge := br.Name
	gws := gateways(result)
	if len(gws) == 0 {
		return nil
	}
	if !claimed {
		if err := cli.SetPortExternalIDs(ctx, portUUID, gateway.Claims(gws)); err != nil {
			return err
		}
	}
	now, err := cli.Bridge(ctx, bridge)
	if err != nil {
		return err
	}
	if now == nil {
		return fmt.Errorf("bridge %q is gone", bridge)
	}
	var want []*netlink.Addr
	recorded := map[string]string{}
	for _, p := range gws {
		want = append(want, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}})
		if key := gateway.Key(p); now.ExternalIDs[key] == "" {
			recorded[key] = ovsdb.ClaimValue
		}
	}
	l, err := netlink.LinkByName(bridge)
	if err != nil {
		// The internal interface exists once ovs-vswitchd has given it an ofport.
		if _, err := cli.WaitOFPort(ctx, bridge); err != nil {
			return err
		}
		if l, err = netlink.LinkByName(bridge); err != nil {
			return fmt.Errorf("looking up bridge interface %q: %w", bridge, err)
		}
	}
	// Usually every container of the network has the same gateway: when the
	// interface is up with the addresses and they are recorded, there is
	// nothing to do.
	if len(recorded) > 0 || l.Attrs().Flags&net.FlagUp == 0 || !hasAddrs(l, want) {
		_ = link.SetSysctl("net/ipv6/conf/"+bridge+"/accept_dad", "0")
		for _, addr := range want {
			if err := netlink.AddrReplace(l, addr); err != nil {
				return fmt.Errorf("adding gateway %s to bridge %q: %w", addr.IPNet, bridge, err)
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting bridge interface %q up: %w", bridge, err)
		}
	}
	// Recorded so that a reconcile can restore them after ovs-vswitchd
	// re-creates the interface.
	if len(recorded) > 0 {
		if err := cli.SetBridgeExternalIDs(ctx, now.UUID, recorded); err != nil {
			return err
		}
		if err := openflow.Apply(ctx, target, flows.GatewayBundle(gws...)); err != nil {
			return fmt.Errorf("bridge %q: gateway flows: %w", bridge, err)
		}
	}
	return nil
}

// hasAddrs reports whether l has every address in want, with its prefix.
func hasAddrs(l netlink.Link, want []*netlink.Addr) bool {
	have, err := netlinksafe.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return false
	}
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.IPNet.IP.Equal(w.IPNet.IP) && h.IPNet.Mask.String() == w.IPNet.Mask.String() {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// CmdDel detaches a container interface, as named steps in the reverse of
// ADD's order: the deleting mark, the flows, the host ports, the port, the
// veth, the IP allocation. It needs nothing but what the runtime passes,
// and succeeds when the netns, veth, port or allocation are gone. With
// OVSDB unreachable it cannot know whether the port is gone: it fails with
// code 11 (cnicmd.OpenDel) and releases nothing, not even the address,
// which would otherwise go back to the pool while the port holding it,
// and its host ports, stay.
func CmdDel(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	ctx, cli, done, err := cnicmd.OpenDel(conf.Endpoints, conf.Budget, args)
	if errors.Is(err, cnicmd.ErrNeverServed) {
		return nil
	}
	if err != nil {
		return conf.Endpoints.Explain(err)
	}
	defer done()
	var l laps
	l.startLaps()
	ports, err := detach(ctx, cli, conf, args, &l)
	if err != nil {
		return err
	}
	if err := l.did("veth", dropVeth(conf, args)); err != nil {
		return err
	}
	plugin, stdin, err := releaseWith(conf, args.StdinData, ports)
	if err != nil {
		return err
	}
	if plugin != "" {
		if err := ipam.Del(ctx, plugin, stdin); l.did("ipam", err) != nil {
			return fmt.Errorf("ipam %q: %w", plugin, err)
		}
	}
	return nil
}

// dropVeth deletes the attachment's veth, or with "leaveVethToNetns" takes
// its host end down (the container end loses its carrier) and leaves the
// pair to go with the netns: the kernel destroys a veth whose end's netns
// is deleted, after the DEL, off the runtime's path. A netns that the
// runtime keeps keeps the pair, down, until an ADD of the same attachment
// (replacePrevious), an ADD of another one with its ifname (createVeth), or
// GC deletes it.
func dropVeth(conf *NetConf, args *skel.CmdArgs) error {
	name := link.HostVethName(args.ContainerID, args.IfName)
	if conf.LeaveVethToNetns && args.Netns != "" {
		return link.SetDown(name)
	}
	return link.Delete(name)
}

// detach is DEL's part in OVSDB and OpenFlow: the attachment's port, flows,
// host ports and limits go under a deleting mark, so that a sweep meanwhile
// restores none of its flows. It returns the ports it removed.
func detach(ctx context.Context, cli *ovsdb.Client, conf *NetConf, args *skel.CmdArgs, l *laps) ([]ovsdb.OwnedPort, error) {
	del, err := cli.BeginDelete(ctx, ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName})
	if err := l.did("mark", err); err != nil {
		return nil, err
	}
	ports := del.Ports
	if err := l.did("flows", cutOff(ctx, conf, ports)); err != nil {
		return nil, err
	}
	if len(ports) == 0 && del.Claimed() {
		// An ADD that died before its insert left its flows (they go in
		// before the port, after the claim): they go by the attachment's
		// cookie, which is its own.
		err := openflow.DeleteFlows(ctx, conf.Endpoints.OpenFlowOf(conf.Bridge),
			flows.AttachmentCookie(args.ContainerID, args.IfName).AttachmentDelete())
		if openflow.NotServed(err) {
			err = nil
		}
		if err := l.did("claimed flows", err); err != nil {
			return nil, err
		}
	}
	if err := l.did("host ports", hostport.Withdraw(ctx, cli, ports)); err != nil {
		return nil, err
	}
	if err := l.did("limits", withdrawLimits(ctx, cli, ports)); err != nil {
		return nil, err
	}
	if err := l.did("port", cli.Finish(ctx, del)); err != nil {
		return nil, err
	}
	withdrawGateways(ctx, cli, conf, ports)
	return ports, nil
}

// withdrawGateways withdraws the gateways of the bridge that no port needs
// any more, and their flows, once ports are gone (pkg/gateway). It is cleanup: a failure
// leaves them to the next DEL or reconcile, and the DEL succeeds.
func withdrawGateways(ctx context.Context, cli *ovsdb.Client, conf *NetConf, ports []ovsdb.OwnedPort) {
	if !conf.IsGateway || len(ports) == 0 {
		return
	}
	var claimed []netip.Prefix
	for _, p := range ports {
		claimed = append(claimed, record.Gateways(p.Port.ExternalIDs)...)
	}
	gone, err := gateway.WithdrawOn(ctx, cli, conf.Bridge, claimed)
	if len(gone) > 0 {
		cnilog.Note("bridge %s: gateways %v withdrawn", conf.Bridge, gone)
		// Their flows on LOCAL go with them; left behind, reconcile
		// removes them.
		if err := openflow.Apply(ctx, portSecTarget(conf), flows.GatewayDelete(gone...)); err != nil {
			cnilog.Note("bridge %s: removing the flows of gateways %v: %v", conf.Bridge, gone, err)
		}
	}
	if err != nil {
		cnilog.Note("bridge %s: withdrawing unused gateways: %v", conf.Bridge, err)
	}
}

// withdrawChained removes what is recorded on ports besides ovs-bridge's
// own flows: the host ports (by ovs-portmap, or by ovs-bridge itself for
// Mesos) and the limits (ovs-bandwidth's egress meter and QoS rows, which
// OVSDB and ovs-vswitchd keep when the port and its flows go). So nothing
// outlives the port when the chained plugin's DEL is never called: a GC
// (ovs-bridge's runs first), an ADD that replaces the attachment.
func withdrawChained(ctx context.Context, cli *ovsdb.Client, ports []ovsdb.OwnedPort) error {
	if err := hostport.Withdraw(ctx, cli, ports); err != nil {
		return err
	}
	return withdrawLimits(ctx, cli, ports)
}

// withdrawLimits removes the limits recorded on ports (withdrawChained).
func withdrawLimits(ctx context.Context, cli *ovsdb.Client, ports []ovsdb.OwnedPort) error {
	var limited []ovsdb.OwnedPort
	for _, p := range ports {
		if _, ok := p.Port.ExternalIDs[record.KeyBandwidth]; ok {
			limited = append(limited, p)
		}
	}
	return bandwidth.Withdraw(ctx, cli, limited)
}

// CmdCheck verifies that what ADD built is still there, naming what drifted.
func CmdCheck(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	prev, err := cnicmd.PrevResult(&conf.PluginConf, "CHECK needs a prevResult")
	if err != nil {
		return err
	}
	ctx, cli, done, err := cnicmd.Open(conf.Endpoints.OVSDB, conf.Budget)
	if err != nil {
		return conf.Endpoints.Explain(err)
	}
	defer done()
	if conf.IPAM.Type != "" {
		if err := ipam.Check(ctx, conf.IPAM.Type, args.StdinData); err != nil {
			return fmt.Errorf("ipam %q: %w", conf.IPAM.Type, err)
		}
	}

	hostName := link.HostVethName(args.ContainerID, args.IfName)
	ports, err := cli.FindPorts(ctx, ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName})
	if err != nil {
		return err
	}
	if len(ports) != 1 {
		return fmt.Errorf("port %q of %s/%s: found %d ports with our external_ids, want 1", hostName, args.ContainerID, args.IfName, len(ports))
	}
	p := ports[0]
	onBridge, err := cli.BridgeHasPort(ctx, conf.Bridge, p.Port.UUID)
	if err != nil {
		return err
	}
	if !onBridge {
		return fmt.Errorf("port %q is not on bridge %q", p.Port.Name, conf.Bridge)
	}
	wantTag := 0
	if conf.VLAN != nil {
		wantTag = *conf.VLAN
	}
	gotTag := 0
	if p.Port.Tag != nil {
		gotTag = *p.Port.Tag
	}
	if gotTag != wantTag {
		return fmt.Errorf("port %q: VLAN tag is %d, want %d", p.Port.Name, gotTag, wantTag)
	}
	gotTrunks := slices.Clone(p.Port.Trunks)
	wantTrunks := slices.Clone(conf.Trunks)
	slices.Sort(gotTrunks)
	slices.Sort(wantTrunks)
	if !slices.Equal(gotTrunks, wantTrunks) {
		return fmt.Errorf("port %q: trunks are %v, want %v", p.Port.Name, gotTrunks, wantTrunks)
	}
	if p.Interface.OFPort == nil || *p.Interface.OFPort <= 0 {
		return fmt.Errorf("port %q: ovs-vswitchd has no ofport for it", p.Port.Name)
	}
	if conf.OFPortRequest != nil && *p.Interface.OFPort != *conf.OFPortRequest {
		return fmt.Errorf("port %q: ofport is %d, want %d (ofport_request)", p.Port.Name, *p.Interface.OFPort, *conf.OFPortRequest)
	}
	if got := p.Interface.ExternalIDs[ovsdb.KeyOVNIfaceID]; got != conf.OVNPort {
		return fmt.Errorf("port %q: Interface external_ids:%s is %q, want %q (ovnPort)", p.Port.Name, ovsdb.KeyOVNIfaceID, got, conf.OVNPort)
	}
	if err := checkFlows(ctx, p); err != nil {
		return err
	}
	hostLink, err := netlink.LinkByName(hostName)
	if err != nil {
		return fmt.Errorf("host veth %q: %w", hostName, err)
	}
	if conf.MTU > 0 && hostLink.Attrs().MTU != conf.MTU {
		return fmt.Errorf("host veth %q: MTU is %d, want %d", hostName, hostLink.Attrs().MTU, conf.MTU)
	}

	var contIf *current.Interface
	for _, i := range prev.Interfaces {
		if i != nil && i.Name == args.IfName && i.Sandbox != "" {
			contIf = i
		}
	}
	if contIf == nil {
		return fmt.Errorf("prevResult has no interface %q with a sandbox", args.IfName)
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return fmt.Errorf("opening netns %q: %w", args.Netns, err)
	}
	defer netns.Close()
	return netns.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(args.IfName)
		if err != nil {
			return fmt.Errorf("container interface %q: %w", args.IfName, err)
		}
		if got := l.Attrs().HardwareAddr.String(); contIf.Mac != "" && got != contIf.Mac {
			return fmt.Errorf("container interface %q: MAC is %s, want %s", args.IfName, got, contIf.Mac)
		}
		if conf.MTU > 0 && l.Attrs().MTU != conf.MTU {
			return fmt.Errorf("container interface %q: MTU is %d, want %d", args.IfName, l.Attrs().MTU, conf.MTU)
		}
		if err := ipam.CheckAddresses(args.IfName, prev.IPs); err != nil {
			return fmt.Errorf("container interface %q: %w", args.IfName, err)
		}
		if err := ipam.CheckRoutes(prev.Routes); err != nil {
			return fmt.Errorf("container interface %q: %w", args.IfName, err)
		}
		return nil
	})
}

// checkFlows compares the port's table-0 flows with what its record says
// they must be (openflow.Diff), and finds the flows of any other attachment
// on its ofport.
func checkFlows(ctx context.Context, p ovsdb.OwnedPort) error {
	target, c, want, ok := portsec.Rebuild(p)
	if !ok {
		return nil // port security off and untagged: no flows of its own
	}
	ofport := uint32(*p.Interface.OFPort)
	suite := flows.SuiteDelete()
	dumped, err := openflow.Dump(ctx, target, suite.Cookie, suite.Mask)
	if err != nil {
		return err
	}
	var got []openflow.Flow
	own, _ := c.AnyKind()
	for _, f := range dumped {
		fc := flows.Cookie(f.Cookie)
		if fc == c {
			got = append(got, f)
			continue
		}
		v, _ := fc.AnyKind()
		if in, ok := f.Match.InPortOf(); ok && in == ofport && f.Table == flows.TableClassifier && v != own &&
			fc.Kind() != flows.CookieKindShared && fc.Kind() != flows.CookieKindTombstone {
			return fmt.Errorf("port %q (ofport %d): a flow of another attachment matches its frames: %s", p.Port.Name, ofport, f)
		}
	}
	if err := openflow.Diff(want, got); err != nil {
		return fmt.Errorf("port %q (ofport %d): port security flows: %w", p.Port.Name, ofport, err)
	}
	return nil
}

// CmdGC removes our ports on this bridge and network whose attachment is not
// in cni.dev/valid-attachments, each as DEL does (collect), then delegates
// GC to IPAM.
func CmdGC(args *skel.CmdArgs) error {
	gc, err := cnicmd.OpenGC(args, loadConf)
	if err != nil {
		return err
	}
	defer gc.Close()
	ctx, cli, conf := gc.Ctx, gc.OVSDB, gc.Conf
	keep := map[string]bool{}
	for _, a := range conf.ValidAttachments {
		keep[link.Alias(conf.Name, a.ContainerID, a.IfName)] = true
	}
	seen := map[ovsdb.Attachment]bool{}
	for _, p := range gc.Stale {
		a := p.Attachment()
		if seen[a] {
			continue
		}
		seen[a] = true
		left, err := collect(ctx, cli, conf, a)
		if err != nil {
			return err
		}
		if left {
			keep[link.Alias(conf.Name, a.ContainerID, a.IfName)] = true
		}
	}
	// Veths of this network whose port is already gone (a DEL or an ADD
	// killed half way, never retried) are found by their alias; those of
	// an ADD in flight (its veth is there before its port) stay. The
	// claims are read after the links are listed: an ADD claims before
	// it creates its veth.
	var adding map[string]bool
	var addingErr error
	if err := link.DeleteOrphans(link.AliasPrefix(conf.Name), func(alias string) bool {
		if keep[alias] {
			return true
		}
		if adding == nil && addingErr == nil {
			var in map[ovsdb.Attachment]bool
			if in, addingErr = cli.Adding(ctx); addingErr == nil {
				adding = map[string]bool{}
				for a := range in {
					adding[link.Alias(conf.Name, a.ContainerID, a.IfName)] = true
				}
			}
		}
		return addingErr != nil || adding[alias]
	}); err != nil {
		return err
	}
	if addingErr != nil {
		return addingErr
	}
	if conf.IPAM.Type != "" {
		if err := ipam.GC(ctx, conf.IPAM.Type, args.StdinData); err != nil {
			return fmt.Errorf("ipam %q gc: %w", conf.IPAM.Type, err)
		}
	}
	return nil
}

// collect removes the ports of stale attachment a on this bridge and
// network as DEL does: marked as under way first (ovsdb.BeginDelete; a
// reconcile meanwhile restores none of its flows), with its ports as the
// marking transaction reads them, not as GC first listed them, and removed
// with the mark (ovsdb.Finish). An attachment with an ADD in flight (its
// claims) is that ADD's, which replaces the port itself: collect leaves it
// and reports so.
func collect(ctx context.Context, cli *ovsdb.Client, conf *NetConf, a ovsdb.Attachment) (bool, error) {
	del, err := cli.BeginDelete(ctx, a)
	if err != nil {
		return false, err
	}
	if del.Claimed() {
		return true, cli.Abandon(ctx, del)
	}
	var ports []ovsdb.OwnedPort
	for _, p := range del.Ports {
		if ids := p.Port.ExternalIDs; ids[ovsdb.KeyNetwork] == conf.Name && ids[ovsdb.KeyBridge] == conf.Bridge {
			ports = append(ports, p)
		}
	}
	del.Ports = ports
	if err := cutOff(ctx, conf, ports); err != nil {
		return false, err
	}
	if err := withdrawChained(ctx, cli, ports); err != nil {
		return false, err
	}
	if err := cli.Finish(ctx, del); err != nil {
		return false, err
	}
	withdrawGateways(ctx, cli, conf, ports)
	for _, p := range ports {
		if err := link.Delete(p.Port.Name); err != nil {
			return false, err
		}
	}
	return false, nil
}

// rangesConfirmed: where conf names the node agent's confirmation, an
// error of kind unless it holds this network's IPAM ranges (a conflist left
// from before the Node was registered again must not give out addresses).
func rangesConfirmed(conf *NetConf, stdin []byte, kind cnierr.Kind) error {
	if conf.ConfirmedRanges == "" {
		return nil
	}
	if err := noderanges.Check(conf.ConfirmedRanges, stdin); err != nil {
		return cnierr.Wrap(kind, "pod ranges not confirmed", err)
	}
	return nil
}

// CmdStatus reports whether the plugin can serve ADDs: OVSDB reachable and the
// bridge present (or creatable) and served by ovs-vswitchd.
func CmdStatus(args *skel.CmdArgs) error {
	conf, err := LoadConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if err := rangesConfirmed(conf, args.StdinData, cnierr.Unavailable); err != nil {
		return err
	}
	ctx, cli, done, err := cnicmd.Status(conf.Endpoints.OVSDB)
	if err != nil {
		return err
	}
	defer done()
	br, err := cli.Bridge(ctx, conf.Bridge)
	if err != nil {
		return cnierr.Wrap(cnierr.Unavailable, "ovsdb unusable", err)
	}
	if br == nil && !conf.CreateBridge {
		return cnierr.New(cnierr.Unavailable, fmt.Sprintf("bridge %q does not exist", conf.Bridge), "")
	}
	// A bridge row that no ovs-vswitchd serves (it stopped, or has not
	// started yet) takes no port and forwards nothing: an ADD now would
	// wait for it and time out, so the runtime must not start pods here.
	if target := conf.Endpoints.OpenFlowOf(conf.Bridge); br != nil && !endpoint.Listening(target) {
		return cnierr.New(cnierr.Unavailable, fmt.Sprintf("bridge %q is not served", conf.Bridge),
			fmt.Sprintf("no ovs-vswitchd listens on %s", target))
	}
	if conf.IPAM.Type != "" {
		if err := ipam.Status(ctx, conf.IPAM.Type, args.StdinData); err != nil {
			// Only the IPAM plugin's own answer says it is unavailable: on
			// a saturated node its STATUS may not end within ours, and a
			// runtime told "not ready" for that stops starting pods on a
			// node that serves them (kubelet's NetworkNotReady).
			if ctx.Err() != nil {
				cnilog.Note("ipam %q did not answer within %s (a busy node): not reported as unavailable", conf.IPAM.Type, cnicmd.StatusTimeout)
				fmt.Fprintf(os.Stderr, "ovs-bridge: STATUS: ipam %q did not answer within %s (a busy node): not reported as unavailable\n", conf.IPAM.Type, cnicmd.StatusTimeout)
				return nil
			}
			return fmt.Errorf("ipam %q: %w", conf.IPAM.Type, err)
		}
	}
	return nil
}
