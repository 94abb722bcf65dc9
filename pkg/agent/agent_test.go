package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/memo"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

func TestPeer(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Spec: corev1.NodeSpec{PodCIDR: "192.0.2.0/26", PodCIDRs: []string{"192.0.2.0/26", "2001:db8:2::/64"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "b"}, {Type: corev1.NodeExternalIP, Address: "198.51.100.9"},
			{Type: corev1.NodeInternalIP, Address: "203.0.113.2"}, {Type: corev1.NodeInternalIP, Address: "2001:db8:f::2"}}}}
	p := Peer(n)
	if got, want := strs(p.PodCIDRs), []string{"192.0.2.0/26", "2001:db8:2::/64"}; !slices.Equal(got, want) {
		t.Errorf("pod CIDRs %q, want %q", got, want)
	}
	if got, want := strs(p.Addrs), []string{"203.0.113.2", "2001:db8:f::2"}; !slices.Equal(got, want) {
		t.Errorf("addresses %q, want %q (InternalIPs only)", got, want)
	}
	// A Node of before dual stack: spec.podCIDR only.
	n.Spec.PodCIDRs = nil
	if got := strs(PodCIDRs(n)); !slices.Equal(got, []string{"192.0.2.0/26"}) {
		t.Errorf("podCIDR only: %q", got)
	}
}

func strs[T interface{ String() string }](v []T) []string {
	var out []string
	for _, x := range v {
		out = append(out, x.String())
	}
	return out
}

func TestInstallFile(t *testing.T) {
	d := t.TempDir()
	p := filepath.Join(d, "f")
	for i, tc := range []struct {
		content string
		mode    os.FileMode
		wrote   bool
	}{{"a", 0o644, true}, {"a", 0o644, false}, {"b", 0o644, true}, {"b", 0o755, true}} {
		wrote, err := installFile(p, []byte(tc.content), tc.mode)
		if err != nil || wrote != tc.wrote {
			t.Errorf("step %d: wrote %v, %v; want %v", i, wrote, err, tc.wrote)
		}
		b, _ := os.ReadFile(p)
		st, _ := os.Stat(p)
		if string(b) != tc.content || st.Mode().Perm() != tc.mode {
			t.Errorf("step %d: %q %v, want %q %v", i, b, st.Mode(), tc.content, tc.mode)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(d, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestInstallPluginsAndConflist(t *testing.T) {
	src, bin, conf := t.TempDir(), t.TempDir(), t.TempDir()
	for _, p := range []string{"ovs-bridge", "host-local"} {
		os.WriteFile(filepath.Join(src, p), []byte("image's "+p), 0o755)
	}
	os.WriteFile(filepath.Join(bin, "host-local"), []byte("node's own"), 0o755)
	got, err := installPlugins(src, bin, []string{"ovs-bridge"}, []string{"host-local"})
	if err != nil || !slices.Equal(got, []string{filepath.Join(bin, "ovs-bridge")}) {
		t.Errorf("installed %q, %v; want ovs-bridge only", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(bin, "host-local")); string(b) != "node's own" {
		t.Error("the node's own host-local was replaced")
	}
	tmpl := filepath.Join(t.TempDir(), "10-x.conflist")
	os.WriteFile(tmpl, []byte(`{"cniVersion":"1.0.0","cniVersions":["1.0.0","1.1.0"],"name":"x","plugins":[{"type":"ovs-bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"192.0.2.0/24"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}]}`), 0o644)
	cidrs := []netip.Prefix{netip.MustParsePrefix("2001:db8:2::/64")}
	if wrote, err := installConflist(tmpl, conf, "10-x.conflist", cidrs); !wrote || err != nil {
		t.Fatalf("conflist: %v %v", wrote, err)
	}
	b, _ := os.ReadFile(filepath.Join(conf, "10-x.conflist"))
	if !strings.Contains(string(b), `"subnet": "2001:db8:2::/64"`) || strings.Contains(string(b), "192.0.2.0") || !strings.Contains(string(b), `"1.1.0"`) {
		t.Errorf("conflist %s: want the node's range only, and cniVersions kept", b)
	}
	if wrote, _ := installConflist(tmpl, conf, "10-x.conflist", cidrs); wrote {
		t.Error("the same conflist was written again")
	}
}

func TestProbes(t *testing.T) {
	a := &Agent{cfg: Config{WedgedAfter: time.Minute}, st: newStatus()}
	now := time.Unix(1000, 0)
	a.st.now = func() time.Time { return now }
	srv := httptest.NewServer(a.server().Handler)
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL+path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		for {
			n, err := res.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return res.StatusCode, b.String()
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "[-]conflist: not rendered yet") {
		t.Errorf("before a pass: /readyz %d %q, want 503 naming the conflist", code, body)
	}
	a.st.set(&a.st.conflist, nil)
	a.st.set(&a.st.routes, nil)
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("after a pass: /readyz %d %q, want 200", code, body)
	}
	a.st.set(&a.st.plugins, errors.New("plugin ovs-bridge: no such file"))
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "[-]plugins: plugin ovs-bridge: no such file") {
		t.Errorf("plugins missing: /readyz %d %q, want 503 naming them", code, body)
	}
	a.st.set(&a.st.plugins, nil)
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d, want 200", code)
	}
	a.st.busy("sync")
	now = now.Add(2 * time.Minute)
	if code, body := get("/healthz"); code != 503 || !strings.Contains(body, "sync busy for 2m0s") {
		t.Errorf("a wedged loop: /healthz %d %q, want 503 naming it", code, body)
	}
	a.st.idle("sync")
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("idle again: /healthz %d, want 200", code)
	}
	if code, _ := get("/metrics"); code != 404 {
		t.Errorf("/metrics without a handler: %d, want 404", code)
	}
	a.cfg.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("m 1\n")) })
	srv2 := httptest.NewServer(a.server().Handler)
	defer srv2.Close()
	if res, err := http.Get(srv2.URL + "/metrics"); err != nil || res.StatusCode != 200 {
		t.Errorf("/metrics with a handler: %v %v", res, err)
	}
}

// TestRunStops: Run returns once its context is done, with its probe
// server up and the API server unreachable.
func TestRunStops(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600)
	// A free port for the probe server, to see it up.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	health := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{NodeName: "n", Kubeconfig: kc, ConfTemplate: "/nonexistent/t.conflist", CNIConfDir: t.TempDir(), HealthAddr: health})
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // until its probe server is up
		c, err := net.Dial("tcp", health)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the probe server on %s is not up: %v", health, err)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v, want nil once cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
}

func TestOrphanIntervalFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{{nil, 30 * time.Second}, {[]string{"-orphan-interval=10s"}, 10 * time.Second}, {[]string{"-orphan-interval=0"}, -1}} {
		_, cfg, err := ParseArgs(append([]string{"-metrics=false"}, tc.args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Defaults(); cfg.OrphanInterval != tc.want {
			t.Errorf("%q: orphan interval %v, want %v", tc.args, cfg.OrphanInterval, tc.want)
		}
	}
}

// TestReadyzSharesARead: 50 probes at once, and more while the result is
// fresh, dial OVSDB once between them.
func TestReadyzSharesARead(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "db.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dials atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			conn.Close() // no OVSDB here: the probe fails, and names it
		}
	}()
	a := newAgent(Config{WedgedAfter: time.Minute, OVSDB: endpoint.MustParse("unix:" + sock)})
	a.ovsChecks = memo.New(a.readOVS, time.Hour, ovsTimeout) // fresh for the whole test, however slow the host
	srv := httptest.NewServer(a.server().Handler)
	defer srv.Close()
	probe := func() error {
		res, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "[-]bridges: ") {
			return fmt.Errorf("/readyz: %d %q, want 503 naming the bridges", res.StatusCode, b)
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = probe()
		}()
	}
	wg.Wait()
	if err := errors.Join(append(errs, probe())...); err != nil {
		t.Fatal(err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("51 probes dialled OVSDB %d times, want 1", n)
	}
}

// TestReadyzUpcalls: what the reconcile watch last learnt of
// ovs-vswitchd's upcall handlers is a check of /readyz.
func TestReadyzUpcalls(t *testing.T) {
	a := &Agent{cfg: Config{OVSDB: endpoint.MustParse("unix:" + filepath.Join(t.TempDir(), "none.sock"))}, st: newStatus()}
	a.ovsChecks = memo.New(func(context.Context) ([]check, error) { return []check{{name: "ovsdb"}, {name: "bridges"}}, nil }, time.Hour, ovsTimeout)
	find := func() (string, bool) {
		for _, c := range a.readiness(context.Background()) {
			if c.name == "upcalls" {
				return c.err, true
			}
		}
		return "", false
	}
	if why, ok := find(); !ok || why != "" {
		t.Errorf("before any report: upcalls check %q (present %v), want present and passing", why, ok)
	}
	a.st.set(&a.st.upcalls, fmt.Errorf("x: %w", unixctl.ErrNoUpcallHandler))
	if why, _ := find(); !strings.Contains(why, unixctl.ErrNoUpcallHandler.Error()) {
		t.Errorf("no handler: upcalls check %q, want it to say so", why)
	}
	a.st.set(&a.st.upcalls, nil)
	if why, _ := find(); why != "" {
		t.Errorf("handlers back: upcalls check %q, want passing", why)
	}
}
