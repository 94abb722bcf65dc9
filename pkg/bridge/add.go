package bridge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
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
	"github.com/ovsflow/ovs-cni/pkg/ipam"
	"github.com/ovsflow/ovs-cni/pkg/link"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
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
	a := newAdding(ctx, cli, conf, args)
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
		err = addDHCP(a)
	} else {
		err = addStatic(a)
	}
	if err != nil {
		return err
	}
	return types.PrintResult(a.result, conf.CNIVersion)
}

func newAdding(ctx context.Context, cli *ovsdb.Client, conf *NetConf, args *skel.CmdArgs) *adding {
	hostName := link.HostVethName(args.ContainerID, args.IfName)
	return &adding{args: args, conf: conf, ctx: ctx, cli: cli,
		att:      ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName},
		hostName: hostName,
		result: &current.Result{CNIVersion: current.ImplementedSpecVersion, DNS: conf.DNS,
			Interfaces: []*current.Interface{{Name: hostName}, {Name: args.IfName, Sandbox: args.Netns}}}}
}

// addStatic is the ADD of an attachment whose addresses IPAM gives before
// the port exists (or that has none): IPAM runs while the veth is made,
// the port goes in with its final flows, the container end is configured
// last (on the kernel datapath).
func addStatic(a *adding) error {
	if err := begin(a); err != nil {
		return err
	}
	if err := a.did("ipam start", startIPAM(a)); err != nil {
		return err
	}
	if err := makeVeth(a); err != nil {
		return err
	}
	if err := a.did("ipam wait", waitIPAM(a)); err != nil {
		return err
	}
	if err := a.did("allowed", allowedFree(a)); err != nil {
		return err
	}
	if err := a.did("addresses, netdev", addressBeforePort(a)); err != nil {
		return err
	}
	if err := a.did("port flows", secure(a)); err != nil {
		return err
	}
	if err := a.did("port", attachPort(a)); err != nil {
		return err
	}
	if err := a.did("announce", announce(a)); err != nil {
		return err
	}
	return finish(a)
}

// addDHCP is the ADD of an attachment whose addresses dhcp leases on the
// attached port: the port goes in with the flows of a port without
// addresses, its host end comes up, the lease is taken, and the flows are
// replaced by those of its addresses.
func addDHCP(a *adding) error {
	a.undo.Arm(a.releaseIPAM)
	if err := begin(a); err != nil {
		return err
	}
	if err := makeVeth(a); err != nil {
		return err
	}
	if err := a.did("port flows", secure(a)); err != nil {
		return err
	}
	if err := a.did("port", attachPort(a)); err != nil {
		return err
	}
	if err := a.did("link up", hostUp(a)); err != nil {
		return err
	}
	if err := a.did("dhcp", lease(a)); err != nil {
		return err
	}
	if err := a.did("allowed", allowedFree(a)); err != nil {
		return err
	}
	if err := a.did("port flows, lease", secure(a)); err != nil {
		return err
	}
	return finish(a)
}

// begin finds the bridge and what an earlier ADD of the attachment left,
// and replaces it.
func begin(a *adding) error {
	if err := a.did("bridge", findBridge(a)); err != nil {
		return err
	}
	if err := a.did("previous", findPrevious(a)); err != nil {
		return err
	}
	if err := a.did("netns", openNetNS(a)); err != nil {
		return err
	}
	if err := a.did("replace previous", replaceOld(a)); err != nil {
		return err
	}
	return nil
}

// makeVeth claims the ofport and cookie, then makes and prepares the veth.
func makeVeth(a *adding) error {
	if err := a.did("sync", syncPending(a)); err != nil {
		return err
	}
	if err := a.did("mac", chooseMAC(a)); err != nil {
		return err
	}
	if err := a.did("claim", claim(a)); err != nil {
		return err
	}
	if err := a.did("veth", createVeth(a)); err != nil {
		return err
	}
	if err := a.did("container", prepareContEnd(a)); err != nil {
		return err
	}
	return nil
}

// finish checks the addresses again, configures the container end where
// it is not yet, and puts the gateway and the host ports in.
func finish(a *adding) error {
	if err := a.did("allowed again", allowedFree(a)); err != nil {
		return err
	}
	if err := a.did("addresses", addressAfterPort(a)); err != nil {
		return err
	}
	if err := a.did("gateway", putGateway(a)); err != nil {
		return err
	}
	if err := a.did("host ports", hostPorts(a)); err != nil {
		return err
	}
	return nil
}

func (a *adding) dhcp() bool { return a.conf.IPAM.Type == "dhcp" }

// findBridge finds (or, with createBridge, creates) the configured bridge.
func findBridge(a *adding) (err error) {
	a.br, err = lookupBridge(a.ctx, a.cli, a.conf)
	if err == nil {
		a.netdev = a.br.DatapathType == "netdev"
	}
	return err
}

// findPrevious finds the ports an earlier ADD of the attachment left, and
// refuses a runtime-supplied MAC that is another container's, the bridge's
// or an uplink's: it would receive their traffic.
func findPrevious(a *adding) (err error) {
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

func openNetNS(a *adding) (err error) {
	if a.netns, err = ns.GetNS(a.args.Netns); err != nil {
		return fmt.Errorf("opening netns %q: %w", a.args.Netns, err)
	}
	return nil
}

func replaceOld(a *adding) (err error) {
	a.retry, err = replacePrevious(a.ctx, a.cli, a.conf, a.args, a.previous, a.hostName)
	return err
}

// startIPAM starts IPAM in the background: the veth's link changes reach
// ovs-vswitchd, and its reconfiguration of the bridge runs, meanwhile. A
// failed ADD waits for it and releases what it allocated.
func startIPAM(a *adding) error {
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
func syncPending(a *adding) error {
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
func chooseMAC(a *adding) error {
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
func claim(a *adding) (err error) {
	if a.res, err = reserveOFPort(a.ctx, a.cli, a.conf, a.att); err != nil {
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

// createVeth makes the veth, its container end created in place and the
// host end in its final state (promiscuous, as the datapath makes it; down
// for dhcp, see CmdAdd). On the userspace datapath the host end is kept
// from answering ARP (with the veth's MAC) or running IPv6: the datapath
// reads it through a packet socket, so the node's kernel sees every frame
// too.
func createVeth(a *adding) (err error) {
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

// prepareContEnd sets the container end's sysctls and offloads and, on
// the userspace datapath or with dhcp, brings it up (prepareContainer).
func prepareContEnd(a *adding) error {
	return a.netns.Do(func(ns.NetNS) error {
		mac, err := prepareContainer(a.args.IfName, a.netdev, a.dhcp() || a.netdev, a.conf.IPAM.Type != "" && !a.conf.AllowRouter)
		a.mac, a.result.Interfaces[contIndex].Mac = mac, mac.String()
		return err
	})
}

// waitIPAM waits for the IPAM that startIPAM started and takes its result.
func waitIPAM(a *adding) (err error) {
	if a.pending == nil {
		return nil
	}
	r, err := a.pending.Wait()
	a.pending = nil
	a.allocated, err = useIPAM(a.conf, r, err, a.result, contIndex)
	return err
}

// lease runs dhcp on the attached port.
func lease(a *adding) (err error) {
	a.allocated, err = addresses(a.ctx, a.conf, a.args, a.result, contIndex)
	return err
}

// allowedFree refuses addresses that another attachment's
// allowedAddresses hold, allowedAddresses that hold another's address or
// link-local address, and the bridge's own addresses (checkAllowed). The
// ADD asks before it installs anything for its addresses and again once
// its port and record are in: of two ADDs that conflict over an allowed
// range and asked at the same moment, the one that reads after both
// inserts sees the other and fails (its rollback removes its port), so
// never both pass. Single addresses are also claimed, atomically, by the
// insert (record.AddressClaims).
func allowedFree(a *adding) error {
	return checkAllowed(a.ctx, a.cli, a.conf, a.br, a.att, a.result)
}

// addressBeforePort configures the container end before its port exists
// on the userspace datapath, where it is up already (static IPAM).
func addressBeforePort(a *adding) error {
	if !a.netdev {
		return nil
	}
	return addressContainer(a)
}

// addressAfterPort configures the container end, and brings it up, once
// its port exists: on the kernel datapath, and with dhcp.
func addressAfterPort(a *adding) error {
	if a.netdev && !a.dhcp() {
		return nil
	}
	return addressContainer(a)
}

func addressContainer(a *adding) error {
	return a.netns.Do(func(ns.NetNS) error { return configureAddresses(a.ctx, a.args.IfName, a.result) })
}

// secure builds the facts of the port's table-0 flows from what is known
// so far, installs the flows, and, once the port exists, records the facts
// on it. A bridge just created (createBridge), or one of an ovs-vswitchd
// restarting, has no OpenFlow socket yet: portsec.Apply waits for it.
func secure(a *adding) error {
	a.ps = portSecurity(a.conf, a.args, a.mac, a.result, a.ofport)
	return securePort(a.ctx, a.cli, a.conf, a.br, a.ps, a.portUUID)
}

// attachPort inserts the port, in one transaction, and waits for its
// ofport (attachSecured). Its removal is armed before the transaction:
// when the connection breaks mid-commit its outcome is unknown, and the
// port may be there. With dhcp, the port goes in with the record of the
// flows it has until the lease (no addresses yet): a reconcile meanwhile
// rebuilds those, instead of removing them as an attachment's without a
// record.
func attachPort(a *adding) (err error) {
	a.spec = ovsdb.PortSpec{Name: a.hostName, Trunks: a.conf.Trunks, ExternalIDs: portExternalIDs(a.args, a.conf, a.result.Interfaces[contIndex].Mac)}
	if a.conf.IsGateway && !a.dhcp() {
		// The port claims its gateways as it goes in (pkg/gateway).
		maps.Copy(a.spec.ExternalIDs, gateway.Claims(gateways(a.result)))
	}
	if a.conf.VLAN != nil {
		a.spec.Tag = *a.conf.VLAN
	}
	if a.conf.MAC != nil {
		a.spec.UniqueMAC = a.result.Interfaces[contIndex].Mac
	}
	if a.conf.OVNPort != "" {
		a.spec.InterfaceIDs = map[string]string{ovsdb.KeyOVNIfaceID: a.conf.OVNPort}
	}
	a.undo.Arm(func(ctx context.Context) {
		ports, err := a.cli.FindPorts(ctx, a.att)
		if err == nil {
			err = a.cli.DetachPorts(ctx, ovsdb.PortUUIDs(ports)...)
		}
		a.portLeft = err != nil
	})
	a.portUUID, a.ofport, err = attachSecured(a.ctx, a.cli, a.conf, a.br, a.ps, a.spec, &a.res)
	return err
}

// hostUp brings the host end up for dhcp, which needs the link: the flows
// of a port without addresses are in, now the carrier.
func hostUp(a *adding) error {
	return link.SetUp(a.hostLink)
}

// announce repeats, on the userspace datapath, the container end's
// gratuitous ARP and unsolicited NA: it came up before its port existed,
// and they reached no one.
func announce(a *adding) error {
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
	return a.netns.Do(func(ns.NetNS) error { return link.Announce(a.args.IfName, gateways) })
}

// putGateway puts the gateways on the bridge's interface (isGateway),
// and logs the attachment.
func putGateway(a *adding) error {
	if a.conf.IsGateway {
		if err := setupGateway(a.ctx, a.cli, a.br, portSecTarget(a.conf), a.result, a.portUUID, !a.dhcp()); err != nil {
			return err
		}
	}
	cnilog.Note("port %s on %s, ips %v", a.hostName, a.conf.Bridge, ipList(a.result))
	return nil
}

// hostPorts publishes the port mappings Mesos passes (publishMesos),
// on the port as this ADD just wrote it.
func hostPorts(a *adding) error {
	if len(a.conf.Mappings) == 0 {
		return nil
	}
	port := ovsdb.OwnedPort{Port: ovsdb.Port{UUID: a.portUUID, Name: a.hostName, ExternalIDs: a.spec.ExternalIDs},
		Interface: ovsdb.Interface{Name: a.hostName, OFPort: &a.ofport}}
	return publishMesos(a.ctx, a.cli, a.args, a.conf, a.ps, port)
}
