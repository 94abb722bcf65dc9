package ovsdb

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"
)

// VswitchdWatch follows ovs-vswitchd's life through OVSDB itself: every
// ovs-vswitchd holds the OVSDB lock "ovs_vswitchd" (RFC 7047 section 4.1.8)
// for as long as it runs. The watch queues a request for that lock behind it;
// ovsdb-server grants it the moment ovs-vswitchd dies (crash, kill -9, stop),
// and the watch gives it back at once, so that the next ovs-vswitchd can take
// it. libovsdb does not expose locks, hence this small JSON-RPC client.
type VswitchdWatch struct {
	conn net.Conn
	dec  *json.Decoder
	id   int
}

const vswitchdLock = "ovs_vswitchd"

// WatchVswitchd connects to the OVSDB endpoint for watching.
func WatchVswitchd(ctx context.Context, endpoint string) (*VswitchdWatch, error) {
	if err := ValidateEndpoint(endpoint); err != nil {
		return nil, err
	}
	network, addr, _ := strings.Cut(endpoint, ":")
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	return &VswitchdWatch{conn: conn, dec: json.NewDecoder(conn)}, nil
}

// Close ends the watch (and releases any lock request).
func (w *VswitchdWatch) Close() { w.conn.Close() }

type rpcMsg struct {
	Method string            `json:"method,omitempty"`
	Params []json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage   `json:"result,omitempty"`
	Error  json.RawMessage   `json:"error,omitempty"`
	ID     json.RawMessage   `json:"id,omitempty"`
}

func (w *VswitchdWatch) call(method string) (json.RawMessage, error) {
	w.id++
	id := w.id
	req := map[string]any{"method": method, "params": []string{vswitchdLock}, "id": id}
	if err := json.NewEncoder(w.conn).Encode(req); err != nil {
		return nil, err
	}
	for {
		m, err := w.next()
		if err != nil {
			return nil, err
		}
		if string(m.ID) == fmt.Sprint(id) && m.Method == "" {
			if len(m.Error) > 0 && string(m.Error) != "null" {
				return nil, fmt.Errorf("ovsdb %s: %s", method, m.Error)
			}
			return m.Result, nil
		}
	}
}

// next reads one message, answering the server's echo requests on the way.
func (w *VswitchdWatch) next() (rpcMsg, error) {
	for {
		var m rpcMsg
		if err := w.dec.Decode(&m); err != nil {
			return m, err
		}
		if m.Method == "echo" {
			reply := map[string]any{"result": m.Params, "error": nil, "id": m.ID}
			if err := json.NewEncoder(w.conn).Encode(reply); err != nil {
				return m, err
			}
			continue
		}
		return m, nil
	}
}

// WaitRunning returns once an ovs-vswitchd holds its lock, with this watch's
// request queued behind it. It checks every interval while none runs.
func (w *VswitchdWatch) WaitRunning(ctx context.Context, interval time.Duration) error {
	for {
		res, err := w.call("lock")
		if err != nil {
			return err
		}
		var r struct {
			Locked bool `json:"locked"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			return err
		}
		if !r.Locked {
			return nil // held by ovs-vswitchd; ours is queued
		}
		// Nobody runs: give the lock straight back and look again.
		if _, err := w.call("unlock"); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// WaitGone blocks until the running ovs-vswitchd lets go of its lock (it
// stopped or died), then releases the lock for its successor.
func (w *VswitchdWatch) WaitGone(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { w.conn.SetReadDeadline(time.Now()) })
	defer stop()
	for {
		m, err := w.next()
		if err != nil {
			return err
		}
		if m.Method == "locked" {
			_, err := w.call("unlock")
			return err
		}
	}
}
