// Package cnicmd is what every CNI command of the plugins does first and
// last: decoding the network config (Decode, ParseEndpoints,
// ParseTimeout), a context bounded by the command's time (Budget) with the
// OVSDB connection (Open, Status; OpenGC adds the stale ports), prevResult
// parsing, the CNI codes of errors (OVS unreachable or unresponsive: 11,
// try again later; a host port conflict: 7). The clean-up of a failed ADD
// is pkg/rollback, in the time the command keeps back for it.
package cnicmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/rollback"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// A command's time. A runtime bounds each CNI call it makes and, at the
// end, kills the plugin (libcni runs it with exec.CommandContext: SIGKILL);
// the plugin cannot see that bound, so it takes the one declared here, from
// the runtimes' own (docs/operations.md, "How long a command may take"):
// kubelet gives RunPodSandbox, and so a conflist's ADD under containerd,
// twice its runtimeRequestTimeout (2 min); CRI-O gives the ADD 5 minutes
// past that; CRI-O gives a DEL one minute, and so does containerd to the
// DEL after a failed ADD; podman, cnitool and Mesos give none.
//
// Every wait on OVS (OpenFlow, OVSDB's waits for ovs-vswitchd, its control
// socket) lasts as long as the command's context: a busy ovs-vswitchd is
// waited for as long as the runtime waits for the plugin, then the command
// fails with code 11 and an ADD rolls back, in time kept back for it, before
// the runtime's end. OVS down (no socket, connection refused) still fails at
// once; STATUS keeps its own short bound.
const (
	// DefaultTimeout is the budget of a config without "timeout": an ADD
	// or a CHECK takes at most that, clean-up included. It is kubelet's
	// runtimeRequestTimeout: half of what kubelet gives RunPodSandbox, so
	// that a second plugin of the chain meeting the same stall, and the
	// runtime's own steps, still end within it.
	DefaultTimeout = 2 * time.Minute
	// MinTimeout and MaxTimeout bound "timeout". Shorter, an ADD on a busy
	// node fails for want of time alone; longer than kubelet's default
	// RunPodSandbox deadline, kubelet's runtime kills the plugin first. The
	// sweepers expire no claim of an ADD younger than that (ovsdb.ClaimTTL).
	MinTimeout = 5 * time.Second
	MaxTimeout = 4 * time.Minute
	// MaxDelTimeout bounds a DEL and a GC, which get half of the budget:
	// CRI-O gives a DEL one minute, containerd the DEL after a failed ADD
	// one minute. A GC removes what it removes as a DEL does, under the
	// same deleting marks, which the sweepers honour for longer than that
	// (ovsdb.DeletingTTL).
	MaxDelTimeout = time.Minute
	// maxReserve bounds the time a command keeps back from its work (a
	// quarter of its bound): an ADD's rollback runs in it, and every
	// command's error reaches the runtime before the runtime's end, which
	// started before the plugin did.
	maxReserve = 15 * time.Second
	// StatusTimeout bounds a STATUS: the runtime asks it every few seconds
	// (kubelet's runtime status), and a STATUS that waits keeps the node's
	// network from being reported at all.
	StatusTimeout = 5 * time.Second
)

// Budget is the time of a plugin's commands: its config's "timeout"
// (ParseTimeout), DefaultTimeout when zero. ADD and CHECK take at most the
// budget, DEL and GC half of it (at most MaxDelTimeout); each keeps a
// quarter of its time (at most maxReserve) back from its work.
type Budget time.Duration

func (b Budget) String() string { return time.Duration(b.orDefault()).String() }

func (b Budget) orDefault() Budget {
	if b == 0 {
		return Budget(DefaultTimeout)
	}
	return b
}

// Add is how long an ADD or a CHECK may take in all.
func (b Budget) Add() time.Duration { return time.Duration(b.orDefault()) }

// Del is how long a DEL or a GC may take in all.
func (b Budget) Del() time.Duration { return min(time.Duration(b.orDefault())/2, MaxDelTimeout) }

// reserve is the time a command of bound keeps back from its work.
func reserve(bound time.Duration) time.Duration { return min(bound/4, maxReserve) }

// ParseTimeout parses the "timeout" key of a network config: a duration
// (Go's syntax: "90s", "2m") from MinTimeout to MaxTimeout; "" is the
// default. Else code 7 naming the key.
func ParseTimeout(s string) (Budget, error) {
	if s == "" {
		return Budget(DefaultTimeout), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < MinTimeout || d > MaxTimeout {
		return 0, cnierr.Invalid(`"timeout" %q: want a duration from %s to %s, as "90s" or "2m" (how long an ADD may take; DEL gets half, at most %s)`,
			s, MinTimeout, MaxTimeout, MaxDelTimeout).CNI()
	}
	return Budget(d), nil
}

// Conf is a plugin's network config, as far as the opening needs it.
type Conf interface {
	// OVSDBEndpoint is the parsed "ovsdb" key, with the PEM files of an
	// ssl: one.
	OVSDBEndpoint() endpoint.Endpoint
	// CommandBudget is the parsed "timeout" key.
	CommandBudget() Budget
}

// GCConf is a plugin's network config, as far as a GC needs it.
type GCConf interface {
	Conf
	// GCScope is the network whose ports the plugin's GC considers, its
	// bridge ("": any) and the attachments that stay.
	GCScope() (network, bridge string, valid []types.GCAttachment)
}

// GC is an opened CNI GC.
type GC[C GCConf] struct {
	Conf  C
	Ctx   context.Context
	OVSDB *ovsdb.Client
	// Stale are our ports in the config's GCScope whose attachment is not
	// valid: what the GC removes.
	Stale []ovsdb.OwnedPort
	// Close ends the connection and the context.
	Close func()
}

// StaleAttachments are the attachments of the stale ports, each once, in
// the ports' order (an attachment may hold several ports: one per bridge).
func (gc *GC[C]) StaleAttachments() []ovsdb.Attachment {
	var as []ovsdb.Attachment
	seen := map[ovsdb.Attachment]bool{}
	for _, p := range gc.Stale {
		if a := p.Attachment(); !seen[a] {
			seen[a] = true
			as = append(as, a)
		}
	}
	return as
}

// OpenGC starts a GC whose network config load decodes from args (a code 6
// or 7 when it does not): the config, Open on its OVSDB endpoint, and the
// stale ports.
func OpenGC[C GCConf](args *skel.CmdArgs, load func(*skel.CmdArgs) (C, error)) (*GC[C], error) {
	conf, err := load(args)
	if err != nil {
		return nil, err
	}
	ctx, cli, done, err := command(conf.OVSDBEndpoint(), conf.CommandBudget().Del())
	if err != nil {
		return nil, err
	}
	network, bridge, valid := conf.GCScope()
	stale, err := Stale(ctx, cli, network, bridge, valid)
	if err != nil {
		done()
		return nil, err
	}
	return &GC[C]{Conf: conf, Ctx: ctx, OVSDB: cli, Stale: stale, Close: done}, nil
}

// Open starts an ADD or a CHECK: the context of its work, which ends
// before the command's time b.Add() does (the rest is its rollback's,
// pkg/rollback), and a connection to OVSDB at ep (unreachable: CNI code
// 11; a PEM file of an ssl: ep that cannot be used, or a certificate
// refused: code 7, see Error). done closes both.
func Open(ep endpoint.Endpoint, b Budget) (ctx context.Context, cli *ovsdb.Client, done func(), err error) {
	return command(ep, b.Add())
}

// OpenPort opens a chained plugin's ADD or CHECK (Open) and finds the
// attachment's ovs-bridge port: exactly one, or an error saying that plugin
// must follow ovs-bridge in the conflist.
func OpenPort(ep endpoint.Endpoint, b Budget, plugin string, args *skel.CmdArgs) (context.Context, *ovsdb.Client, ovsdb.OwnedPort, func(), error) {
	ctx, cli, done, err := Open(ep, b)
	if err != nil {
		return nil, nil, ovsdb.OwnedPort{}, nil, err
	}
	att := ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
	ports, err := cli.FindPorts(ctx, att)
	switch {
	case err != nil:
	case len(ports) != 1:
		err = fmt.Errorf("attachment %s: found %d ovs-bridge ports, want 1 (%s must follow ovs-bridge in the conflist)", att, len(ports), plugin)
	default:
		return ctx, cli, ports[0], done, nil
	}
	done()
	return nil, nil, ovsdb.OwnedPort{}, nil, err
}

// OpenDel opens a DEL: Open with the time of a DEL (b.Del()), except that
// OVSDB unreachable is a code 11 naming the attachment. OVSDB is the record
// of what an attachment holds (its port, host-port claims, QoS rows, the
// node-local nft elements and flows they list): without it a DEL cannot
// tell whether something is left, even when the host veth is gone (after a
// reboot, or a netns lost behind the runtime's back), so it fails and the
// runtime retries. Succeeding there would leave the port and its host-port
// claims for good while the address went back to the pool.
//
// The one DEL that can tell is that of a config without an "ovsdb" key on
// a node where no Open vSwitch has run at the default endpoint since boot
// (its run directory, on tmpfs, does not exist): every ADD of that config
// failed when it opened OVSDB, before doing anything. That is ErrNeverServed,
// which a DEL answers with success.
func OpenDel(eps Endpoints, b Budget, args *skel.CmdArgs) (ctx context.Context, cli *ovsdb.Client, done func(), err error) {
	ctx, cli, done, err = command(eps.OVSDB, b.Del())
	var e *cnierr.Error
	if errors.As(err, &e) && e.Kind == cnierr.TryAgain {
		if eps.neverServed() {
			return nil, nil, nil, ErrNeverServed
		}
		a := ovsdb.Attachment{ContainerID: args.ContainerID, IfName: args.IfName}
		return nil, nil, nil, &cnierr.Error{Kind: cnierr.TryAgain, Details: e.Details, Err: err,
			Msg: fmt.Sprintf("%s: cannot tell what is left of attachment %s", e.Msg, a)}
	}
	return ctx, cli, done, err
}

// Del runs a DEL's work f on OVSDB opened by OpenDel: a config never
// served (ErrNeverServed) is a success without f, OVSDB unreachable a code
// 11 that names a missing "ovsdb" key (Explain).
func Del(eps Endpoints, b Budget, args *skel.CmdArgs, f func(context.Context, *ovsdb.Client) error) error {
	ctx, cli, done, err := OpenDel(eps, b, args)
	if errors.Is(err, ErrNeverServed) {
		return nil
	}
	if err != nil {
		return eps.Explain(err)
	}
	defer done()
	return f(ctx, cli)
}

// ErrNeverServed is OpenDel's answer when nothing can have been done
// through the config's OVSDB endpoint: the DEL succeeds.
var ErrNeverServed = errors.New("no Open vSwitch at the default endpoint since boot")

// neverServed reports whether OVSDB is the default one and its run
// directory does not exist.
func (e Endpoints) neverServed() bool {
	if !e.OVSDBDefault || e.OVSDB.Network != "unix" {
		return false
	}
	_, err := os.Stat(filepath.Dir(e.OVSDB.Address))
	return errors.Is(err, fs.ErrNotExist)
}

// Explain names the missing "ovsdb" key in an error of Open when OVSDB is
// the default: the operator who gave ovs-bridge the key and not this
// plugin reads why it looks elsewhere.
func (e Endpoints) Explain(err error) error {
	var ce *cnierr.Error
	if !e.OVSDBDefault || !errors.As(err, &ce) || ce.Kind != cnierr.TryAgain {
		return err
	}
	c := *ce
	c.Msg = fmt.Sprintf(`%s (no "ovsdb" key in this plugin's config: the default, %s)`, c.Msg, e.OVSDB)
	return &c
}

// Status opens a STATUS: a connection within StatusTimeout, OVSDB
// unreachable being CNI code 50 (plugin not available).
func Status(ep endpoint.Endpoint) (ctx context.Context, cli *ovsdb.Client, done func(), err error) {
	return open(ep, StatusTimeout, 0, func(err error) error {
		if e := tlsError(err); e != nil {
			return e
		}
		return cnierr.Wrap(cnierr.Unavailable, "ovsdb unreachable", err)
	})
}

// command opens a command that may take bound in all, of which it keeps
// reserve(bound) back from its work.
func command(ep endpoint.Endpoint, bound time.Duration) (context.Context, *ovsdb.Client, func(), error) {
	return open(ep, bound, reserve(bound), Error)
}

// open dials OVSDB at ep for a command of bound: the context it returns is
// its work's, which ends keep before the command's end, kept for the
// clean-up (rollback.Reserve).
func open(ep endpoint.Endpoint, bound, keep time.Duration, cniError func(error) error) (context.Context, *ovsdb.Client, func(), error) {
	cmd, cancelCmd := context.WithTimeout(context.Background(), bound)
	ctx, cancelWork := rollback.Reserve(cmd, keep)
	cancel := func() { cancelWork(); cancelCmd() }
	cli, err := ovsdb.Dial(ctx, ep)
	if err != nil {
		cancel()
		return nil, nil, nil, cniError(err)
	}
	return ctx, cli, func() { cli.Close(); cancel() }, nil
}

// Funcs gives every command of a plugin its CNI error codes at its
// boundary (Code): the one place where an error becomes a *types.Error.
func Funcs(f skel.CNIFuncs) skel.CNIFuncs {
	return skel.CNIFuncs{Add: boundary(f.Add), Del: boundary(f.Del), Check: boundary(f.Check),
		GC: boundary(f.GC), Status: boundary(f.Status)}
}

func boundary(f func(*skel.CmdArgs) error) func(*skel.CmdArgs) error {
	if f == nil {
		return nil
	}
	return func(args *skel.CmdArgs) error { return Code(f(args)) }
}

// Code is err as the runtime gets it: the *types.Error of the first error
// of a kind in its chain (cnierr.Error, or a delegated IPAM plugin's
// *types.Error, as it is); else, for OVS unreachable or unresponsive and
// host port conflicts, their kind (Error); else err, which skel reports as
// code 999.
func Code(err error) error {
	if err == nil {
		return nil
	}
	var e *types.Error
	if errors.As(err, &e) || errors.As(Error(err), &e) {
		return e
	}
	return err
}

// Error gives OVSDB unreachability and every timeout of ovs-vswitchd (code
// 11, try again later) and host port conflicts (code 7) their kind
// (cnierr), and leaves other errors as they are.
func Error(err error) error {
	if e := tlsError(err); e != nil {
		return e
	}
	var claimed *ovsdb.ClaimedError
	switch {
	case errors.Is(err, ovsdb.ErrUnreachable):
		// The details are err's, without the sentinel's text that the
		// message already says.
		e := cnierr.Wrap(cnierr.TryAgain, "ovsdb unreachable", err)
		e.Details = strings.TrimPrefix(e.Details, ovsdb.ErrUnreachable.Error()+": ")
		return e
	case errors.Is(err, endpoint.ErrTimeout):
		return cnierr.Wrap(cnierr.TryAgain, "ovs-vswitchd unresponsive", err)
	case errors.Is(err, ovsdb.ErrSweeping):
		return cnierr.Wrap(cnierr.TryAgain, "reconcile under way", err)
	case errors.As(err, &claimed):
		return &cnierr.Error{Kind: cnierr.Config, Msg: "host port conflict: " + claimed.Error(), Err: err}
	case errors.Is(err, unixctl.ErrNoSocket):
		// ovs-vswitchd serves the bridge (the flows went in before the
		// zone limits): its socket is elsewhere than the config says.
		return cnierr.Wrap(cnierr.Config,
			`ovs-vswitchd control socket not found: set "vswitchdControl" to the path of its --unixctl socket`, err)
	}
	return err
}

// tlsKeys are the config keys of the PEM files of an ssl: OVSDB endpoint,
// by endpoint.TLSFileError's Field.
var tlsKeys = map[string]string{"key": "ovsdbKey", "cert": "ovsdbCert", "ca": "ovsdbCA"}

// tlsError gives the TLS failures of an ssl: OVSDB endpoint code 7 (nil for
// other errors): a file that cannot be used names its key; a certificate
// the handshake refused is a wrong "ovsdbCA" (the server's is not signed by
// it) or a client certificate the server's CA did not sign. Trying again
// later (code 11) meets the same files.
func tlsError(err error) error {
	var file *endpoint.TLSFileError
	switch {
	case errors.As(err, &file):
		return cnierr.Wrap(cnierr.Config, fmt.Sprintf(`"%s" %q: %v`, tlsKeys[file.Field], file.Path, file.Err), err)
	case errors.Is(err, endpoint.ErrNoTLS):
		return cnierr.Wrap(cnierr.Config, `"ovsdb": `+endpoint.ErrNoTLS.Error(), err)
	case errors.Is(err, endpoint.ErrTLSRefused):
		return cnierr.Wrap(cnierr.Config,
			`ovsdb TLS handshake refused: the server's certificate is not signed by "ovsdbCA", or the server does not accept "ovsdbCert"`, err)
	}
	return nil
}

// PrevResult parses the prevResult of conf; missing is the error when there
// is none. A prevResult that does not decode, or has null entries, is code 6.
func PrevResult(conf *types.PluginConf, missing string) (*current.Result, error) {
	if conf.RawPrevResult == nil {
		return nil, cnierr.New(cnierr.Config, missing, "")
	}
	if err := version.ParsePrevResult(conf); err != nil {
		return nil, cnierr.New(cnierr.Decoding, fmt.Sprintf("prevResult: %v", err), "")
	}
	r, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return nil, cnierr.New(cnierr.Decoding, fmt.Sprintf("prevResult: %v", err), "")
	}
	return r, CheckResult(r)
}

// CheckResult rejects a prevResult with null entries (code 6, naming them).
func CheckResult(r *current.Result) error {
	for i, iface := range r.Interfaces {
		if iface == nil {
			return cnierr.New(cnierr.Decoding, fmt.Sprintf("prevResult: interfaces[%d] is null", i), "")
		}
	}
	for i, ipc := range r.IPs {
		if ipc == nil {
			return cnierr.New(cnierr.Decoding, fmt.Sprintf("prevResult: ips[%d] is null", i), "")
		}
	}
	for i, rt := range r.Routes {
		if rt == nil {
			return cnierr.New(cnierr.Decoding, fmt.Sprintf("prevResult: routes[%d] is null", i), "")
		}
	}
	return nil
}

// Stale returns our ports of network (and bridge, unless empty) whose
// attachment is not in valid: what GC removes.
func Stale(ctx context.Context, cli *ovsdb.Client, network, bridge string, valid []types.GCAttachment) ([]ovsdb.OwnedPort, error) {
	keep := make(map[ovsdb.Attachment]bool, len(valid))
	for _, a := range valid {
		keep[ovsdb.Attachment{ContainerID: a.ContainerID, IfName: a.IfName}] = true
	}
	ports, err := cli.OwnedPorts(ctx)
	if err != nil {
		return nil, Error(err)
	}
	var stale []ovsdb.OwnedPort
	for _, p := range ports {
		ids := p.Port.ExternalIDs
		if ids[ovsdb.KeyNetwork] == network && (bridge == "" || ids[ovsdb.KeyBridge] == bridge) && !keep[p.Attachment()] {
			stale = append(stale, p)
		}
	}
	return stale, nil
}

// Decode decodes a network config from stdin into conf (code 6 when it is
// not JSON of conf's shape): the first step of every plugin's LoadConf.
// An "ovsdb" key left out gets its default from ParseEndpoints. An unknown
// key close to a known one gets a warning on stderr (warnMisspelled).
func Decode(stdin []byte, conf any) error {
	if err := json.Unmarshal(stdin, conf); err != nil {
		return cnierr.New(cnierr.Decoding, fmt.Sprintf("decoding network config: %v", err), "")
	}
	warnMisspelled(os.Stderr, stdin, conf)
	return nil
}

// ValidateControl checks the "vswitchdControl" key: empty, or an absolute
// path.
func ValidateControl(path string) error {
	if path != "" && !filepath.IsAbs(path) {
		return cnierr.Invalid(`"vswitchdControl" %q: want the absolute path of ovs-vswitchd's control socket`, path)
	}
	return nil
}

// Endpoints are the "ovsdb" and "openflow" keys of a network config,
// parsed once by ParseEndpoints: what every call to OVSDB, OpenFlow and
// ovs-vswitchd's control socket is given.
type Endpoints struct {
	OVSDB endpoint.Endpoint
	// OVSDBDefault: the config has no "ovsdb" key, OVSDB is the default
	// (endpoint.DefaultOVSDB).
	OVSDBDefault bool
	// OpenFlow is the "openflow" override; zero: each bridge's own
	// management socket (OpenFlowOf).
	OpenFlow endpoint.Endpoint
}

// ParseEndpoints parses the "ovsdb" and "openflow" (optional) keys of a
// network config: a *types.Error, code 7 naming the key, when one does not
// parse.
func ParseEndpoints(ovsdb, openflow string) (Endpoints, error) {
	var e Endpoints
	var err error
	if ovsdb == "" {
		ovsdb, e.OVSDBDefault = endpoint.DefaultOVSDB, true
	}
	if e.OVSDB, err = endpoint.Parse(ovsdb); err != nil {
		return Endpoints{}, cnierr.Invalid(`"ovsdb": %v`, err).CNI()
	}
	if openflow == "" {
		return e, nil
	}
	if e.OpenFlow, err = endpoint.ParseOpenFlow(openflow); err != nil {
		return Endpoints{}, cnierr.Invalid(`"openflow": %v`, err).CNI()
	}
	return e, nil
}

// Access is the part of every plugin's network config that says where Open
// vSwitch is and how long a command may take: the "ovsdb", "openflow" and
// "timeout" keys, and what ParseAccess makes of them. Embedded in a
// plugin's config, it gives it the OVSDBEndpoint and CommandBudget that
// Conf asks for.
type Access struct {
	OVSDB    string `json:"ovsdb,omitempty"`
	OpenFlow string `json:"openflow,omitempty"`
	// Timeout is how long an ADD may take (ParseTimeout).
	Timeout string `json:"timeout,omitempty"`

	Endpoints Endpoints `json:"-"` // "ovsdb" and "openflow", parsed
	Budget    Budget    `json:"-"` // "timeout", parsed
}

// ParseAccess parses the keys into Endpoints and Budget: code 7 naming
// the key that does not parse.
func (a *Access) ParseAccess() error {
	var err error
	if a.Endpoints, err = ParseEndpoints(a.OVSDB, a.OpenFlow); err != nil {
		return err
	}
	a.Budget, err = ParseTimeout(a.Timeout)
	return err
}

// OVSDBEndpoint is where the commands find OVSDB.
func (a *Access) OVSDBEndpoint() endpoint.Endpoint { return a.Endpoints.OVSDB }

// CommandBudget is the commands' time ("timeout").
func (a *Access) CommandBudget() Budget { return a.Budget }

// OpenFlowOf is the OpenFlow endpoint of bridge: the override, else the
// management socket beside OVSDB's (endpoint.OpenFlow).
func (e Endpoints) OpenFlowOf(bridge string) endpoint.Endpoint {
	return endpoint.OpenFlow(e.OpenFlow, e.OVSDB, bridge)
}
