package bridge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/cnilog"
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
	"github.com/ovsflow/ovs-cni/pkg/rollback"
)

// contIndex is the container interface's index in the result (the host
// end's is 0).
const contIndex = 1

// StepTimer, when set, is told how long each named step of an ADD or a DEL
// took, in the order they ran (a benchmark's breakdown of the commands).
// Nil, the default, costs nothing.
var StepTimer func(step string, took time.Duration)

// laps ends the named steps of one command for StepTimer.
type laps struct {
	last time.Time // when the last step ended (StepTimer set)
}

// startLaps starts the first step's clock.
func (l *laps) startLaps() {
	if StepTimer != nil {
		l.last = time.Now()
	}
}

// did ends the named step: it tells StepTimer, when set, how long the step
// took (since the previous one ended), and returns its error.
func (l *laps) did(step string, err error) error {
	if StepTimer != nil {
		now := time.Now()
		StepTimer(step, now.Sub(l.last))
		l.last = now
	}
	return err
}

// adding is one ADD under way: its inputs, what its steps found or made so
// far, and the clean-up armed as each step succeeded (undo).
type adding struct {
	args     *skel.CmdArgs
	conf     *NetConf
	ctx      context.Context
	cli      *ovsdb.Client
	att      ovsdb.Attachment
	hostName string
	result   *current.Result

	br       *ovsdb.Bridge
	netdev   bool
	previous []ovsdb.OwnedPort
	netns    ns.NetNS
	contMAC  net.HardwareAddr   // requested for the veth; nil: the kernel chooses it (dhcp without "mac")
	mac      openflow.MAC       // the container interface's, once prepareContEnd read it
	ps       flows.PortSecurity // the facts of the port flows secure last installed
	retry    bool               // an earlier ADD's attachment was replaced
	pending  *ipam.Pending
	res      ovsdb.Reservation
	hostLink netlink.Link
	spec     ovsdb.PortSpec
	portUUID string
	ofport   int

	allocated bool // IPAM allocated addresses: a failed ADD releases them
	portLeft  bool // the port could not be rolled back: the veth stays, so DEL knows (code 11)
	undo      rollback.List
	laps
}

// CmdAdd attaches a container interface, as a sequence of named steps in
// the order of the reference bridge plugin's cmdAdd (veth, then IPAM, so
// that dhcp can run on the attached interface). Each step that creates
// something arms its removal on one rollback list, which a failed ADD runs
// last armed first: port, veth, flows, claims, IP allocation. The static
// path (IPAM known before the port) and the dhcp path (IPAM on the attached
// port) are apart: addStatic and addDHCP.
//
// No frame from the container is forwarded before its port flows are in.
// They go in before the port exists, for the ofport and cookie the ADD
// claimed first (ovsdb.Reserve), which the port's insert then takes over;
// with dhcp, the flows of a port without addresses (DHCP client
// broadcasts, link-local), replaced once the lease is in. ovs-vswitchd
// reconfigures the whole bridge on every link change and every insert, and
// answers OpenFlow only between reconfigurations: so the veth is made, in
// its final state, while IPAM runs (the reconfiguration its link changes
// start runs meanwhile), and the bundle and the insert come after, so that
// the insert's is the only reconfiguration the ADD waits for. On the kernel
// datapath the container end comes up after the insert, since an
// unattached host end would hand its frames to the node's IP stack. With
// dhcp, the host end stays down (the container end has no carrier) until
// the flows of a port without addresses are in.
func CmdAdd(args *skel.CmdArgs) (retErr error) {
	conf, err := LoadConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if ran, err := handOffTLS(args, conf); ran {
		return err
	}
	if err := notOwnNetNS(args.Netns); err != nil {
		return err
	}
	if err := rangesConfirmed(conf, args.StdinData, cnierr.TryAgain); err != nil {
		return err
	}
	ctx, cli, done, err := cnicmd.Open(conf.Endpoints.OVSDB, conf.Budget)
	if err != nil {
		return conf.Endpoints.Explain(err)
	}
	defer done()
	hostName := link.HostVethName(args.ContainerID, args.IfName)
	a := &adding{args: args, conf: conf, ctx: ctx, cli: cli,
		att:      ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName},
		hostName: hostName,
		result: &current.Result{CNIVersion: current.ImplementedSpecVersion, DNS: conf.DNS,
			Interfaces: []*current.Interface{{Name: hostName}, {Name: args.IfName, Sandbox: args.Netns}}}}
	defer func() {
		if retErr != nil {
			a.undo.Run(a.ctx)
		}
		if a.netns != nil {
			a.netns.Close()
		}
	}()
	a.startLaps()
	if conf.IPAM.Type == "dhcp" {
		err = a.addDHCP()
	} else {
		err = a.addStatic()
	}
	if err != nil {
		return err
	}
	return types.PrintResult(a.result, conf.CNIVersion)
}

// addStatic is the ADD of an attachment whose addresses IPAM gives before
// the port exists (or that has none): IPAM runs while the veth is made,
// the port goes in with its final flows, the container end is configured
// last (on the kernel datapath).
func (a *adding) addStatic() error {
	if err := a.begin(); err != nil {
		return err
	}
	if err := a.did("ipam start", a.startIPAM()); err != nil {
		return err
	}
	if err := a.makeVeth(); err != nil {
		return err
	}
	if err := a.did("ipam wait", a.waitIPAM()); err != nil {
		return err
	}
	if err := a.did("allowed", a.allowedFree()); err != nil {
		return err
	}
	if err := a.did("addresses, netdev", a.addressBeforePort()); err != nil {
		return err
	}
	if err := a.did("port flows", a.secure()); err != nil {
		return err
	}
	if err := a.did("port", a.attachPort()); err != nil {
		return err
	}
	if err := a.did("announce", a.announce()); err != nil {
		return err
	}
	return a.finish()
}

// addDHCP is the ADD of an attachment whose addresses dhcp leases on the
// attached port: the port goes in with the flows of a port without
// addresses, its host end comes up, the lease is taken, and the flows are
// replaced by those of its addresses.
func (a *adding) addDHCP() error {
	a.undo.Arm(a.releaseIPAM)
	if err := a.begin(); err != nil {
		return err
	}
	if err := a.makeVeth(); err != nil {
		return err
	}
	if err := a.did("port flows", a.secure()); err != nil {
		return err
	}
	if err := a.did("port", a.attachPort()); err != nil {
		return err
	}
	if err := a.did("link up", a.hostUp()); err != nil {
		return err
	}
	if err := a.did("dhcp", a.lease()); err != nil {
		return err
	}
	if err := a.did("allowed", a.allowedFree()); err != nil {
		return err
	}
	if err := a.did("port flows, lease", a.secure()); err != nil {
		return err
	}
	return a.finish()
}

// begin finds the bridge and what an earlier ADD of the attachment left,
// and replaces it.
func (a *adding) begin() error {
	if err := a.did("bridge", a.findBridge()); err != nil {
		return err
	}
	if err := a.did("previous", a.findPrevious()); err != nil {
		return err
	}
	if err := a.did("netns", a.openNetNS()); err != nil {
		return err
	}
	if err := a.did("replace previous", a.replacePrevious()); err != nil {
		return err
	}
	return nil
}

// makeVeth claims the ofport and cookie, then makes and prepares the veth.
func (a *adding) makeVeth() error {
	if err := a.did("sync", a.syncPending()); err != nil {
		return err
	}
	if err := a.did("mac", a.chooseMAC()); err != nil {
		return err
	}
	if err := a.did("claim", a.claim()); err != nil {
		return err
	}
	if err := a.did("veth", a.createVeth()); err != nil {
		return err
	}
	if err := a.did("container", a.prepareContEnd()); err != nil {
		return err
	}
	return nil
}

// finish checks the addresses again, configures the container end where
// it is not yet, and puts the gateway and the host ports in.
func (a *adding) finish() error {
	if err := a.did("allowed again", a.allowedFree()); err != nil {
		return err
	}
	if err := a.did("addresses", a.addressAfterPort()); err != nil {
		return err
	}
	if err := a.did("gateway", a.putGateway()); err != nil {
		return err
	}
	if err := a.did("host ports", a.hostPorts()); err != nil {
		return err
	}
	return nil
}

func (a *adding) dhcp() bool { return a.conf.IPAM.Type == "dhcp" }

// findBridge finds (or, with createBridge, creates) the configured bridge,
// which ovs-vswitchd must serve (ensureServed).
func (a *adding) findBridge() (err error) {
	var br *ovsdb.Bridge
	if a.conf.CreateBridge {
		br, err = a.cli.EnsureBridge(a.ctx, a.conf.Bridge, a.conf.DatapathType)
	} else {
		br, err = a.cli.Bridge(a.ctx, a.conf.Bridge)
	}
	if err != nil {
		return err
	}
	if br == nil {
		return invalid(`"bridge" %q does not exist (create it, or set "createBridge": true)`, a.conf.Bridge)
	}
	if a.br, err = ensureServed(a.ctx, a.cli, a.conf, br); err != nil {
		return err
	}
	a.netdev = a.br.DatapathType == "netdev"
	return nil
}

// findPrevious finds the ports an earlier ADD of the attachment left, and
// refuses a runtime-supplied MAC that is another container's, the bridge's
// or an uplink's: it would receive their traffic.
func (a *adding) findPrevious() (err error) {
	if a.previous, err = a.cli.FindPorts(a.ctx, a.att); err != nil {
		return err
	}
	if a.conf.MAC != nil {
		if err := a.cli.MACHolder(a.ctx, a.conf.MAC.String(), a.att); err != nil {
			return macError(err)
		}
	}
	return nil
}

func (a *adding) openNetNS() (err error) {
	if a.netns, err = ns.GetNS(a.args.Netns); err != nil {
		return fmt.Errorf("opening netns %q: %w", a.args.Netns, err)
	}
	return nil
}

// replacePrevious clears what an earlier ADD of the same attachment left
// (a retried ADD replaces its own attachment): its port, with its host
// ports, limits and flows (their records are on the row), its address and
// its veth. It makes sure ovs-vswitchd has let go of an old device of the
// same name (that ADD's, or one a DEL just removed) before the new one
// appears: else it keeps reading the deleted one. When there is nothing to
// replace, syncPending waits for pending changes instead (retry).
func (a *adding) replacePrevious() error {
	var err error
	switch {
	case len(a.previous) > 0:
		a.retry = true
		if err := cutOff(a.ctx, a.conf, a.previous); err != nil {
			return err
		}
		if err := withdrawChained(a.ctx, a.cli, a.previous, untimed); err != nil {
			return err
		}
		err = a.cli.DetachPortsAndSync(a.ctx, ovsdb.PortUUIDs(a.previous)...)
	case link.Exists(a.hostName):
		a.retry = true
		err = a.cli.SyncPending(a.ctx)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	if a.conf.IPAM.Type != "" {
		// host-local refuses a second allocation for the same container.
		_ = ipam.Del(a.ctx, a.conf.IPAM.Type, a.args.StdinData)
	}
	return link.Delete(a.hostName) // its container end goes with it
}

// startIPAM starts IPAM in the background: the veth's link changes reach
// ovs-vswitchd, and its reconfiguration of the bridge runs, meanwhile. A
// failed ADD waits for it and releases what it allocated.
func (a *adding) startIPAM() error {
	if a.conf.IPAM.Type != "" {
		a.pending = ipam.Start(a.ctx, a.conf.IPAM.Type, a.args.StdinData)
	}
	a.undo.Arm(a.releaseIPAM)
	return nil
}

// releaseIPAM is the clean-up of IPAM: its allocation, once it returned
// one (a pending ADD is waited for).
func (a *adding) releaseIPAM(ctx context.Context) {
	if a.pending != nil {
		_, err := a.pending.Wait()
		a.pending, a.allocated = nil, err == nil
	}
	if a.allocated {
		_ = ipam.Del(ctx, a.conf.IPAM.Type, a.args.StdinData)
	}
}

// syncPending makes sure, unless replacePrevious did, that every port
// removal that was committed has been applied by ovs-vswitchd: an ofport no
// Interface row holds is free there too, and so is the name of a device a
// DEL just removed.
func (a *adding) syncPending() error {
	if a.retry {
		return nil
	}
	return a.cli.SyncPending(a.ctx)
}

// chooseMAC takes the configured MAC, or without dhcp a random one: MAC
// and ofport are known before the veth exists, the addresses once IPAM
// returns, so the flows go in before the port, whose insert then is the
// only reconfiguration the ADD waits for. With dhcp and no "mac" the
// kernel chooses it.
func (a *adding) chooseMAC() error {
	a.contMAC = a.conf.MAC
	if !a.dhcp() && a.contMAC == nil {
		var err error
		if a.contMAC, err = link.RandomMAC(); err != nil {
			return err
		}
	}
	if a.contMAC != nil {
		a.result.Interfaces[contIndex].Mac = a.contMAC.String()
	}
	return nil
}

// claim claims the ofport and the cookie before any flow goes in for them
// (claim, then act). A failed ADD removes the cookie's flows, then lets the
// claim go.
func (a *adding) claim() error {
	if err := a.reserveOFPort(); err != nil {
		return err
	}
	a.ofport = a.res.OFPort
	a.undo.Arm(func(ctx context.Context) { _ = a.cli.Release(ctx, a.res) })
	a.undo.Arm(func(ctx context.Context) {
		_ = openflow.DeleteFlows(ctx, a.conf.Endpoints.OpenFlowOf(a.conf.Bridge),
			flows.AttachmentCookie(a.args.ContainerID, a.args.IfName).AttachmentDelete())
	})
	return nil
}

// reserveOFPort claims the attachment's ofport into res (reserve): the one
// "ofport_request" names, or else the first free one from its home on. A
// requested one that another interface requests or holds is code 7.
func (a *adding) reserveOFPort() error {
	requested := a.conf.OFPortRequest
	if requested == nil {
		return a.reserve(ovsdb.HomeOFPort(a.att))
	}
	if err := a.reserve(*requested); err != nil {
		return err
	}
	if a.res.OFPort != *requested {
		_ = a.cli.Release(a.ctx, a.res)
		a.res = ovsdb.Reservation{}
		return ofportTaken(a.conf)
	}
	return nil
}

// reserve claims into res an ofport from home on and the attachment's
// cookie (ovsdb.Reserve). A cookie held by another attachment (their
// 40-bit hashes meet) is refused: the two would remove each other's flows.
func (a *adding) reserve(home int) (err error) {
	c := flows.AttachmentCookie(a.att.ContainerID, a.att.IfName)
	a.res, err = a.cli.Reserve(a.ctx, a.att, home, c.String())
	var taken *ovsdb.IdentityTakenError
	if errors.As(err, &taken) {
		return cnierr.New(cnierr.Environment,
			fmt.Sprintf("CNI_CONTAINERID %q with CNI_IFNAME %q: its flows' cookie %s is that of attachment %s", a.att.ContainerID, a.att.IfName, c, taken.Holder),
			"choose another container ID or interface name")
	}
	return err
}

// createVeth makes the veth, its container end created in place and the
// host end in its final state (promiscuous, as the datapath makes it; down
// for dhcp, see CmdAdd). On the userspace datapath the host end is kept
// from answering ARP (with the veth's MAC) or running IPv6: the datapath
// reads it through a packet socket, so the node's kernel sees every frame
// too.
func (a *adding) createVeth() (err error) {
	spec := link.VethSpec{HostName: a.hostName, ContName: a.args.IfName, HostDown: a.dhcp(), Promisc: true,
		ContNSFd: int(a.netns.Fd()), MTU: a.conf.MTU, ContMAC: a.contMAC, Alias: link.Alias(a.conf.Name, a.args.ContainerID, a.args.IfName)}
	a.hostLink, err = link.CreateVeth(spec)
	if errors.Is(err, syscall.EEXIST) {
		// The netns may hold the ifname of a veth that a DEL left to it
		// ("leaveVethToNetns"): that one goes, another stays.
		left, lerr := link.LeftToNetns(a.netns, a.args.IfName)
		if lerr != nil {
			return lerr
		}
		if left != "" {
			if err := link.Delete(left); err != nil {
				return err
			}
			a.hostLink, err = link.CreateVeth(spec)
		}
	}
	if err != nil {
		return err
	}
	a.undo.Arm(func(context.Context) {
		if !a.portLeft {
			_ = link.Delete(a.hostName)
		}
	})
	a.result.Interfaces[0].Mac = a.hostLink.Attrs().HardwareAddr.String()
	if a.netdev {
		return link.Isolate(a.hostName)
	}
	return nil
}

// prepareContEnd runs inside the container netns before the addresses are
// known: sysctls, TX offload, and, on the userspace datapath or with dhcp,
// the link up (dhcp needs it; on the userspace datapath its carrier then
// reaches ovs-vswitchd while IPAM runs). It reads the MAC.
func (a *adding) prepareContEnd() error {
	ifname, up := a.args.IfName, a.dhcp() || a.netdev
	// Addresses come from IPAM and are unique: skip DAD so IPv6 works at once,
	// and announce them (gratuitous ARP / unsolicited NA) when the link comes
	// up. The link-local address is the EUI-64 one of the MAC, whatever the
	// netns' default, because port security allows exactly that one.
	conf := link.Sysctls{IPv4: map[string]string{"arp_notify": "1"},
		IPv6: map[string]string{"accept_dad": "0", "ndisc_notify": "1", "addr_gen_mode": "0"}}
	if a.conf.IPAM.Type != "" && !a.conf.AllowRouter {
		// Addresses and routes come from IPAM: no router advertisement
		// may change them (port security drops them from containers; this
		// also covers those from behind the uplink).
		conf.IPv6["accept_ra"] = "0"
	}
	return a.netns.Do(func(ns.NetNS) error {
		var err error
		a.mac, err = containerMAC(ifname, conf, a.netdev, up)
		a.result.Interfaces[contIndex].Mac = a.mac.String()
		return err
	})
}

// containerMAC prepares the container end ifname (prepareContEnd) and
// returns its MAC.
func containerMAC(ifname string, conf link.Sysctls, netdev, up bool) (openflow.MAC, error) {
	if err := link.SetSysctls(ifname, conf); err != nil {
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

// waitIPAM waits for the IPAM that startIPAM started and takes its result.
func (a *adding) waitIPAM() error {
	if a.pending == nil {
		return nil
	}
	r, err := a.pending.Wait()
	a.pending = nil
	return a.useIPAM(r, err)
}

// lease runs dhcp on the attached port.
func (a *adding) lease() error {
	r, err := ipam.Add(a.ctx, a.conf.IPAM.Type, a.args.StdinData)
	return a.useIPAM(r, err)
}

// useIPAM puts what an IPAM ADD returned (r, or its error) into the
// result, and notes whether the call allocated addresses (a failed ADD
// releases them).
func (a *adding) useIPAM(r types.Result, err error) error {
	a.allocated = false
	if err != nil {
		return fmt.Errorf("ipam %q: %w", a.conf.IPAM.Type, err)
	}
	a.allocated = true
	ipamResult, err := current.NewResultFromResult(r)
	if err != nil {
		return fmt.Errorf("ipam %q result: %w", a.conf.IPAM.Type, err)
	}
	a.result.IPs, a.result.Routes = ipamResult.IPs, ipamResult.Routes
	if len(ipamResult.DNS.Nameservers) > 0 || len(ipamResult.DNS.Search) > 0 {
		a.result.DNS = ipamResult.DNS
	}
	for _, ipc := range a.result.IPs {
		ipc.Interface = current.Int(contIndex)
	}
	return nil
}

// allowedFree refuses (code 7) an ADD that would let one attachment send
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
// shorter than /32) are checked only here. The ADD asks before it installs
// anything for its addresses and again once its port and record are in:
// of two ADDs that conflict over an allowed range and asked at the same
// moment, the one that reads after both inserts sees the other and fails
// (its rollback removes its port), so never both pass.
func (a *adding) allowedFree() error {
	conf := a.conf
	var own []netip.Addr
	for _, ipc := range a.result.IPs {
		if ip, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			own = append(own, ip.Unmap())
		}
	}
	if len(own) == 0 && len(conf.Allowed) == 0 {
		return nil
	}
	bridgeHas := bridgeAddrs(a.br, a.result)
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
		ports, err = a.cli.OwnedPorts(a.ctx)
	} else {
		ports, err = a.cli.OwnedPortsWith(a.ctx, record.KeyAllowedAddresses, "true")
	}
	if err != nil {
		return err
	}
	for _, p := range ports {
		other := p.Attachment()
		if other == a.att || p.Port.ExternalIDs[ovsdb.KeyBridge] != conf.Bridge {
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

// addressBeforePort configures the container end before its port exists
// on the userspace datapath, where it is up already (static IPAM).
func (a *adding) addressBeforePort() error {
	if !a.netdev {
		return nil
	}
	return a.addressContainer()
}

// addressAfterPort configures the container end, and brings it up, once
// its port exists: on the kernel datapath, and with dhcp.
func (a *adding) addressAfterPort() error {
	if a.netdev && !a.dhcp() {
		return nil
	}
	return a.addressContainer()
}

// addressContainer runs inside the container netns after IPAM: addresses,
// routes, link up.
func (a *adding) addressContainer() error {
	ifname := a.args.IfName
	return a.netns.Do(func(ns.NetNS) error {
		if len(a.result.IPs) > 0 {
			if err := ipam.Configure(a.ctx, ifname, a.result); err != nil {
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
	})
}

// secure builds the facts of the port's table-0 flows from what is known
// so far (portSecurity), installs the flows, and, once the port exists,
// records the facts on it (securePort). A bridge just created
// (createBridge), or one of an ovs-vswitchd restarting, has no OpenFlow
// socket yet: portsec.Apply waits for it.
func (a *adding) secure() error {
	a.ps = a.portSecurity()
	return a.securePort(a.ps, a.portUUID)
}

// portSecurity is what the port flows of the attachment allow on its
// ofport: the container interface's MAC and the addresses in the result so
// far (MAC only without IPAM), the link-local address of the MAC (which
// prepareContEnd pins), and the network's settings. ADD builds it each
// time what it knows changes (the lease, with dhcp); the flows and the
// port's record both come from it.
func (a *adding) portSecurity() flows.PortSecurity {
	conf := a.conf
	ps := flows.PortSecurity{VLAN: portVLAN(conf), OFPort: uint32(a.ofport), MAC: a.mac,
		L2Only: conf.IPAM.Type == "", AllowRouter: conf.AllowRouter, AllowDHCPServer: conf.AllowDHCPServer,
		Allowed: conf.Allowed, AllowVRRP: conf.AllowVRRP, Disabled: !*conf.PortSecurity}
	if conf.IsGateway {
		// The gateways putGateway puts on the bridge: the port's replies
		// to Services go back through them (pkg/flows, gateway.go).
		ps.Gateways = gateways(a.result)
	}
	for _, ipc := range a.result.IPs {
		if ip, ok := netip.AddrFromSlice(ipc.Address.IP); ok {
			ps.IPs = append(ps.IPs, ip.Unmap())
		}
	}
	ps.Cookie = flows.AttachmentCookie(a.args.ContainerID, a.args.IfName)
	ps.LinkLocal = flows.LinkLocalOf(a.mac.HardwareAddr())
	return ps
}

// securePort installs the port's table-0 flows for ps (pkg/portsec) and,
// given portUUID, first records them on the port for reconcile.
func (a *adding) securePort(ps flows.PortSecurity, portUUID string) error {
	return addressError(portsec.Apply(a.ctx, a.cli, portSecTarget(a.conf), ps, a.br.Secure(), a.conf.Bridge, portUUID, record.Gateways(a.br.ExternalIDs)))
}

// attachPort inserts the port, in one transaction, and waits for its
// ofport (insertPort). Its removal is armed before the transaction: when
// the connection breaks mid-commit its outcome is unknown, and the port
// may be there. With dhcp, the port goes in with the record of the flows
// it has until the lease (no addresses yet): a reconcile meanwhile
// rebuilds those, instead of removing them as an attachment's without a
// record.
func (a *adding) attachPort() error {
	conf := a.conf
	a.spec = ovsdb.PortSpec{Name: a.hostName, Trunks: conf.Trunks, ExternalIDs: a.externalIDs()}
	if conf.IsGateway && !a.dhcp() {
		// The port claims its gateways as it goes in (pkg/gateway).
		maps.Copy(a.spec.ExternalIDs, gateway.Claims(gateways(a.result)))
	}
	if conf.VLAN != nil {
		a.spec.Tag = *conf.VLAN
	}
	if conf.MAC != nil {
		a.spec.UniqueMAC = a.result.Interfaces[contIndex].Mac
	}
	if conf.OVNPort != "" {
		a.spec.InterfaceIDs = map[string]string{ovsdb.KeyOVNIfaceID: conf.OVNPort}
	}
	a.undo.Arm(func(ctx context.Context) {
		ports, err := a.cli.FindPorts(ctx, a.att)
		if err == nil {
			err = a.cli.DetachPorts(ctx, ovsdb.PortUUIDs(ports)...)
		}
		a.portLeft = err != nil
	})
	return a.insertPort()
}

// externalIDs are the port's external_ids: the attachment's identity, and
// what DEL, reconcile and the orphan sweep need to know of it.
func (a *adding) externalIDs() map[string]string {
	args, conf := a.args, a.conf
	ids := map[string]string{
		ovsdb.KeyOwner:       ovsdb.OwnerValue,
		ovsdb.KeyContainerID: args.ContainerID,
		ovsdb.KeyIfName:      args.IfName,
		ovsdb.KeyNetNS:       args.Netns,
		ovsdb.KeyNetwork:     conf.Name,
		ovsdb.KeyBridge:      conf.Bridge,
		ovsdb.KeyMAC:         a.result.Interfaces[contIndex].Mac,
	}
	if len(conf.Allowed) > 0 {
		ids[record.KeyAllowedAddresses] = "true"
	}
	if conf.IPAM.Type != "" {
		if raw := ipamSection(args.StdinData); raw != "" {
			ids[record.KeyIPAM] = raw
		}
	}
	if pod := record.PodOf(args.Args); pod != "" {
		ids[record.KeyPod] = pod
	}
	// The namespace itself, not only its path: the orphan sweep tells a
	// sandbox gone from one whose path names another namespace now.
	if ino := netns.Inode(args.Netns); ino != 0 {
		ids[ovsdb.KeyNetNSInode] = strconv.FormatUint(ino, 10)
	}
	return ids
}

// insertPort inserts the port of spec with the ofport and cookie reserved
// in res, whose flows are already in, with the port security record, and
// waits for ovs-vswitchd to attach it. So no bundle waits behind the
// insert's reconfiguration of the bridge, and the port has its flows from
// its first frame. When the insert meets a sweep (reconcile), the flows go
// in again after it, since a sweep after an ovs-vswitchd restart rebuilds
// only what ports record. When ovs-vswitchd gives the port another number
// (one it still held for a port removed meanwhile), the flows follow.
func (a *adding) insertPort() error {
	spec, ps := a.spec, a.ps
	if err := withPortSecRecord(spec, record.NewPortSecurity(portSecTarget(a.conf), ps)); err != nil {
		return err
	}
	// The port takes its addresses in its insert (claim, then act: its
	// flows match an ofport no port has before it).
	var allowed []string
	spec.Claims, spec.Excludes, allowed = record.AddressClaims(a.conf.Bridge, ps)
	for _, k := range allowed {
		spec.ExternalIDs[k] = ovsdb.ClaimValue
	}
	requested := a.conf.OFPortRequest
	for attempt := 0; ; attempt++ {
		spec.OFPort, spec.Reservation = a.res.OFPort, &a.res
		portUUID, err := a.cli.AttachPort(a.ctx, a.br.UUID, spec)
		var taken *ovsdb.OFPortTakenError
		switch {
		case errors.As(err, &taken) && requested != nil:
			return ofportTaken(a.conf)
		case errors.Is(err, ovsdb.ErrClaimLost) && requested != nil && attempt < 8:
			_ = a.cli.Release(a.ctx, a.res)
			if err := a.reserveOFPort(); err != nil {
				return err
			}
		case (errors.As(err, &taken) || errors.Is(err, ovsdb.ErrClaimLost)) && attempt < 8:
			// Requested by an interface a caller outside the suite
			// inserted, or the claim outlived ClaimTTL.
			from := a.res.OFPort
			if taken != nil {
				from++
			}
			_ = a.cli.Release(a.ctx, a.res)
			if err := a.reserve(from); err != nil {
				return err
			}
		case errors.Is(err, ovsdb.ErrSweeping) && attempt < 8:
			if err := a.cli.AfterSweep(a.ctx, a.res); err != nil {
				return err
			}
		case err != nil:
			return addressError(macError(err))
		default:
			got, err := a.cli.WaitOFPort(a.ctx, spec.Name)
			if err != nil {
				return otherNetNS(a.conf, err)
			}
			if err := requestedOFPort(a.conf, got); err != nil {
				return err
			}
			if got != a.res.OFPort {
				if err := a.securePort(onPort(ps, got), ""); err != nil {
					return err
				}
			}
			a.portUUID, a.ofport = portUUID, got
			return nil
		}
		if err := a.securePort(onPort(ps, a.res.OFPort), ""); err != nil {
			return err
		}
	}
}

// hostUp brings the host end up for dhcp, which needs the link: the flows
// of a port without addresses are in, now the carrier.
func (a *adding) hostUp() error {
	return link.SetUp(a.hostLink)
}

// announce repeats, on the userspace datapath, the container end's
// gratuitous ARP and unsolicited NA: it came up before its port existed,
// and they reached no one.
func (a *adding) announce() error {
	if !a.netdev {
		return nil
	}
	var gateways []netip.Addr
	for _, ipc := range a.result.IPs {
		if g, ok := netip.AddrFromSlice(ipc.Gateway); ok {
			gateways = append(gateways, g.Unmap())
		}
	}
	if len(gateways) == 0 {
		return nil
	}
	var skipped []netip.Addr
	err := a.netns.Do(func(ns.NetNS) (err error) {
		skipped, err = link.Announce(a.args.IfName, gateways)
		return err
	})
	if len(skipped) > 0 {
		cnilog.Note("announce: %v not resolved from %q: the kernel's neighbour table is full (gc_thresh3)", skipped, a.args.IfName)
	}
	return err
}

// putGateway puts the gateways on the bridge's interface (isGateway,
// setupGateway), and logs the attachment.
func (a *adding) putGateway() error {
	if a.conf.IsGateway {
		if err := a.setupGateway(); err != nil {
			return err
		}
	}
	cnilog.Note("port %s on %s, ips %v", a.hostName, a.conf.Bridge, ipList(a.result))
	return nil
}

// setupGateway puts each IPAM gateway, with its subnet's prefix, on the
// bridge's internal interface, brings it up and records it on the bridge
// (for reconcile). The port claims its gateways first (pkg/gateway): with
// its row, or here when the port went in without them (dhcp); the bridge's
// record is read again after the claim, since a withdrawal may have
// removed it and the address since the bridge was first read. When it
// records a gateway, it puts the gateway's flows (pkg/flows, gateway.go)
// on the bridge again: the port's bundle had them, but a reconcile or a
// withdrawal since may have removed them as a gateway's without a record.
func (a *adding) setupGateway() error {
	bridge := a.br.Name
	gws := gateways(a.result)
	if len(gws) == 0 {
		return nil
	}
	if a.dhcp() {
		if err := a.cli.SetPortExternalIDs(a.ctx, a.portUUID, gateway.Claims(gws)); err != nil {
			return err
		}
	}
	now, err := a.cli.Bridge(a.ctx, bridge)
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
		if _, err := a.cli.WaitOFPort(a.ctx, bridge); err != nil {
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
		if err := a.cli.SetBridgeExternalIDs(a.ctx, now.UUID, recorded); err != nil {
			return err
		}
		if err := openflow.Apply(a.ctx, portSecTarget(a.conf), flows.GatewayBundle(gws...)); err != nil {
			return fmt.Errorf("bridge %q: gateway flows: %w", bridge, err)
		}
	}
	return nil
}

// hostPorts publishes the port mappings Apache Mesos passes: Mesos calls
// one plugin, not a chain, so ovs-bridge does what ovs-portmap would,
// through the same code (one pipeline, one cookie per attachment), with
// ovs-portmap's defaults (node addresses of the bridge interface, snat on),
// on the port as this ADD just wrote it (no need to read it back) and the
// facts of its port flows (its MAC and addresses).
func (a *adding) hostPorts() error {
	if len(a.conf.Mappings) == 0 {
		return nil
	}
	port := ovsdb.OwnedPort{Port: ovsdb.Port{UUID: a.portUUID, Name: a.hostName, ExternalIDs: a.spec.ExternalIDs},
		Interface: ovsdb.Interface{Name: a.hostName, OFPort: &a.ofport}}
	v4, v6 := hostport.FirstAddrs(a.ps.IPs)
	if !v4.IsValid() && !v6.IsValid() {
		return nil
	}
	plan, err := hostport.Resolve(hostport.Options{Mappings: a.conf.Mappings, SNAT: true, OVSDB: a.conf.Endpoints.OVSDB,
		VswitchdControl: a.conf.VswitchdControl, Pipeline: flows.DefaultPipeline()},
		a.args.ContainerID, a.args.IfName, port, v4, v6, a.ps.MAC)
	if err != nil {
		return err
	}
	if err := plan.Publish(a.ctx, a.cli); err != nil {
		return err
	}
	cnilog.Note("host ports %v", plan.HostPorts.Rules)
	return nil
}
