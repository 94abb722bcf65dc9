package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"syscall"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/jsonrpc"
)

// ErrUnreachable wraps every failure to reach ovsdb-server, so that callers can
// tell "try again later" from other errors.
var ErrUnreachable = errors.New("ovsdb unreachable")

// Client is a connection to ovsdb-server without cache or monitor.
//
// A call that breaks the connection (a timeout, ovsdb-server gone) fails;
// the next one dials again. A client holds no state on the server (no
// lock, no monitor), so a new connection serves as well as the old, and
// what runs after a failure, the rollback of an ADD whose context ran out
// above all, must not fail only because the failure broke the connection.
type Client struct {
	c  *jsonrpc.Conn
	ep endpoint.Endpoint
	// observe, when set (by tests), sees the operations of every
	// transaction before they are sent.
	observe func([]operation)
}

// Dial connects to the database at endpoint ep, over TLS with ep's PEM
// files for an ssl: one. Failures wrap ErrUnreachable, but for a file that
// cannot be used, or a certificate the handshake refuses: that wraps the
// *endpoint.TLSFileError or endpoint.ErrTLSRefused, since trying again later
// meets the same files.
func Dial(ctx context.Context, ep endpoint.Endpoint) (*Client, error) {
	c, err := jsonrpc.Dial(ctx, ep)
	var file *endpoint.TLSFileError
	if errors.As(err, &file) || errors.Is(err, endpoint.ErrTLSRefused) || errors.Is(err, endpoint.ErrNoTLS) {
		return nil, fmt.Errorf("connecting to %s: %w", ep, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: connecting to %s: %v", ErrUnreachable, ep, err)
	}
	return &Client{c: c, ep: ep}, nil
}

// conn is the client's connection, dialled again when a call broke it.
func (c *Client) conn(ctx context.Context) (*jsonrpc.Conn, error) {
	broken := c.c.Err()
	if broken == nil {
		return c.c, nil
	}
	nc, err := jsonrpc.Dial(ctx, c.ep)
	if err != nil {
		return nil, fmt.Errorf("%w: connecting to %s again (the connection broke: %v): %v", ErrUnreachable, c.ep, broken, err)
	}
	c.c.Close()
	c.c = nc
	return nc, nil
}

const dbName = "Open_vSwitch"

// Close ends the connection.
func (c *Client) Close() { c.c.Close() }

// transact runs ops as one transaction and checks every per-operation result.
// The operations are not checked against a schema here: ovsdb-server checks
// them against its own and names what does not fit (an unknown column, a
// value of the wrong type) in the failed operation's result, and the tests
// check every operation this package builds against the schema subset
// (TestOperationsFitSchema).
func (c *Client) transact(ctx context.Context, ops ...operation) ([]ovsdb.OperationResult, error) {
	if c.observe != nil {
		c.observe(ops)
	}
	conn, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	var res transactReply
	err = conn.Call(ctx, "transact", transactParams(ops), &res)
	if err != nil {
		if errors.Is(err, endpoint.ErrTLSRefused) {
			// The server refused the client certificate (TLS 1.3 says
			// so on the first read): not a lost connection.
			return nil, err
		}
		if lostConnection(err) {
			return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
		}
		return nil, err
	}
	return checkResults(ops, res)
}

// checkResults returns the results of ops, one each, or the errors of the
// failed operations (opErrors), or the commit's.
func checkResults(ops []operation, res transactReply) ([]ovsdb.OperationResult, error) {
	if len(res) < len(ops) {
		return nil, fmt.Errorf("ovsdb transaction: %d results for %d operations", len(res), len(ops))
	}
	var errs opErrors
	for i := range ops {
		if err := resultErr(res[i]); err != nil {
			errs = append(errs, &OpError{Op: ops[i].Op, Table: ops[i].Table, Index: i, Err: err})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	for i := range ops {
		// (libovsdb's UUID reads a UUID that is not ["uuid", u] as the
		// empty one, without an error.)
		if ops[i].Op == ovsdb.OperationInsert && res[i].UUID.GoUUID == "" {
			return nil, fmt.Errorf("ovsdb insert on %s: %w", ops[i].Table, errEmptyUUID)
		}
	}
	// RFC 7047: when every operation succeeded but the commit failed, the
	// result has one more element, the commit's error.
	if len(res) > len(ops) {
		if err := resultErr(res[len(ops)]); err != nil {
			return nil, fmt.Errorf("ovsdb transaction: %w", err)
		}
	}
	return res[:len(ops)], nil
}

// errorOf is the error that ovsdb-server answered for an operation or a
// commit (RFC 7047 sections 3.1, 4.1.3 and 5.2), by its tag: the kinds that
// callers tell apart have a type of their own.
func errorOf(tag, details string) error {
	switch tag {
	case "timed out":
		return &TimedOut{Details: details}
	case "constraint violation":
		return &ConstraintViolation{Details: details}
	}
	return &ServerError{Tag: tag, Details: details}
}

// OpError is an operation of a transaction that failed: Err is what
// ovsdb-server answered for it (a *TimedOut, a *ConstraintViolation or a
// *ServerError).
type OpError struct {
	Op, Table string
	Index     int // of the operation in its transaction
	Err       error
}

func (e *OpError) Error() string { return "ovsdb " + e.Op + " on " + e.Table + ": " + e.Err.Error() }
func (e *OpError) Unwrap() error { return e.Err }

// TimedOut is the error of a wait whose condition did not hold within its
// timeout.
type TimedOut struct{ Details string }

func (e *TimedOut) Error() string { return withDetails("timed out", e.Details) }

// ConstraintViolation says that a value is outside its column's constraints
// (a range, an enum, a set's size) or that the commit would break an index
// (two bridges of one name); Details says which.
type ConstraintViolation struct{ Details string }

func (e *ConstraintViolation) Error() string {
	return withDetails("constraint violation", e.Details)
}

// ServerError is any other error that ovsdb-server answers, by its tag
// ("syntax error", "unknown column", "referential integrity violation" ...).
type ServerError struct{ Tag, Details string }

func (e *ServerError) Error() string { return withDetails(e.Tag, e.Details) }

func withDetails(tag, details string) string {
	if details == "" {
		return tag
	}
	return tag + ": " + details
}

// opErrors are the failed operations of one transaction (*OpError), on one
// line. Each stays matchable with errors.As, e.g. the *TimedOut of a wait
// that did not hold.
type opErrors []error

func (e opErrors) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e opErrors) Unwrap() []error { return e }

// waitTimedOut reports whether err is a wait operation that did not hold
// within its timeout.
func waitTimedOut(err error) bool {
	var to *TimedOut
	return errors.As(err, &to)
}

// timedOutWait returns the failed operation of err (transact's) that is a
// wait that did not hold, or nil.
func timedOutWait(err error) *OpError {
	var errs opErrors
	if !errors.As(err, &errs) {
		return nil
	}
	for _, e := range errs {
		var oe *OpError
		if errors.As(e, &oe) && oe.Op == ovsdb.OperationWait && waitTimedOut(oe) {
			return oe
		}
	}
	return nil
}

// lostConnection reports errors that mean ovsdb-server went away or did not
// answer in time: the caller may try again later.
func lostConnection(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}

// allRows is a condition every row meets, for the operations on the root
// table's one row. (An empty "where" means the same to ovsdb-server, but
// libovsdb's Operation leaves an empty one out of all but a select, and
// RFC 7047 requires the member.)
var allRows = []ovsdb.Condition{cond("_uuid", fnNotEqual, uuid("00000000-0000-0000-0000-000000000000"))}

// byUUID selects the row of UUID u.
func byUUID(u string) []ovsdb.Condition { return []ovsdb.Condition{cond("_uuid", fnEqual, uuid(u))} }

// selectModel is a select of the columns model T reads: ovsdb-server then
// encodes, and the plugin decodes, none of the others (an Interface row's
// statistics and status maps are most of its size).
func selectModel[T any](table string, where ...ovsdb.Condition) operation {
	op := selectOp(table, where...)
	plan, err := planOf(reflect.TypeFor[T]())
	if err != nil {
		return op // decode reports it
	}
	for _, f := range plan {
		op.Columns = append(op.Columns, f.column)
	}
	return op
}
