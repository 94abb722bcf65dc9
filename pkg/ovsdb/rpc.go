package ovsdb

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/dial"
)

// rpcConn is a JSON-RPC 1.0 connection to ovsdb-server (RFC 7047 section 4).
// The plugins need three methods (get_schema, transact, and lock/unlock for
// the watch); libovsdb's client package, built for long-running controllers
// with caches and monitors, pulls in about 200 packages (prometheus,
// validator, protobuf) that cost a short-lived plugin about 2.3 ms of start-up
// and 7 MB of binary per invocation. The wire types, the models and the
// schema come from libovsdb's ovsdb and model packages.
type rpcConn struct {
	conn net.Conn
	dec  *json.Decoder
	id   int
}

func dialRPC(ctx context.Context, endpoint string) (*rpcConn, error) {
	network, addr, _ := strings.Cut(endpoint, ":")
	conn, err := dial.Dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &rpcConn{conn: conn, dec: json.NewDecoder(conn)}, nil
}

func (r *rpcConn) close() { r.conn.Close() }

type rpcMsg struct {
	Method string            `json:"method,omitempty"`
	Params []json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage   `json:"result,omitempty"`
	Error  json.RawMessage   `json:"error,omitempty"`
	ID     json.RawMessage   `json:"id,omitempty"`
}

// call sends one request and decodes its result into out. Notifications that
// arrive meanwhile are dropped; the server's echo requests are answered.
func (r *rpcConn) call(ctx context.Context, method string, params any, out any) error {
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
			return fmt.Errorf("ovsdb %s: %s", method, m.Error)
		}
		if out == nil {
			return nil
		}
		return json.Unmarshal(m.Result, out)
	}
}

func (r *rpcConn) ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %v", ctx.Err(), err)
	}
	return err
}

// next reads one message, answering the server's echo requests on the way.
func (r *rpcConn) next() (rpcMsg, error) {
	for {
		var m rpcMsg
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
