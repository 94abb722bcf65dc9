// Package endpoint parses, validates and dials the endpoints of the Open
// vSwitch daemons ("unix:PATH", "tcp:HOST:PORT", and for OVSDB
// "ssl:HOST:PORT" with TLS's files), for OVSDB and OpenFlow alike (Endpoint,
// Dial), and declares the one timeout sentinel of the suite
// (ErrTimeout) and the bound of a call made without one (Bounded).
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrTimeout says that an Open vSwitch daemon did not answer in time
// (ovs-vswitchd on OpenFlow or its control socket, or a wait for it in
// OVSDB): it is down or overloaded, and the plugins answer CNI code 11 (try
// again later). Every timeout of the suite wraps it.
var ErrTimeout = errors.New("ovs-vswitchd did not answer in time")

// Unbounded is how long a call to a daemon may wait when its context has
// no deadline (Bounded). The plugins' calls carry their command's
// (pkg/cnicmd), the node agent's its loop's: this one is for a tool's or a
// test's, so that no call waits for ever on a daemon that does not answer.
const Unbounded = time.Minute

// Bounded returns ctx, or, when ctx has no deadline, ctx bounded by
// Unbounded. Every wait on a daemon goes through it: its own deadline is
// the caller's.
func Bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, Unbounded)
}

// DefaultOVSDB is where Open vSwitch puts its database socket.
const DefaultOVSDB = "unix:/var/run/openvswitch/db.sock"

// Endpoint is where an Open vSwitch daemon listens: "unix:PATH",
// "tcp:HOST:PORT" or "ssl:HOST:PORT", the syntax of ovs-vsctl --db and
// ovs-ofctl.
type Endpoint struct {
	Network string // "unix", "tcp" or "ssl"
	Address string // the socket's path, or HOST:PORT
	TLS     TLS    // ssl: only; set by the caller, not by Parse
}

// Parse checks the "unix:PATH" / "tcp:HOST:PORT" / "ssl:HOST:PORT" syntax
// of s.
func Parse(s string) (Endpoint, error) {
	network, addr, _ := strings.Cut(s, ":")
	switch {
	case network == "unix" && addr != "":
		return Endpoint{Network: network, Address: addr}, nil
	case network == "tcp" || network == "ssl":
		if err := validateHostPort(s, addr); err != nil {
			return Endpoint{}, err
		}
		return Endpoint{Network: network, Address: addr}, nil
	}
	return Endpoint{}, fmt.Errorf("endpoint %q: want unix:PATH, tcp:HOST:PORT or ssl:HOST:PORT", s)
}

// ParseOpenFlow is Parse for an OpenFlow target, which, like ovs-ofctl's,
// takes an absolute unix socket path and no separators or quotes.
func ParseOpenFlow(s string) (Endpoint, error) {
	e, err := Parse(s)
	if err != nil {
		return e, err
	}
	if e.Network == "ssl" || e.Network == "unix" && !strings.HasPrefix(e.Address, "/") || strings.ContainsAny(s, " \t\n,;'\"") {
		return Endpoint{}, fmt.Errorf("endpoint %q: want unix:/PATH or tcp:HOST:PORT", s)
	}
	return e, nil
}

// String is e as Parse takes it ("" for the zero Endpoint).
func (e Endpoint) String() string {
	if e.IsZero() {
		return ""
	}
	return e.Network + ":" + e.Address
}

// Set parses s into e, "" being the zero Endpoint: e is a flag.Value.
func (e *Endpoint) Set(s string) error {
	if s == "" {
		*e = Endpoint{}
		return nil
	}
	p, err := Parse(s)
	if err != nil {
		return err
	}
	*e = p
	return nil
}

// MarshalText and UnmarshalText store e as its String() in a record (JSON
// in OVSDB's external_ids), "" for the zero Endpoint.
func (e Endpoint) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

func (e *Endpoint) UnmarshalText(b []byte) error { return e.Set(string(b)) }

// MustParse is Parse for an endpoint known to be good (a default): it
// panics on an error.
func MustParse(s string) Endpoint {
	e, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return e
}

// Dial connects to e within ctx (see the package comment on full backlogs),
// over TLS for ssl:.
func (e Endpoint) Dial(ctx context.Context) (net.Conn, error) {
	if e.Network == "ssl" {
		return dialTLS(ctx, e.Address, e.TLS)
	}
	return Dial(ctx, e.Network, e.Address)
}

// validateHostPort checks the HOST:PORT of a tcp: endpoint ep: an IP address
// or a DNS name, and a port from 1 to 65535.
func validateHostPort(ep, hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("endpoint %q: %w", ep, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("endpoint %q: port %q: want 1-65535", ep, port)
	}
	if _, err := netip.ParseAddr(host); err != nil && !isDNSName(host) {
		return fmt.Errorf("endpoint %q: host %q: not an IP address or DNS name", ep, host)
	}
	return nil
}

// isDNSName reports whether host is 1-253 letters, digits, '.' and '-',
// starting and ending with a letter or digit. (Not a regexp: compiling one
// with a {0,251} repetition would cost every plugin process at start-up,
// docs/performance.md.)
func isDNSName(host string) bool {
	if len(host) < 1 || len(host) > 253 {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(host); i++ {
		if c := host[i]; !alnum(c) && ((c != '.' && c != '-') || i == 0 || i == len(host)-1) {
			return false
		}
	}
	return true
}

// IsZero reports whether e is the zero Endpoint: none given.
func (e Endpoint) IsZero() bool { return e == Endpoint{} }

// OpenFlow is where ovs-vswitchd listens for OpenFlow on bridge: the
// override if set, else "unix:<directory of the OVSDB unix socket>/<bridge>.mgmt"
// (ovs-vswitchd puts both in its run directory).
func OpenFlow(override, ovsdb Endpoint, bridge string) Endpoint {
	if !override.IsZero() {
		return override
	}
	dir := "/var/run/openvswitch"
	if ovsdb.Network == "unix" {
		dir = filepath.Dir(ovsdb.Address)
	}
	return Endpoint{Network: "unix", Address: filepath.Join(dir, bridge+".mgmt")}
}

// Listening reports whether a daemon listens on target. A socket file it
// left when it died refuses connections, and a missing one is gone (and an
// ovs-vswitchd's flows died with it). Any other failure (a full backlog, a
// slow accept) counts as listening, so that the real call reports it.
func Listening(e Endpoint) bool {
	if e.Network != "unix" {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := e.Dial(ctx)
	if err != nil {
		return !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT)
	}
	c.Close()
	return true
}
