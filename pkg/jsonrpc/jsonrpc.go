// Package jsonrpc is the JSON-RPC 1.0 connection that Open vSwitch's
// daemons speak: ovsdb-server (RFC 7047 section 4) and the unixctl control
// socket of ovs-vswitchd. The plugins need a handful of methods (transact,
// lock/unlock; dpctl commands); libovsdb's client package, built for
// long-running controllers with caches and monitors, pulls in about 200
// packages (prometheus, validator, protobuf) that a short-lived plugin pays
// for at every start-up (docs/performance.md, "Design costs"). This package
// frames the messages and leaves their bulk to the caller where it asks:
// pkg/ovsdb writes a transaction's params and reads its result with wire
// types of its own, not libovsdb's (see Call).
package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// ErrBroken is the error of a call on a connection that an earlier call
// left broken (see Conn.Err).
var ErrBroken = errors.New("json-rpc connection broken")

// Conn is one JSON-RPC connection.
type Conn struct {
	conn net.Conn
	dec  *json.Decoder
	id   int
	// broken is the first error of reading or writing: after it, where the
	// stream stands is unknown (half a message may have gone out or come
	// in, encoding/json's decoder keeps failing, a late answer may be on
	// its way), so nothing more is sent or read.
	broken error
}

// Dial connects to e.
func Dial(ctx context.Context, e endpoint.Endpoint) (*Conn, error) {
	conn, err := e.Dial(ctx)
	if err != nil {
		return nil, err
	}
	return &Conn{conn: conn, dec: json.NewDecoder(conn)}, nil
}

// Close ends the connection.
func (r *Conn) Close() { r.conn.Close() }

// Err is the error that broke the connection (a call or Next that timed
// out, was cancelled or lost the peer), or nil while it works. A broken
// connection stays broken: dial a new one.
func (r *Conn) Err() error { return r.broken }

// Msg is one JSON-RPC message: a request, a notification or an answer.
type Msg struct {
	Method string            `json:"method,omitempty"`
	Params []json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage   `json:"result,omitempty"`
	Error  json.RawMessage   `json:"error,omitempty"`
	ID     json.RawMessage   `json:"id,omitempty"`
}

// Error is a JSON-RPC error answer.
type Error struct {
	Method, Detail string
}

func (e *Error) Error() string { return e.Method + ": " + e.Detail }

// Call sends one request and decodes its result into out. Notifications that
// arrive meanwhile are dropped; the server's echo requests are answered.
//
// Params given as a json.RawMessage are sent as they are, and an out that
// is a json.Unmarshaler gets the result's bytes as they came, without
// encoding/json checking and copying them once more before its
// UnmarshalJSON (pkg/ovsdb turns a panic of libovsdb's decoders there into
// an error).
func (r *Conn) Call(ctx context.Context, method string, params any, out any) error {
	q, err := r.Send(ctx, method, params)
	if err != nil {
		return err
	}
	return q.Wait(ctx, out)
}

// Request is a request sent whose answer has not been read yet.
type Request struct {
	r          *Conn
	method, id string
}

// Send sends one request within ctx and returns without waiting for its
// answer: Wait reads it. It is Call for a request that the server answers
// only once something has happened (unixctl's revalidator/wait), while the
// caller goes on; the connection takes no other call before the Wait.
func (r *Conn) Send(ctx context.Context, method string, params any) (*Request, error) {
	if r.broken != nil {
		return nil, fmt.Errorf("%s: %w by an earlier call: %v", method, ErrBroken, r.broken)
	}
	r.id++
	id := strconv.Itoa(r.id)
	req, err := request(method, params, id)
	if err != nil {
		return nil, err
	}
	defer r.bound(ctx)()
	if _, err := r.conn.Write(req); err != nil {
		r.broken = err
		return nil, r.ctxErr(ctx, err)
	}
	return &Request{r: r, method: method, id: id}, nil
}

// Wait reads the answer to q within ctx and decodes its result into out
// (see Call).
func (q *Request) Wait(ctx context.Context, out any) error {
	r := q.r
	if r.broken != nil {
		return fmt.Errorf("%s: %w by an earlier call: %v", q.method, ErrBroken, r.broken)
	}
	defer r.bound(ctx)()
	for {
		m, err := r.next()
		if err != nil {
			return r.ctxErr(ctx, err)
		}
		if m.Method != "" || string(m.ID) != q.id {
			continue
		}
		if len(m.Error) > 0 && string(m.Error) != "null" {
			return &Error{Method: q.method, Detail: string(m.Error)}
		}
		if out == nil {
			return nil
		}
		if u, ok := out.(json.Unmarshaler); ok {
			// The decoder has checked m.Result already.
			return u.UnmarshalJSON(m.Result)
		}
		return json.Unmarshal(m.Result, out)
	}
}

// bound makes the connection's reads and writes end with ctx (its deadline,
// or its cancellation); the func it returns lifts that.
func (r *Conn) bound(ctx context.Context) func() {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Time{}
	}
	r.conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { r.conn.SetDeadline(time.Now()) })
	return func() {
		stop()
		r.conn.SetDeadline(time.Time{})
	}
}

// request is the JSON text of a request, with its newline.
func request(method string, params any, id string) ([]byte, error) {
	p, ok := params.(json.RawMessage)
	if !ok {
		var err error
		if p, err = json.Marshal(params); err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
	}
	m, err := json.Marshal(method)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(p)+len(m)+len(id)+32)
	b = append(append(b, `{"method":`...), m...)
	b = append(append(b, `,"params":`...), p...)
	b = append(append(b, `,"id":`...), id...)
	return append(b, "}\n"...), nil
}

// ctxErr is err, marked with ctx's error when ctx ended it. The connection's
// deadline is ctx's (bound), so a read can time out a moment before ctx's
// own timer fires: a timeout at or past ctx's deadline is ctx's too.
func (r *Conn) ctxErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %v", ctx.Err(), err)
	}
	if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
		return fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
	}
	return err
}

// Next waits for the next message (a notification), answering the server's
// echo requests on the way, until ctx ends.
func (r *Conn) Next(ctx context.Context) (Msg, error) {
	if r.broken != nil {
		return Msg{}, fmt.Errorf("%w: %v", ErrBroken, r.broken)
	}
	stop := context.AfterFunc(ctx, func() { r.conn.SetReadDeadline(time.Now()) })
	defer stop()
	m, err := r.next()
	return m, r.ctxErr(ctx, err)
}

// next reads one message, answering the server's echo requests on the way.
// Any error breaks the connection.
func (r *Conn) next() (Msg, error) {
	for {
		var m Msg
		if err := r.dec.Decode(&m); err != nil {
			r.broken = err
			return m, err
		}
		if m.Method == "echo" {
			reply := map[string]any{"result": m.Params, "error": nil, "id": m.ID}
			if err := json.NewEncoder(r.conn).Encode(reply); err != nil {
				r.broken = err
				return m, err
			}
			continue
		}
		return m, nil
	}
}
