package inspect

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/trace"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// common are the flags of both commands.
type common struct {
	ovsdb   endpoint.Endpoint
	control string
	which   Which
}

func (c *common) register(fs *flag.FlagSet) {
	c.ovsdb = endpoint.MustParse(endpoint.DefaultOVSDB)
	fs.Var(&c.ovsdb, "ovsdb", "OVSDB endpoint")
	fs.StringVar(&c.control, "vswitchd-control", "", "ovs-vswitchd's control socket, when ADD recorded none (default: found as ovs-appctl finds it)")
	fs.StringVar(&c.which.ContainerID, "container", "", "the attachment's container ID")
	fs.StringVar(&c.which.IfName, "ifname", "", "the attachment's interface name (default eth0 with -container)")
	fs.StringVar(&c.which.Pod, "pod", "", "the attachment's pod, NAMESPACE/NAME (when the runtime passed it)")
}

func (c *common) check() error {
	if (c.which.ContainerID == "") == (c.which.Pod == "") {
		return fmt.Errorf("give -container ID (and -ifname) or -pod NAMESPACE/NAME")
	}
	if c.which.ContainerID != "" && c.which.IfName == "" {
		c.which.IfName = "eth0"
	}
	if ns, name, ok := strings.Cut(c.which.Pod, "/"); c.which.Pod != "" && (!ok || ns == "" || name == "" || strings.Contains(name, "/")) {
		return fmt.Errorf("-pod %q: want NAMESPACE/NAME", c.which.Pod)
	}
	return nil
}

// open finds the attachment and reads its records.
func (c *common) open(ctx context.Context) (*ovsdb.Client, attachment, error) {
	cli, err := ovsdb.Dial(ctx, c.ovsdb)
	if err != nil {
		return nil, attachment{}, err
	}
	p, err := find(ctx, cli, c.which)
	if err != nil {
		cli.Close()
		return nil, attachment{}, err
	}
	at, err := load(p, c.ovsdb)
	if err != nil {
		cli.Close()
		return nil, attachment{}, err
	}
	return cli, at, nil
}

// TraceMain is `ovs-portmap trace`: it prints the verdict of one question
// about one attachment and returns the exit code (0: traced; 1: the
// attachment or OVS could not be asked; 2: usage).
func TraceMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	q := fs.String("q", "outside", "the question: "+strings.Trim(fmt.Sprint(trace.Questions), "[]")+"; all: each in turn, one line each")
	hostIP := fs.String("host-ip", "", "the node address of the host port asked about (default: any)")
	hostPort := fs.Uint("host-port", 0, "the host port asked about (default: any)")
	proto := fs.String("proto", "", "the protocol of the host port asked about: tcp, udp, sctp (default: any, tcp first)")
	v6 := fs.Bool("6", false, "ask about IPv6 (host port rules, frames, the tunnel's inner packets)")
	dst := fs.String("dst", "", "-q tunnel: the destination, in a tunnelled peer's pod range (default: the first address of the first such range of the tunnel's record)")
	tunSrc := fs.String("tun-src", "", "-q fromtunnel: the outer source, a peer's node (default: the node of the first range of the tunnel's record)")
	inPort := fs.String("in-port", "", "the OpenFlow port clients outside come in by (default: the bridge's uplink, the first port that is neither ours nor internal)")
	raw := fs.Bool("raw", false, "print the packet and ofproto/trace's output after the verdict")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := c.check(); err != nil {
		fmt.Fprintln(stderr, "trace:", err)
		return 2
	}
	questions := trace.Questions
	if *q != "all" {
		question, err := trace.ParseQuestion(*q)
		if err != nil {
			fmt.Fprintln(stderr, "trace:", err)
			return 2
		}
		questions = []trace.Question{question}
	}
	var err error
	ask := trace.Ask{InPort: *inPort, HostPort: uint16(*hostPort), IPv6: *v6}
	if *hostIP != "" {
		if ask.HostIP, err = netip.ParseAddr(*hostIP); err != nil {
			fmt.Fprintln(stderr, "trace: -host-ip:", err)
			return 2
		}
		ask.IPv6 = ask.HostIP.Is6()
	}
	for _, a := range []struct {
		flag, s string
		to      *netip.Addr
	}{{"dst", *dst, &ask.Dst}, {"tun-src", *tunSrc, &ask.TunSrc}} {
		if a.s == "" {
			continue
		}
		if *a.to, err = netip.ParseAddr(a.s); err != nil {
			fmt.Fprintf(stderr, "trace: -%s: %v\n", a.flag, err)
			return 2
		}
	}
	if *proto != "" {
		if ask.Protocol, err = flows.ParseProtocol(*proto); err != nil {
			fmt.Fprintln(stderr, "trace: -proto:", err)
			return 2
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(questions) == 1 {
		ask.Question = questions[0]
		verdict, out, err := c.trace(ctx, ask)
		if err != nil {
			fmt.Fprintln(stderr, "trace:", err)
			return 1
		}
		fmt.Fprintln(stdout, verdict)
		if *raw {
			fmt.Fprint(stdout, out)
		}
		return 0
	}
	// -q all: one line per question, those the attachment does not fit
	// (no UDP host port, no IPv4 address) said so. An attachment that
	// cannot be found is one error, not one per question.
	cli, _, err := c.open(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "trace:", err)
		return 1
	}
	cli.Close()
	code := 0
	for _, q := range questions {
		ask.Question = q
		verdict, _, err := c.trace(ctx, ask)
		if errors.Is(err, trace.ErrNoRule) || errors.Is(err, trace.ErrNoAddress) {
			verdict, err = "not asked: "+err.Error(), nil
		}
		if err != nil {
			fmt.Fprintln(stderr, "trace:", err)
			code = 1
			continue
		}
		fmt.Fprintf(stdout, "%-10s %s\n", q, verdict)
	}
	return code
}

// trace answers one question: the verdict, and the packet with the raw
// trace.
func (c *common) trace(ctx context.Context, ask trace.Ask) (verdict, raw string, err error) {
	cli, at, err := c.open(ctx)
	if err != nil {
		return "", "", err
	}
	defer cli.Close()
	ports, err := cli.BridgePorts(ctx, at.facts.Bridge)
	if err != nil {
		return "", "", err
	}
	if ask.InPort == "" {
		ask.InPort = uplink(ports)
	} else if !hasPort(ports, ask.InPort) {
		return "", "", fmt.Errorf("-in-port %q: no such port on bridge %q (give its OpenFlow port number or its name)", ask.InPort, at.facts.Bridge)
	}
	if ask.Question == trace.Pod {
		ip := at.facts.IPv4
		if ask.IPv6 {
			ip = at.facts.IPv6
		}
		ask.Peer = peer(ports, at.port.Attachment(), ip)
	}
	if ask.Question == trace.Tunnel || ask.Question == trace.FromTunnel {
		if err := at.readOverlay(ctx, cli, ports); err != nil {
			return "", "", fmt.Errorf("%s: %w", c.which, err)
		}
	}
	probe, err := trace.Build(at.facts, ask)
	if err == nil && ask.Question == trace.Node {
		// The node's nft map is read in this network namespace: outside
		// the node's (no interface of the bridge here), an empty map says
		// nothing about the node.
		if _, ierr := net.InterfaceByName(at.facts.Bridge); ierr != nil {
			return "", "", fmt.Errorf("%s: -q node reads the node's nft map, and this network namespace has no interface %q (the bridge's own): run it in the node's network namespace (ip netns exec NAME ovs-portmap trace ...)", c.which, at.facts.Bridge)
		}
		// What the node's nft map holds for the host port, not what it
		// should.
		var ok bool
		if ask.NodeLocal, ok, err = hostport.NodeLocalTarget(probe.Rule); err == nil {
			if !ok {
				ask.NodeLocal = netip.AddrPort{}
			}
			ask.NodeLocalRead = true
			probe, err = trace.Build(at.facts, ask)
		}
	}
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", c.which, err)
	}
	if probe.Decided != "" {
		return probe.Decided, "", nil
	}
	v, m := at.cookie.AnyKind()
	present, err := openflow.Dump(ctx, at.target, uint64(v), uint64(m))
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", c.which, err)
	}
	if len(present) == 0 && at.ownFlows() {
		return trace.WipedVerdict, "", nil
	}
	if ask.Question.HostPort() && at.facts.HostPorts && !slices.ContainsFunc(present, func(f openflow.Flow) bool {
		return flows.Cookie(f.Cookie).Kind() == flows.CookieKindAttachment
	}) {
		return trace.WipedHostPortsVerdict, "", nil
	}
	if probe.TunnelPort != 0 {
		oc := flows.OverlayCookie()
		if fl, err := openflow.Dump(ctx, at.target, uint64(oc), uint64(^flows.Cookie(0))); err != nil {
			return "", "", fmt.Errorf("%s: %w", c.which, err)
		} else if len(fl) == 0 {
			return fmt.Sprintf("no overlay flow on bridge %s: run reconcile", at.facts.Bridge), "", nil
		}
	}
	ctl := at.control
	if ctl == "" {
		ctl = c.control
	}
	sock, err := unixctl.Find(at.target, ctl)
	if err != nil {
		return "", "", err
	}
	// Each leg: the pod's packet, then what the node sends on.
	var verdicts []string
	for p := &probe; p != nil; p = p.Then {
		if p == &probe && p.Then != nil && p.Packet.EthDst != nil {
			// Where NORMAL sends the frame to the node's MAC.
			if p.Ask.Learned, err = unixctl.LearnedPort(ctx, sock, at.facts.Bridge, p.Packet.EthDst, p.Packet.VLAN); err != nil {
				return "", "", fmt.Errorf("%s: %w", c.which, err)
			}
		}
		out, err := unixctl.Trace(ctx, sock, at.facts.Bridge, p.Packet.String(), p.CTNext...)
		if err != nil {
			return "", "", fmt.Errorf("%s: %w", c.which, err)
		}
		raw += "packet: " + p.Packet.String() + "\n"
		if len(p.CTNext) > 0 {
			raw += "ct-next: " + strings.Join(p.CTNext, " ") + "\n"
		}
		raw += out
		verdicts = append(verdicts, trace.Verdict(*p, trace.Parse(out), at.declared))
	}
	return strings.Join(verdicts, "; "), raw, nil
}

// FlowsMain is `ovs-portmap flows`: the attachment's flows with their
// packet and byte counters, by group (port security, host ports, the
// shared pipeline).
func FlowsMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("flows", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := c.check(); err != nil {
		fmt.Fprintln(stderr, "flows:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.flows(ctx, stdout); err != nil {
		fmt.Fprintln(stderr, "flows:", err)
		return 1
	}
	return 0
}

func (c *common) flows(ctx context.Context, w io.Writer) error {
	cli, at, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	v, m := at.cookie.AnyKind()
	own, err := openflow.DumpStats(ctx, at.target, uint64(v), uint64(m))
	if err != nil {
		return fmt.Errorf("%s: %w", c.which, err)
	}
	shared, err := openflow.DumpStats(ctx, at.target, uint64(flows.SharedCookie()), ^uint64(0))
	if err != nil {
		return fmt.Errorf("%s: %w", c.which, err)
	}
	fmt.Fprintln(w, Header(at.facts, at.cookie))
	if len(own) == 0 && at.ownFlows() {
		fmt.Fprintln(w, trace.WipedVerdict)
	}
	WriteFlows(w, append(own, shared...))
	return nil
}

// Header is the first line of `ovs-portmap flows`.
func Header(f trace.Facts, c flows.Cookie) string {
	s := fmt.Sprintf("attachment %s/%s", f.ContainerID, f.IfName)
	if f.Pod != "" {
		s += " (pod " + f.Pod + ")"
	}
	v, m := c.AnyKind()
	return s + fmt.Sprintf(", bridge %s, ofport %d, cookie %s/%s", f.Bridge, f.OFPort, v, m)
}

// WriteFlows prints flows by group (port security, host ports, shared
// pipeline), each with its counters and declared name, in table and
// priority order.
func WriteFlows(w io.Writer, fs []openflow.FlowStats) {
	groups := []flows.Group{flows.GroupPortSecurity, flows.GroupHostPorts, flows.GroupShared, flows.GroupGateway, flows.GroupTombstone, flows.GroupOther}
	slices.SortStableFunc(fs, func(a, b openflow.FlowStats) int {
		if a.Table != b.Table {
			return int(a.Table) - int(b.Table)
		}
		return int(b.Priority) - int(a.Priority)
	})
	for _, g := range groups {
		var in []openflow.FlowStats
		for _, f := range fs {
			if flows.GroupOf(flows.Cookie(f.Cookie)) == g {
				in = append(in, f)
			}
		}
		if len(in) == 0 {
			continue
		}
		var pk, by uint64
		for _, f := range in {
			pk, by = pk+f.Packets, by+f.Bytes
		}
		fmt.Fprintf(w, "\n%s: %d flows, %d packets, %d bytes\n", g, len(in), pk, by)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "packets\tbytes\ttable\tpriority\t\tflow")
		for _, f := range in {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t\t%s\n", f.Packets, f.Bytes, f.Table, f.Priority, describe(f.Flow))
		}
		tw.Flush()
	}
}

// describe is a flow's declared name and its match.
func describe(f openflow.Flow) string {
	s := flows.Name(f)
	if m := f.Match.String(); m != "" {
		s += ": " + m
	}
	return s
}
