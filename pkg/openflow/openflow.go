// Package openflow is the plugins' OpenFlow 1.4 binding, standard library
// only (and pkg/endpoint): flows are values (Flow, Match, Actions) that render
// ovs-ofctl text for people (golden files, CHECK, error messages) and encode
// themselves for the wire; Apply installs a Bundle of them atomically,
// DeleteFlows removes flows by cookie, Dump reads flows back by cookie into
// the same values, and FlushConntrack drops conntrack entries, all over the
// bridge's management socket without executing ovs-ofctl. Nothing here
// parses text.
//
// Matches are sent as OXM (OpenFlow basic class, NXM1 for registers and
// conntrack fields, NXM0 for vlan_tci) in prerequisite order; actions as an
// apply_actions instruction (Nicira extensions for ct, nat, move, load,
// output from a field and resubmit) followed by goto_table: the messages
// ovs-ofctl sends for the same text (the tests compare both through
// `ovs-ofctl ofp-print`).
//
// Message sequence of Apply, on one connection:
//
//	-> HELLO (1.4), BUNDLE_CONTROL open (ATOMIC|ORDERED), BUNDLE_ADD_MESSAGE(FLOW_MOD) per entry, BARRIER
//	<- HELLO, open reply, any ERROR of a rejected flow_mod, barrier reply
//	-> BUNDLE_CONTROL commit (or discard after an ERROR)
//	<- commit reply (or ERRORs: nothing applied)
//	-> NXT_CT_FLUSH per conntrack flush asked for, BARRIER (after a commit)
//	<- any ERROR of a flush, barrier reply
//
// The barrier makes every add-time ERROR arrive before the commit is sent, so
// a rejected entry discards the whole bundle. DeleteFlows sends HELLO,
// FLOW_MOD (OFPFC_DELETE, all tables, cookie/mask), any NXT_CT_FLUSH and
// BARRIER at once; Dump
// HELLO and one OFPMP_FLOW request, read until the reply without
// OFPMPF_REPLY_MORE; FlushConntrack HELLO, one NXT_CT_FLUSH per entry and
// BARRIER.
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
	"syscall"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

var (
	// ErrTimeout says that ovs-vswitchd did not answer within the context's
	// deadline (every call waits until then: a busy ovs-vswitchd answers
	// late, and one answers no OpenFlow request while ovsdb-server is down;
	// a context without a deadline is bounded by endpoint.Bounded): the
	// suite's one timeout sentinel.
	ErrTimeout = endpoint.ErrTimeout
	// ErrUnsupported says that the target is not a unix: or tcp: endpoint.
	ErrUnsupported = errors.New("OpenFlow endpoint not supported")
	// ErrConntrackFlush says that flows were deleted but a conntrack flush
	// sent with them failed (an ovs-vswitchd before 3.1 has no NXT_CT_FLUSH).
	ErrConntrackFlush = errors.New("conntrack flush failed")
)

// Message types and bundle control types of OpenFlow 1.4.
const (
	version            = 0x05
	ofptHello          = 0
	ofptError          = 1
	ofptEchoRequest    = 2
	ofptEchoReply      = 3
	ofptFlowMod        = 14
	ofptExperimenter   = 4
	ofptMultipartReq   = 18
	ofptMultipartReply = 19
	ofptBarrierReq     = 20
	ofptBarrierReply   = 21
	ofptBundleControl  = 33
	ofptBundleAdd      = 34

	ofpmpFlow       = 1
	ofpmpfReplyMore = 1

	bundleOpen    = 0
	bundleCommit  = 4
	bundleDiscard = 6
	// bundleFlags are OFPBF_ATOMIC|OFPBF_ORDERED, as ovs-ofctl --bundle sets.
	bundleFlags = 3
)

// NotServed reports whether err says that no ovs-vswitchd serves the bridge
// at the target: its socket is missing or refuses connections (ovs-vswitchd
// down, restarting, or not yet done creating the bridge). Nothing is
// forwarded on the bridge then.
func NotServed(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// ApplyServed is Apply on a bridge that ovs-vswitchd may not serve yet:
// while NotServed, it tries again every 20 ms until ctx ends (bounded as
// every call is, endpoint.Bounded), then fails with ErrTimeout.
func ApplyServed(ctx context.Context, target endpoint.Endpoint, bundle Bundle) error {
	ctx, cancel := endpoint.Bounded(ctx)
	defer cancel()
	start := time.Now()
	var notServed error // the last try's, while the bridge was not served
	notServedErr := func(err error) error {
		return fmt.Errorf("%w: ovs-vswitchd does not serve the bridge within %s: %w", ErrTimeout, time.Since(start).Round(time.Millisecond), err)
	}
	for {
		err := Apply(ctx, target, bundle)
		if !NotServed(err) {
			// A try that ctx's end cut short (its dial timed out, not
			// refused) after tries that found the bridge not served says
			// what they said.
			if err != nil && notServed != nil && endpoint.Ended(ctx, err) {
				return notServedErr(notServed)
			}
			return err
		}
		notServed = err
		select {
		case <-ctx.Done():
			return notServedErr(err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Apply applies the bundle as one atomic transaction: all of it or, when
// OVS rejects any entry, none. target is a unix: or tcp: endpoint. An
// entry that would not encode (see Flow.Validate) fails before connecting.
// Once the bundle is committed, it removes the conntrack entries each of
// flushes selects (see FlushConntrack) on the same connection: a second
// connection would wait for ovs-vswitchd's main loop to accept it. When only
// flushes fail, the error is a *ConntrackFlushError.
//
// ovs-vswitchd discards a bundle that stays idle for its
// bundle-idle-timeout (10 s by default) before the commit, which a node at
// its limit can make it do with a bundle sent whole (its main loop busy for
// that long between two of the bundle's messages): nothing of it was
// applied, and Apply sends it again while ctx lasts (maxTries in all).
func Apply(ctx context.Context, target endpoint.Endpoint, bundle Bundle, flushes ...CTFlush) error {
	for _, m := range bundle {
		if f, ok := m.(Flow); ok {
			if err := f.Validate(); err != nil {
				return fmt.Errorf("bundle for %s: %w", target, err)
			}
		}
	}
	for try := 0; ; try++ {
		err := apply(ctx, target, bundle, flushes, try)
		if !bundleExpired(err) || ctx.Err() != nil || try == maxTries-1 {
			return err
		}
	}
}

// maxTries bounds Apply's tries of a bundle that expires each time, for a
// ctx without a deadline.
const maxTries = 5

// beforeCommit, when set (tests), runs on each try of Apply before its
// commit is sent.
var beforeCommit func(s *conn, try int)

// bundleExpired reports whether ovs-vswitchd discarded a bundle for its
// idle timeout (OFPBFC_TIMEOUT).
func bundleExpired(err error) bool {
	var oe *Error
	return err != nil && errors.As(err, &oe) && oe.Type == ofpetBundleFailed && oe.Code == ofpbfcTimeout
}

// apply is one try of Apply.
func apply(ctx context.Context, target endpoint.Endpoint, bundle Bundle, flushes []CTFlush, try int) error {
	return session(ctx, target, "applying bundle", func(s *conn) error {
		// xids: 1 open, 2.. one per entry, then barrier, then commit or discard.
		b := hello()
		b = append(b, bundleControl(1, bundleOpen)...)
		for i, m := range bundle {
			xid := uint32(2 + i)
			start := len(b)
			b = append(b, header(ofptBundleAdd, xid, 0)...)
			b = append(b, 0, 0, 0, 0, 0, 0, 0, bundleFlags) // bundle_id 0, pad, flags
			inner := len(b)
			b = m.flowMod(b)
			binary.BigEndian.PutUint32(b[inner+4:], xid) // the inner xid must be the outer one
			binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
		}
		barrier := uint32(2 + len(bundle))
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
				return fmt.Sprintf("entry %d %q", xid-1, bundle[xid-2].Line())
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
		if beforeCommit != nil {
			beforeCommit(s, try)
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
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		return s.flush(nil, barrier+2, flushes)
	})
}

// maxErrors is how many OpenFlow errors of one bundle Apply reports.
const maxErrors = 5

// DeleteFlows removes the flows d selects (like `ovs-ofctl del-flows TARGET
// cookie=C/M`) and waits for a barrier so that they are gone when it
// returns. It also removes the conntrack entries each of flushes selects, in
// the same exchange; when only those fail, the error is a
// *ConntrackFlushError.
func DeleteFlows(ctx context.Context, target endpoint.Endpoint, d Delete, flushes ...CTFlush) error {
	return session(ctx, target, "deleting flows", func(s *conn) error {
		b := hello()
		start := len(b)
		b = d.flowMod(b)
		binary.BigEndian.PutUint32(b[start+4:], 1)
		for i, f := range flushes {
			b = f.encode(b, uint32(2+i))
		}
		barrier := uint32(2 + len(flushes))
		b = append(b, header(ofptBarrierReq, barrier, 8)...)
		if err := s.send(b); err != nil {
			return err
		}
		if err := s.hello(); err != nil {
			return err
		}
		var deleteFailed bool
		errs, err := s.until(barrier, ofptBarrierReply, func(xid uint32) string {
			if xid >= 2 && xid < barrier {
				return "ct-flush " + flushes[xid-2].String()
			}
			deleteFailed = true
			return d.Line()
		})
		if err != nil || len(errs) == 0 {
			return err
		}
		if deleteFailed {
			return errors.Join(errs...)
		}
		return &ConntrackFlushError{Errs: errs}
	})
}

// Dump returns the flows, in every table, whose cookie matches cookie under
// mask (like `ovs-ofctl dump-flows TARGET cookie=C/M`), decoded into the
// values Apply takes (see Diff for how they compare).
func Dump(ctx context.Context, target endpoint.Endpoint, cookie, mask uint64) ([]Flow, error) {
	var out []Flow
	err := dump(ctx, target, cookie, mask, func(_ []byte, f Flow) { out = append(out, f) })
	return out, err
}

// dump sends one flow stats request and calls each with every entry of the
// reply (its ofp_flow_stats bytes) and its decoded flow.
func dump(ctx context.Context, target endpoint.Endpoint, cookie, mask uint64, each func(entry []byte, f Flow)) error {
	b := []byte{ofpttAll, 0, 0, 0}                // table_id, pad
	b = binary.BigEndian.AppendUint32(b, ofppAny) // out_port
	b = binary.BigEndian.AppendUint32(b, ofpgAny) // out_group
	b = append(b, 0, 0, 0, 0)                     // pad
	b = binary.BigEndian.AppendUint64(b, cookie)
	b = binary.BigEndian.AppendUint64(b, mask)
	b = appendMatch(b, Match{})
	return multipart(ctx, target, "dumping flows", ofpmpFlow, b, func(reply []byte) (bool, error) {
		return false, eachFlowStats(reply, each)
	}, nil)
}

// multipart sends one multipart request of type mp (its body after
// ofp_multipart_request's flags) and hands each reply's body to each,
// until the last reply or each says it is done. An error message in
// answer goes through refused (nil: it is the error), which may make it
// no error.
func multipart(ctx context.Context, target endpoint.Endpoint, what string, mp uint16, body []byte, each func(reply []byte) (done bool, err error), refused func(error) error) error {
	return session(ctx, target, what, func(s *conn) error {
		b := hello()
		start := len(b)
		b = append(b, header(ofptMultipartReq, 1, 0)...)
		b = binary.BigEndian.AppendUint16(b, mp)
		b = append(b, 0, 0, 0, 0, 0, 0) // flags, pad
		b = append(b, body...)
		binary.BigEndian.PutUint16(b[start+2:], uint16(len(b)-start))
		if err := s.send(b); err != nil {
			return err
		}
		if err := s.hello(); err != nil {
			return err
		}
		for {
			typ, xid, reply, err := s.recv()
			if err != nil {
				return err
			}
			switch {
			case typ == ofptError:
				err := decodeError(reply, fmt.Sprintf("multipart request of type %d", mp))
				if refused != nil {
					err = refused(err)
				}
				return err
			case typ == ofptEchoRequest:
				if err := s.send(append(header(ofptEchoReply, xid, 8+len(reply)), reply...)); err != nil {
					return err
				}
			case typ == ofptMultipartReply && xid == 1:
				if len(reply) < 8 || binary.BigEndian.Uint16(reply) != mp {
					return decodeErr("multipart reply of %d bytes", len(reply))
				}
				done, err := each(reply[8:])
				if err != nil || done || binary.BigEndian.Uint16(reply[2:])&ofpmpfReplyMore == 0 {
					return err
				}
			}
		}
	})
}

// session connects to target and runs fn under the deadline of ctx
// (endpoint.Bounded).
func session(ctx context.Context, target endpoint.Endpoint, what string, fn func(*conn) error) (err error) {
	ctx, cancel := endpoint.Bounded(ctx)
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
	if target.Network != "unix" && target.Network != "tcp" { // OpenFlow over TLS is not offered
		return fmt.Errorf("target %q: %w", target, ErrUnsupported)
	}
	c, err := target.Dial(ctx)
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

// ConntrackFlushError says that conntrack flushes sent after a bundle or
// with a delete failed, the flows being applied or deleted; it matches
// ErrConntrackFlush (errors.Is) and unwraps to each flush's error.
type ConntrackFlushError struct{ Errs []error }

func (e *ConntrackFlushError) Error() string {
	return ErrConntrackFlush.Error() + ": " + errors.Join(e.Errs...).Error()
}

func (e *ConntrackFlushError) Is(target error) bool { return target == ErrConntrackFlush }
func (e *ConntrackFlushError) Unwrap() []error      { return e.Errs }

// Unsupported reports whether ovs-vswitchd knows no NXT_CT_FLUSH (it is
// older than 3.1): every flush was refused as an unknown request.
func (e *ConntrackFlushError) Unsupported() bool {
	for _, err := range e.Errs {
		var oe *Error
		if !errors.As(err, &oe) || !oe.Unsupported() {
			return false
		}
	}
	return len(e.Errs) > 0
}

// Error is an OFPT_ERROR with which ovs-vswitchd refused a request.
type Error struct {
	What       string // the request, for people
	Type, Code uint16 // OFPET_*, and the code within it
	Vendor     uint32 // an experimenter error's (Type 0xffff)
}

func (e *Error) Error() string {
	name := fmt.Sprintf("type %d", e.Type)
	switch {
	case int(e.Type) < len(errorTypes):
		name = "OFPET_" + errorTypes[e.Type]
	case e.Type == 0xffff:
		name = fmt.Sprintf("experimenter %#08x", e.Vendor)
	}
	return fmt.Sprintf("%s: OFPT_ERROR %s code %d", e.What, name, e.Code)
}

// OFPET_BAD_REQUEST and the codes of a request the switch does not know;
// OFPET_BUNDLE_FAILED and its code for a bundle discarded while idle.
const (
	ofpetBadRequest   = 1
	ofpbrcBadType     = 1
	ofpbrcBadExp      = 3
	ofpbrcBadExpType  = 4
	ofpetBundleFailed = 17
	ofpbfcTimeout     = 14
)

// Unsupported reports whether the switch does not know the request at all
// (OFPBRC_BAD_TYPE, BAD_EXPERIMENTER or BAD_EXP_TYPE: an ovs-vswitchd older
// than the message), rather than refusing its content.
func (e *Error) Unsupported() bool {
	return e.Type == ofpetBadRequest && (e.Code == ofpbrcBadType || e.Code == ofpbrcBadExp || e.Code == ofpbrcBadExpType)
}

// decodeError decodes the body of an OFPT_ERROR about what.
func decodeError(body []byte, what string) error {
	if len(body) < 4 {
		return fmt.Errorf("%s: truncated OFPT_ERROR", what)
	}
	e := &Error{What: what, Type: binary.BigEndian.Uint16(body), Code: binary.BigEndian.Uint16(body[2:])}
	if e.Type == 0xffff && len(body) >= 8 {
		e.Vendor = binary.BigEndian.Uint32(body[4:])
	}
	return e
}

// aLongTimeAgo is a deadline in the past: setting it unblocks a read at once.
var aLongTimeAgo = time.Unix(1, 0)
