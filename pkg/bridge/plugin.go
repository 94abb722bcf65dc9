package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/gateway"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/ipam"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/netns"
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
