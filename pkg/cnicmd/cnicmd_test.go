package cnicmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/rollback"
)

func code(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

func TestError(t *testing.T) {
	plain := errors.New("boom")
	for _, tt := range []struct {
		name string
		err  error
		want uint
	}{
		{"ovsdb unreachable", fmt.Errorf("listing ports: %w", ovsdb.ErrUnreachable), types.ErrTryAgainLater},
		{"the timeout sentinel", fmt.Errorf("waiting for ofport: %w", endpoint.ErrTimeout), types.ErrTryAgainLater},
		{"an OpenFlow timeout", fmt.Errorf("bundle on unix:/x: %w", openflow.ErrTimeout), types.ErrTryAgainLater},
		{"a claim held", &ovsdb.ClaimedError{Key: "ovsflow.io/claim/tcp/198.51.100.1:80"}, types.ErrInvalidNetworkConfig},
		{"anything else", plain, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Error(tt.err)
			if c := code(got); c != tt.want {
				t.Errorf("code %d, want %d (%v)", c, tt.want, got)
			}
			if tt.want == 0 && got != plain {
				t.Errorf("got %v, want the error unchanged", got)
			}
		})
	}
}

func TestParseEndpoints(t *testing.T) {
	for _, tt := range []struct {
		ovsdb, openflow, field string
	}{
		{"unix:/run/openvswitch/db.sock", "", ""},
		{"tcp:127.0.0.1:6640", "tcp:[::1]:6653", ""},
		{"unix:/run/openvswitch/db.sock", "unix:/run/openvswitch/br0.mgmt", ""},
		{"/run/openvswitch/db.sock", "", `"ovsdb"`},
		{"tcp:127.0.0.1", "", `"ovsdb"`},
		{"unix:/run/openvswitch/db.sock", "br0", `"openflow"`},
		{"unix:/run/openvswitch/db.sock", "unix:br0.mgmt", `"openflow"`},
		{"unix:/run/openvswitch/db.sock", "unix:/run/a b", `"openflow"`},
		{"unix:/run/openvswitch/db.sock", "tcp:host:0", `"openflow"`},
	} {
		got, err := ParseEndpoints(tt.ovsdb, tt.openflow)
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("(%q, %q): %v, want nil", tt.ovsdb, tt.openflow, err)
		case tt.field == "" && (got.OVSDB.String() != tt.ovsdb || got.OpenFlow.String() != tt.openflow):
			t.Errorf("(%q, %q): got %q, %q, want them as given", tt.ovsdb, tt.openflow, got.OVSDB, got.OpenFlow)
		case tt.field != "" && (code(err) != types.ErrInvalidNetworkConfig || !strings.HasPrefix(err.(*types.Error).Msg, tt.field)):
			t.Errorf("(%q, %q): %v, want code 7 naming %s", tt.ovsdb, tt.openflow, err, tt.field)
		}
	}
}

func TestDecode(t *testing.T) {
	var c struct {
		types.PluginConf
		OVSDB string `json:"ovsdb"`
	}
	if err := Decode([]byte(`{"ovsdb":"tcp:127.0.0.1:6640"}`), &c); err != nil || c.OVSDB != "tcp:127.0.0.1:6640" {
		t.Errorf("got %v, ovsdb %q; want the configured endpoint kept", err, c.OVSDB)
	}
	if err := Decode([]byte(`{"ovsdb":1}`), &c); code(err) != types.ErrDecodingFailure {
		t.Errorf("got %v, want code 6", err)
	}
}

// An "ovsdb" key left out is the default endpoint, and said so.
func TestParseEndpointsDefault(t *testing.T) {
	got, err := ParseEndpoints("", "")
	if err != nil || got.OVSDB.String() != endpoint.DefaultOVSDB || !got.OVSDBDefault {
		t.Errorf("got %+v, %v; want %s, OVSDBDefault", got, err, endpoint.DefaultOVSDB)
	}
	if got, _ := ParseEndpoints(endpoint.DefaultOVSDB, ""); got.OVSDBDefault {
		t.Errorf("the default endpoint given as the key: OVSDBDefault, want false")
	}
}

func TestPrevResult(t *testing.T) {
	conf := func(prev string) *types.PluginConf {
		c := &types.PluginConf{CNIVersion: "1.1.0"}
		if prev != "" {
			c.RawPrevResult = map[string]any{}
			if err := jsonUnmarshal(prev, &c.RawPrevResult); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	if _, err := PrevResult(conf(""), "no prevResult"); code(err) != types.ErrInvalidNetworkConfig {
		t.Errorf("missing: %v, want code 7", err)
	}
	r, err := PrevResult(conf(`{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"192.0.2.2/24","interface":0}]}`), "x")
	if err != nil || len(r.IPs) != 1 || r.Interfaces[0].Name != "eth0" {
		t.Errorf("got %+v, %v; want the parsed result", r, err)
	}
	for _, bad := range []string{`{"cniVersion":"1.1.0","ips":[null]}`, `{"cniVersion":"1.1.0","interfaces":[null]}`,
		`{"cniVersion":"1.1.0","routes":[null]}`, `{"cniVersion":"1.1.0","ips":[{"address":"bogus"}]}`} {
		if _, err := PrevResult(conf(bad), "x"); code(err) != types.ErrDecodingFailure {
			t.Errorf("%s: %v, want code 6", bad, err)
		}
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func TestParseTimeout(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration // 0: refused
	}{
		{"", DefaultTimeout},
		{"5s", 5 * time.Second},
		{"90s", 90 * time.Second},
		{"4m", 4 * time.Minute},
		{"4s", 0},
		{"5m", 0},
		{"-1m", 0},
		{"120", 0},
		{"two minutes", 0},
	} {
		got, err := ParseTimeout(tt.in)
		switch {
		case tt.want != 0 && (err != nil || got.Add() != tt.want):
			t.Errorf("%q: got %v, %v; want %v", tt.in, got, err, tt.want)
		case tt.want == 0 && (code(err) != types.ErrInvalidNetworkConfig || !strings.HasPrefix(err.(*types.Error).Msg, `"timeout"`)):
			t.Errorf("%q: got %v, want code 7 naming \"timeout\"", tt.in, err)
		}
	}
}

// Every command's time, whatever the budget, ends before the runtimes end
// the plugin (docs/operations.md): an ADD within kubelet's RunPodSandbox
// deadline (twice its runtimeRequestTimeout, 2 min), a DEL or a GC within
// the minute CRI-O gives a DEL and containerd the DEL after a failed ADD;
// each keeps time back from its work for its rollback. The sweepers expire
// no claim or deleting mark of a command still running. The default waits
// for a busy ovs-vswitchd longer than the fixed bounds it replaces (10 s
// for each wait, 30 s for a command).
func TestBudget(t *testing.T) {
	const runSandbox, stopNetwork = 4 * time.Minute, time.Minute
	for _, b := range []Budget{Budget(MinTimeout), 0, Budget(DefaultTimeout), Budget(MaxTimeout)} {
		for _, c := range []struct {
			command string
			bound   time.Duration
			limit   time.Duration
			ttl     time.Duration
		}{
			{"ADD", b.Add(), runSandbox, ovsdb.ClaimTTL},
			{"DEL", b.Del(), stopNetwork, ovsdb.DeletingTTL},
		} {
			if c.bound > c.limit {
				t.Errorf("budget %v: %s may take %v, past the runtime's %v", b, c.command, c.bound, c.limit)
			}
			if c.bound >= c.ttl {
				t.Errorf("budget %v: %s may take %v, as long as the sweepers keep its records (%v)", b, c.command, c.bound, c.ttl)
			}
			if r := reserve(c.bound); r <= 0 || r > c.bound/4 {
				t.Errorf("budget %v: %s keeps %v of %v back from its work, want a share up to a quarter", b, c.command, r, c.bound)
			}
		}
	}
	if work := DefaultTimeout - reserve(DefaultTimeout); work <= 30*time.Second {
		t.Errorf("the default ADD works for %v, want longer than the 30 s it replaces", work)
	}
}

// Open's context is the work's: it ends the reserve before the command's
// time, which the rollback under it gets. OpenDel's is a DEL's.
func TestOpenReserves(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "db.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ep := endpoint.MustParse("unix:" + sock)
	check := func(what string, ctx context.Context, work, bound time.Duration) {
		t.Helper()
		start := time.Now()
		if d, _ := ctx.Deadline(); d.Sub(start) > work || d.Sub(start) < work-time.Second {
			t.Errorf("%s: work ends in %v, want %v", what, d.Sub(start).Round(time.Millisecond), work)
		}
		rollback.Do(ctx, func(rctx context.Context) {
			if d, _ := rctx.Deadline(); d.Sub(start) > bound || d.Sub(start) < bound-time.Second {
				t.Errorf("%s: clean-up ends in %v, want %v", what, d.Sub(start).Round(time.Millisecond), bound)
			}
		})
	}
	ctx, _, done, err := Open(ep, Budget(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	check("ADD", ctx, 45*time.Second, time.Minute)
	done()
	ctx, _, done, err = OpenDel(Endpoints{OVSDB: ep}, 0, &skel.CmdArgs{ContainerID: "c", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	check("DEL", ctx, 45*time.Second, time.Minute)
	done()
}
