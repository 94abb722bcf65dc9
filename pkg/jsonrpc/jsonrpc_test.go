package jsonrpc

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// rawResult keeps the result's bytes as Call hands them over.
type rawResult []byte

func (r *rawResult) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// Call sends params of a json.RawMessage as they are and any other through
// encoding/json, answers an echo on the way, skips notifications and other
// answers, and hands an Unmarshaler the result's bytes.
func TestCall(t *testing.T) {
	client, server := net.Pipe()
	c := &Conn{conn: client, dec: json.NewDecoder(client)}
	t.Cleanup(c.Close)
	requests := make(chan Msg, 2)
	go func() {
		defer server.Close()
		dec := json.NewDecoder(server)
		for {
			var m Msg
			if err := dec.Decode(&m); err != nil {
				return
			}
			requests <- m
			server.Write([]byte(`{"method":"echo","params":[],"id":"echo"}` + "\n"))
			var echo Msg
			if err := dec.Decode(&echo); err != nil || string(echo.ID) != `"echo"` {
				return
			}
			server.Write([]byte(`{"method":"update","params":[null,{}],"id":null}` + "\n"))
			server.Write([]byte(`{"result":"stale","error":null,"id":0}` + "\n"))
			server.Write([]byte(`{"result":[ 1, {"a" : "b"} ],"error":null,"id":` + string(m.ID) + "}\n"))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name   string
		params any
		want   string
	}{
		{"raw", json.RawMessage(`["db",{"op":"select"}]`), `["db",{"op":"select"}]`},
		{"encoding/json", []string{"lock", "<&>"}, `["lock","\u003c\u0026\u003e"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res rawResult
			if err := c.Call(ctx, "transact", tc.params, &res); err != nil {
				t.Fatal(err)
			}
			if got, want := string(res), `[ 1, {"a" : "b"} ]`; got != want {
				t.Errorf("got result %s, want %s", got, want)
			}
			req := <-requests
			if req.Method != "transact" || len(req.Params) == 0 {
				t.Fatalf("got request %+v", req)
			}
			params, _ := json.Marshal(req.Params)
			if string(params) != tc.want {
				t.Errorf("got params %s, want %s", params, tc.want)
			}
		})
	}
}

// A call that times out leaves the connection in an unknown state (the
// decoder has failed, half a message may have been read, the answer may
// still come): the next call on it fails at once with ErrBroken, without
// sending, instead of failing for a reason of the past or reading a stale
// answer.
func TestCallAfterTimeout(t *testing.T) {
	client, server := net.Pipe()
	c := &Conn{conn: client, dec: json.NewDecoder(client)}
	t.Cleanup(c.Close)
	requests := make(chan Msg, 4)
	go func() {
		defer server.Close()
		dec := json.NewDecoder(server)
		for n := 0; ; n++ {
			var m Msg
			if err := dec.Decode(&m); err != nil {
				return
			}
			requests <- m
			if n == 0 {
				continue // the first call stalls
			}
			server.Write([]byte(`{"result":{},"error":null,"id":` + string(m.ID) + "}\n"))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Call(ctx, "transact", []string{"first"}, nil); !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("stalled call: got %v, want a deadline error", err)
	}
	<-requests
	if c.Err() == nil {
		t.Errorf("after the stalled call: got Err() nil, want the connection broken")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Call(ctx, "transact", []string{"second"}, nil); !errors.Is(err, ErrBroken) {
		t.Errorf("call after the timeout: got %v, want ErrBroken", err)
	}
	select {
	case m := <-requests:
		t.Errorf("call on a broken connection sent %s %s", m.Method, m.Params)
	case <-time.After(100 * time.Millisecond):
	}
}

// A request whose answer does not come by ctx's deadline ends with
// context.DeadlineExceeded, every time: the connection's own deadline is
// ctx's, and its timeout may come a moment before ctx's timer fires.
func TestWaitPastDeadlineIsContextDeadline(t *testing.T) {
	for i := 0; i < 200; i++ {
		client, server := net.Pipe()
		c := &Conn{conn: client, dec: json.NewDecoder(client)}
		hold := make(chan struct{})
		go func() {
			defer server.Close()
			var m Msg
			json.NewDecoder(server).Decode(&m) // read the request, never answer
			<-hold                             // until the call has returned
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		err := c.Call(ctx, "revalidator/wait", []string{}, nil)
		close(hold)
		cancel()
		c.Close()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: got %v, want context.DeadlineExceeded", i, err)
		}
	}
}
