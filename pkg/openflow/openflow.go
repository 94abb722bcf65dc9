// Package openflow is a small native OpenFlow 1.4 client for the plugins' hot
// path: it applies the add-flows bundles of pkg/flows and deletes flows by
// cookie without executing ovs-ofctl (about 0.5 ms instead of 4-5 ms). It
// uses the standard library only, and pkg/dial.
//
// Apply compiles exactly the subset of ovs-ofctl syntax that pkg/flows emits
// into the messages ovs-ofctl would send, and returns ErrUnsupported for
// anything else, so the caller can fall back to ovs-ofctl:
//
//	lines     add FLOW | delete cookie=V/M | delete_strict cookie=V/M,table=N,priority=N,in_port=N
//	          (blank lines and # comments skipped)
//	FLOW      cookie=V,table=N,priority=N,MATCH...,actions=ACTIONS
//	MATCH     ip ipv6 arp icmp icmp6 tcp udp sctp tcp6 udp6 sctp6
//	          in_port=N  regN=V[/M]  ct_state=+flag-flag..  ct_mark=V[/M]
//	          dl_src dl_dst eth_src eth_dst=MAC  arp_sha arp_tha=MAC
//	          nw_src nw_dst arp_spa arp_tpa=IPv4[/LEN]  ipv6_src ipv6_dst nd_target=IPv6[/LEN]
//	          tp_src tp_dst=N  icmp_type icmp_code=N
//	ACTIONS   drop | ACTION,...[,goto_table:N]
//	ACTION    NORMAL  output:N  output:FIELD[A..B]  resubmit(,N)
//	          move:FIELD[A..B]->FIELD[C..D]  load:V->FIELD[A..B]  set_field:MAC->eth_dst|eth_src
//	          ct(commit,zone=N,nat|nat(src|dst=ADDR[:PORT]),exec(move|load|set_field...),table=N), any subset, any order
//	FIELD     NXM_OF_IN_PORT NXM_OF_ETH_SRC NXM_OF_ETH_DST NXM_NX_REG0..15 NXM_NX_CT_MARK NXM_NX_CT_LABEL
//	numbers   decimal or 0x hexadecimal (ports decimal only); a cookie mask may be -1; ADDR is IPv4 or [IPv6]
//
// Matches are sent as OXM (OpenFlow basic class, NXM1 for registers and
// conntrack fields) in prerequisite order; actions as an apply_actions
// instruction (Nicira extensions for ct, nat, move, load, output from a
// field and resubmit) followed by goto_table.
//
// Message sequence of Apply, on one connection:
//
//	-> HELLO (1.4), BUNDLE_CONTROL open (ATOMIC|ORDERED), BUNDLE_ADD_MESSAGE(FLOW_MOD) per line, BARRIER
//	<- HELLO, open reply, any ERROR of a rejected flow_mod, barrier reply
//	-> BUNDLE_CONTROL commit (or discard after an ERROR)
//	<- commit reply (or ERRORs: nothing applied)
//
// The barrier makes every add-time ERROR arrive before the commit is sent, so
// a rejected line discards the whole bundle. DeleteCookie sends HELLO,
// FLOW_MOD (OFPFC_DELETE, all tables, cookie/mask) and BARRIER at once.
package openflow

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/dial"
)

// Timeout bounds every call, like pkg/ofctl.Timeout: ovs-vswitchd answers no
// OpenFlow request while ovsdb-server is down, and a plugin must not hang.
const Timeout = 10 * time.Second

var (
	// ErrTimeout says that ovs-vswitchd did not answer within the context's
	// deadline or Timeout.
	ErrTimeout = errors.New("ovs-vswitchd did not answer on OpenFlow")
	// ErrUnsupported says that the bundle uses syntax this package does not
	// compile; ovs-ofctl may still know it.
	ErrUnsupported = errors.New("syntax not supported by the native OpenFlow client")
)

// Message types and bundle control types of OpenFlow 1.4.
const (
	version           = 0x05
	ofptHello         = 0
	ofptError         = 1
	ofptEchoRequest   = 2
	ofptEchoReply     = 3
	ofptFlowMod       = 14
	ofptBarrierReq    = 20
	ofptBarrierReply  = 21
	ofptBundleControl = 33
	ofptBundleAdd     = 34

	bundleOpen    = 0
	bundleCommit  = 4
	bundleDiscard = 6
	// bundleFlags are OFPBF_ATOMIC|OFPBF_ORDERED, as ovs-ofctl --bundle sets.
	bundleFlags = 3
)

// Apply applies the text of an add-flows file (what `ovs-ofctl --no-names -O
// OpenFlow14 --bundle add-flows TARGET -` reads on stdin) as one atomic
// bundle. target is "unix:PATH" or "tcp:HOST:PORT".
func Apply(ctx context.Context, target string, bundle string) error {
	mods, err := compile(bundle)
	if err != nil {
		return fmt.Errorf("compiling bundle for %s: %w", target, err)
	}
	return session(ctx, target, "applying bundle", func(s *conn) error {
		// xids: 1 open, 2.. one per line, then barrier, then commit or discard.
		b := hello()
		b = append(b, bundleControl(1, bundleOpen)...)
		for i, m := range mods {
			xid := uint32(2 + i)
			binary.BigEndian.PutUint32(m.msg[4:], xid) // the inner xid must be the outer one
			b = append(b, header(ofptBundleAdd, xid, 16+len(m.msg))...)
			b = append(b, 0, 0, 0, 0, 0, 0, 0, bundleFlags) // bundle_id 0, pad, flags
			b = append(b, m.msg...)
		}
		barrier := uint32(2 + len(mods))
		b = append(b, header(ofptBarrierReq, barrier, 8)...)
		// Written while the replies are read: ovs-vswitchd stops reading
		// while its replies (errors of a large bad bundle) are not read.
		sent := make(chan error, 1)
		go func() { sent <- s.send(b) }()
		if err := s.hello(); err != nil {
			return err
		}
		describe := func(xid uint32) string {
			switch {
			case xid == 1:
				return "bundle open"
			case xid >= 2 && xid < barrier:
				m := mods[xid-2]
				return fmt.Sprintf("line %d %q", m.line, m.text)
			case xid == barrier+1:
				return "bundle commit"
			}
			return fmt.Sprintf("xid %d", xid)
		}
		errs, err := s.until(barrier, ofptBarrierReply, describe)
		if err != nil {
			return err
		}
		if err := <-sent; err != nil {
			return err
		}
		last := uint32(bundleCommit)
		if len(errs) > 0 {
			last = bundleDiscard
		}
		if err := s.send(bundleControl(barrier+1, uint16(last))); err != nil {
			return err
		}
		more, err := s.until(barrier+1, ofptBundleControl, describe)
		if err != nil {
			return err
		}
		if errs = append(errs, more...); len(errs) > maxErrors {
			errs = append(errs[:maxErrors], fmt.Errorf("and %d more OpenFlow errors", len(errs)-maxErrors))
		}
		return errors.Join(errs...)
	})
}

// maxErrors is how many OpenFlow errors of one bundle Apply reports.
const maxErrors = 5

// DeleteCookie removes the flows whose cookie matches cookie under mask in
// every table, like `ovs-ofctl del-flows TARGET cookie=C/M`, and waits for a
// barrier so that they are gone when it returns.
func DeleteCookie(ctx context.Context, target string, cookie, mask uint64) error {
	return session(ctx, target, "deleting flows", func(s *conn) error {
		b := hello()
		del := flowModMsg(cookie, mask, ofpttAll, ofpfcDelete, 0, ofpDefaultPrio, nil, nil)
		binary.BigEndian.PutUint32(del[4:], 1)
		b = append(append(b, del...), header(ofptBarrierReq, 2, 8)...)
		if err := s.send(b); err != nil {
			return err
		}
		if err := s.hello(); err != nil {
			return err
		}
		errs, err := s.until(2, ofptBarrierReply, func(uint32) string {
			return fmt.Sprintf("delete cookie=%#x/%#x", cookie, mask)
		})
		if err != nil {
			return err
		}
		return errors.Join(errs...)
	})
}

// session connects to target and runs fn under the deadline of ctx, bounded
// by Timeout.
func session(ctx context.Context, target, what string, fn func(*conn) error) (err error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	defer func() {
		if err == nil {
			return
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("%s on %s: %w (%v)", what, target, ErrTimeout, err)
		} else {
			err = fmt.Errorf("%s on %s: %w", what, target, err)
		}
	}()
	network, addr, ok := strings.Cut(target, ":")
	if !ok || network != "unix" && network != "tcp" {
		return fmt.Errorf("target %q: %w", target, ErrUnsupported)
	}
	c, err := dial.Dial(ctx, network, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	defer stop()
	err = fn(&conn{c: c, r: bufio.NewReader(c)})
	if err != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	return err
}

type conn struct {
	c   net.Conn
	r   *bufio.Reader
	ver uint8 // version in the header of the last message read
}

func (s *conn) send(b []byte) error {
	_, err := s.c.Write(b)
	return err
}

// recv reads one message.
func (s *conn) recv() (typ uint8, xid uint32, body []byte, err error) {
	var h [8]byte
	if _, err = io.ReadFull(s.r, h[:]); err != nil {
		return 0, 0, nil, fmt.Errorf("reading from ovs-vswitchd: %w", err)
	}
	n := int(binary.BigEndian.Uint16(h[2:]))
	if n < 8 {
		return 0, 0, nil, fmt.Errorf("message of length %d from ovs-vswitchd", n)
	}
	body = make([]byte, n-8)
	if _, err = io.ReadFull(s.r, body); err != nil {
		return 0, 0, nil, fmt.Errorf("reading from ovs-vswitchd: %w", err)
	}
	s.ver = h[0]
	return h[1], binary.BigEndian.Uint32(h[4:]), body, nil
}

// hello reads the peer's HELLO and checks that it allows OpenFlow 1.4.
func (s *conn) hello() error {
	typ, _, body, err := s.recv()
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("version negotiation (does the bridge allow OpenFlow 1.4?): %w", err)
	}
	if err != nil {
		return err
	}
	if typ == ofptError {
		return fmt.Errorf("version negotiation: %w", decodeError(body, "hello"))
	}
	if typ != ofptHello {
		return fmt.Errorf("message type %d instead of HELLO", typ)
	}
	// OFPHET_VERSIONBITMAP (1) lists the versions; without one, the version
	// in the header is the highest.
	ok := s.ver >= version
	for len(body) >= 4 {
		et, el := binary.BigEndian.Uint16(body), int(binary.BigEndian.Uint16(body[2:]))
		if el < 4 || el > len(body) {
			break
		}
		if et == 1 && el >= 8 {
			ok = binary.BigEndian.Uint32(body[4:])&(1<<version) != 0
		}
		if next := (el + 7) / 8 * 8; next <= len(body) {
			body = body[next:]
		} else {
			break
		}
	}
	if !ok {
		return fmt.Errorf("version negotiation: the bridge does not allow OpenFlow 1.4 (its protocols column)")
	}
	return nil
}

// until reads messages up to the reply (of type want) or ERROR with xid, and
// returns the ERRORs it saw, each described by describe(its xid).
func (s *conn) until(xid uint32, want uint8, describe func(uint32) string) ([]error, error) {
	var errs []error
	for {
		typ, x, body, err := s.recv()
		if err != nil {
			return nil, err
		}
		switch typ {
		case ofptError:
			errs = append(errs, decodeError(body, describe(x)))
			if x == xid {
				return errs, nil
			}
		case ofptEchoRequest:
			if err := s.send(append(header(ofptEchoReply, x, 8+len(body)), body...)); err != nil {
				return nil, err
			}
		case want:
			if x == xid {
				return errs, nil
			}
		}
	}
}

// header renders an OpenFlow 1.4 header.
func header(typ uint8, xid uint32, length int) []byte {
	b := []byte{version, typ, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[2:], uint16(length))
	binary.BigEndian.PutUint32(b[4:], xid)
	return b
}

// hello renders a HELLO offering OpenFlow 1.4 only, with a version bitmap.
func hello() []byte {
	b := header(ofptHello, 0, 16)
	return append(b, 0, 1, 0, 8, 0, 0, 0, 1<<version)
}

func bundleControl(xid uint32, typ uint16) []byte {
	b := header(ofptBundleControl, xid, 16)
	b = append(b, 0, 0, 0, 0) // bundle_id 0
	b = binary.BigEndian.AppendUint16(b, typ)
	return binary.BigEndian.AppendUint16(b, bundleFlags)
}

// errorTypes names the OFPET_* error types of OpenFlow 1.4.
var errorTypes = []string{
	"HELLO_FAILED", "BAD_REQUEST", "BAD_ACTION", "BAD_INSTRUCTION", "BAD_MATCH",
	"FLOW_MOD_FAILED", "GROUP_MOD_FAILED", "PORT_MOD_FAILED", "TABLE_MOD_FAILED",
	"QUEUE_OP_FAILED", "SWITCH_CONFIG_FAILED", "ROLE_REQUEST_FAILED", "METER_MOD_FAILED",
	"TABLE_FEATURES_FAILED", "BAD_PROPERTY", "ASYNC_CONFIG_FAILED", "FLOW_MONITOR_FAILED",
	"BUNDLE_FAILED",
}

// decodeError renders the body of an OFPT_ERROR about what.
func decodeError(body []byte, what string) error {
	if len(body) < 4 {
		return fmt.Errorf("%s: truncated OFPT_ERROR", what)
	}
	typ, code := binary.BigEndian.Uint16(body), binary.BigEndian.Uint16(body[2:])
	name := fmt.Sprintf("type %d", typ)
	switch {
	case int(typ) < len(errorTypes):
		name = "OFPET_" + errorTypes[typ]
	case typ == 0xffff && len(body) >= 8:
		name = fmt.Sprintf("experimenter %#08x", binary.BigEndian.Uint32(body[4:]))
	}
	return fmt.Errorf("%s: OFPT_ERROR %s code %d", what, name, code)
}

// aLongTimeAgo is a deadline in the past: setting it unblocks a read at once.
var aLongTimeAgo = time.Unix(1, 0)
