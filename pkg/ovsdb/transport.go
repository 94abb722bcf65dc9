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
type Client struct {
	c *jsonrpc.Conn
	// observe, when set (by tests), sees the operations of every
	// transaction before they are sent.
	observe func([]ovsdb.Operation)
}

// Dial connects to the database at endpoint ep. Failures wrap ErrUnreachable.
func Dial(ctx context.Context, ep string) (*Client, error) {
	e, err := endpoint.Parse(ep)
	if err != nil {
		return nil, err
	}
	c, err := jsonrpc.Dial(ctx, e)
	if err != nil {
		return nil, fmt.Errorf("%w: connecting to %s: %v", ErrUnreachable, ep, err)
	}
	return &Client{c: c}, nil
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
func (c *Client) transact(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	if c.observe != nil {
		c.observe(ops)
	}
	var res []ovsdb.OperationResult
	err := c.c.Call(ctx, "transact", ovsdb.NewTransactArgs(dbName, ops...), &res)
	if err != nil {
		if lostConnection(err) {
			return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
		}
		return nil, err
	}
	if opErrs, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		if len(opErrs) == 0 {
			// The commit failed (or the answer was short): err is all.
			return nil, fmt.Errorf("ovsdb transaction: %w", err)
		}
		errs := make(opErrors, len(opErrs))
		for i, e := range opErrs {
			errs[i] = fmt.Errorf("ovsdb %s on %s: %w", e.Operation().Op, e.Operation().Table, e)
		}
		return nil, errs
	}
	return res, nil
}

// opErrors are the failed operations of one transaction, on one line. Each
// stays matchable with errors.As, e.g. the *ovsdb.TimedOut of a wait that
// did not hold.
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
	var to *ovsdb.TimedOut
	return errors.As(err, &to)
}

// lostConnection reports errors that mean ovsdb-server went away or did not
// answer in time: the caller may try again later.
func lostConnection(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}

// allRows is a condition every row meets: libovsdb drops an empty "where"
// from non-select operations, and RFC 7047 requires the member.
var allRows = []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionNotEqual,
	ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"})}

// selectModel is a select of the columns model T reads: ovsdb-server then
// encodes, and the plugin decodes, none of the others (an Interface row's
// statistics and status maps are most of its size).
func selectModel[T any](table string, where ...ovsdb.Condition) ovsdb.Operation {
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

func selectOp(table string, where ...ovsdb.Condition) ovsdb.Operation {
	return ovsdb.Operation{Op: ovsdb.OperationSelect, Table: table, Where: where}
}

func strMap(m map[string]string) ovsdb.OvsMap {
	g := make(map[any]any, len(m))
	for k, v := range m {
		g[k] = v
	}
	return ovsdb.OvsMap{GoMap: g}
}

// ovsSet is an OVSDB set of vals (strings, integers, UUIDs).
func ovsSet[T any](vals ...T) ovsdb.OvsSet {
	s := make([]any, len(vals))
	for i, v := range vals {
		s[i] = v
	}
	return ovsdb.OvsSet{GoSet: s}
}

func uuidSet(uuids ...string) ovsdb.OvsSet {
	us := make([]ovsdb.UUID, len(uuids))
	for i, u := range uuids {
		us[i] = ovsdb.UUID{GoUUID: u}
	}
	return ovsSet(us...)
}
