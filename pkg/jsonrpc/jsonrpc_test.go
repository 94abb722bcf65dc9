package jsonrpc

import (
	"context"
	"encoding/json"
	"net"
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
