// Package jsonrpc is the JSON-RPC 1.0 connection that Open vSwitch's
// daemons speak: ovsdb-server (RFC 7047 section 4) and the unixctl control
// socket of ovs-vswitchd. The plugins need a handful of methods (transact,
// lock/unlock; dpctl commands); libovsdb's client package, built for
// long-running controllers with caches and monitors, pulls in about 200
// packages (prometheus, validator, protobuf) that a short-lived plugin pays
// for at every start-up (docs/performance.md, "Design costs").
package jsonrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// Conn is one JSON-RPC connection.
type Conn struct {
	conn net.Conn
	dec  *json.Decoder
	id   int
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
func (r *Conn) Call(ctx context.Context, method string, params any, out any) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Time{}
	}
	r.conn.SetDeadline(deadline)
	defer r.conn.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { r.conn.SetDeadline(time.Now()) })
	defer stop()

	r.id++
	id := fmt.Sprint(r.id)
	if err := json.NewEncoder(r.conn).Encode(map[string]any{"method": method, "params": params, "id": r.id}); err != nil {
		return r.ctxErr(ctx, err)
	}
	for {
		m, err := r.next()
		if err != nil {
			return r.ctxErr(ctx, err)
		}
		if m.Method != "" || string(m.ID) != id {
			continue
		}
		if len(m.Error) > 0 && string(m.Error) != "null" {
			return &Error{Method: method, Detail: string(m.Error)}
		}
		if out == nil {
			return nil
		}
		return json.Unmarshal(m.Result, out)
	}
}

func (r *Conn) ctxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w: %v", ctx.Err(), err)
	}
	return err
}

// Next waits for the next message (a notification), answering the server's
// echo requests on the way, until ctx ends.
func (r *Conn) Next(ctx context.Context) (Msg, error) {
	stop := context.AfterFunc(ctx, func() { r.conn.SetReadDeadline(time.Now()) })
	defer stop()
	m, err := r.next()
	return m, r.ctxErr(ctx, err)
}

// next reads one message, answering the server's echo requests on the way.
func (r *Conn) next() (Msg, error) {
	for {
		var m Msg
		if err := r.dec.Decode(&m); err != nil {
			return m, err
		}
		if m.Method == "echo" {
			reply := map[string]any{"result": m.Params, "error": nil, "id": m.ID}
			if err := json.NewEncoder(r.conn).Encode(reply); err != nil {
				return m, err
			}
			continue
		}
		return m, nil
	}
}
