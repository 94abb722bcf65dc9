package ipam

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// writePlugin writes an executable shell script called name into dir.
func writePlugin(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestFind(t *testing.T) {
	a, b, empty := t.TempDir(), t.TempDir(), t.TempDir()
	inB := writePlugin(t, b, "fake", "")
	inA := writePlugin(t, a, "both", "")
	writePlugin(t, b, "both", "")
	if err := os.Mkdir(filepath.Join(a, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	writePlugin(t, b, "adir", "")
	path := strings.Join([]string{empty, a, b}, string(os.PathListSeparator))
	for _, tc := range []struct {
		name, plugin, cniPath string
		want                  string // path found; "" for an error
		errHas                []string
	}{
		{"in a later directory", "fake", path, inB, nil},
		{"the first directory wins", "both", path, inA, nil},
		{"a directory of that name is skipped", "adir", path, filepath.Join(b, "adir"), nil},
		{"missing", "host-local", path, "", []string{`"host-local"`, path}},
		{"empty CNI_PATH", "fake", "", "", []string{`"fake"`, "CNI_PATH"}},
		{"a path, not a name", "../fake", path, "", []string{`"../fake"`}},
		{"no name", "", path, "", []string{"no plugin name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := find(tc.plugin, tc.cniPath)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Errorf("find(%q): got %q, %v; want %q", tc.plugin, got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("find(%q): got %q, want an error", tc.plugin, got)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("find(%q): error %q does not name %s", tc.plugin, err, s)
				}
			}
		})
	}
}

// fakeIPAM is a plugin that checks what it is given: it fails with CNI code
// 4 (invalid environment) unless CNI_COMMAND is $WANT_COMMAND, the netconf
// on stdin names it, and the runtime's other variables came through; then it
// prints $REPLY to stdout, $NOISE to stderr, and exits with $EXIT.
const fakeIPAM = `in=$(cat)
case "$in" in *'"type":"fake"'*) ;; *) echo '{"code":4,"msg":"stdin: '"$in"'"}'; exit 1;; esac
[ "$CNI_COMMAND" = "$WANT_COMMAND" ] || { echo '{"code":4,"msg":"CNI_COMMAND='"$CNI_COMMAND"'"}'; exit 1; }
[ "$CNI_CONTAINERID" = "c1" ] || { echo '{"code":4,"msg":"CNI_CONTAINERID='"$CNI_CONTAINERID"'"}'; exit 1; }
[ -n "$NOISE" ] && echo "$NOISE" >&2
printf '%s' "$REPLY"
exit ${EXIT:-0}
`

const result040 = `{"cniVersion":"0.4.0","ips":[{"version":"4","address":"10.1.0.5/24","gateway":"10.1.0.1"}],"routes":[{"dst":"0.0.0.0/0"}]}`

// TestDelegate runs a real script through the real exec path: command,
// environment and stdin reach it; results and errors come back as libcni
// would decode them.
func TestDelegate(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, dir, "fake", fakeIPAM)
	t.Setenv("CNI_PATH", t.TempDir()+string(os.PathListSeparator)+dir)
	t.Setenv("CNI_COMMAND", "ADD") // the plugin's own command: replaced for DEL and the others
	t.Setenv("CNI_CONTAINERID", "c1")
	conf := func(version string) []byte {
		return []byte(`{"cniVersion":"` + version + `","name":"n","ipam":{"type":"fake"}}`)
	}
	ctx := context.Background()

	for _, tc := range []struct {
		name, confVersion, reply string
		wantVersion              string
	}{
		{"result in its own version", "0.4.0", result040, "0.4.0"},
		{"result without cniVersion: the config's", "1.0.0", strings.Replace(result040, `"cniVersion":"0.4.0",`, "", 1), "1.0.0"},
		{"result with an empty cniVersion: the config's", "1.1.0", strings.Replace(result040, `"0.4.0"`, `""`, 1), "1.1.0"},
		{"null: an empty result in the config's version", "1.0.0", "null", "1.0.0"},
	} {
		t.Run("ADD "+tc.name, func(t *testing.T) {
			t.Setenv("WANT_COMMAND", "ADD")
			t.Setenv("REPLY", tc.reply)
			r, err := Add(ctx, "fake", conf(tc.confVersion))
			if err != nil {
				t.Fatalf("Add: %v", err)
			}
			if r.Version() != tc.wantVersion {
				t.Errorf("result version: got %s, want %s", r.Version(), tc.wantVersion)
			}
			cur, err := current.NewResultFromResult(r)
			if err != nil {
				t.Fatal(err)
			}
			if tc.reply != "null" && (len(cur.IPs) != 1 || cur.IPs[0].Address.String() != "10.1.0.5/24" || len(cur.Routes) != 1) {
				t.Errorf("result: got %+v, want 10.1.0.5/24 and one route", cur)
			}
		})
	}

	for _, tc := range []struct {
		command string
		call    func(context.Context, string, []byte) error
	}{{"DEL", Del}, {"CHECK", Check}, {"GC", GC}, {"STATUS", Status}} {
		t.Run(tc.command, func(t *testing.T) {
			t.Setenv("WANT_COMMAND", tc.command)
			t.Setenv("REPLY", "")
			if err := tc.call(ctx, "fake", conf("1.1.0")); err != nil {
				t.Errorf("%s: %v", tc.command, err)
			}
		})
	}

	t.Run("CNI error: its code passes through", func(t *testing.T) {
		t.Setenv("WANT_COMMAND", "ADD")
		t.Setenv("REPLY", `{"cniVersion":"1.0.0","code":11,"msg":"try again","details":"busy"}`)
		t.Setenv("EXIT", "1")
		t.Setenv("NOISE", "some log line")
		_, err := Add(ctx, "fake", conf("1.0.0"))
		var e *types.Error
		if !errors.As(err, &e) || e.Code != types.ErrTryAgainLater || e.Msg != "try again" || e.Details != "busy" {
			t.Errorf("Add: got %#v, want *types.Error code 11 %q %q", err, "try again", "busy")
		}
	})
	t.Run("CNI error from DEL", func(t *testing.T) {
		t.Setenv("WANT_COMMAND", "ADD") // the plugin refuses DEL with code 4
		err := Del(ctx, "fake", conf("1.0.0"))
		var e *types.Error
		if !errors.As(err, &e) || e.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(e.Msg, "CNI_COMMAND=DEL") {
			t.Errorf("Del: got %v, want *types.Error code 4 naming CNI_COMMAND=DEL", err)
		}
	})
	t.Run("no CNI error: stderr in the error", func(t *testing.T) {
		t.Setenv("WANT_COMMAND", "ADD")
		t.Setenv("REPLY", "")
		t.Setenv("EXIT", "3")
		t.Setenv("NOISE", "host-local: disk full")
		_, err := Add(ctx, "fake", conf("1.0.0"))
		var e *types.Error
		if err == nil || errors.As(err, &e) || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("Add: got %#v, want a plain error with the stderr text and the exit status", err)
		}
	})
	t.Run("undecodable stdout", func(t *testing.T) {
		t.Setenv("WANT_COMMAND", "ADD")
		t.Setenv("REPLY", "not json")
		t.Setenv("EXIT", "1")
		_, err := Add(ctx, "fake", conf("1.0.0"))
		if err == nil || !strings.Contains(err.Error(), "not json") {
			t.Errorf("Add: got %v, want an error quoting the output", err)
		}
	})
	t.Run("undecodable result", func(t *testing.T) {
		t.Setenv("WANT_COMMAND", "ADD")
		t.Setenv("REPLY", "[]")
		if _, err := Add(ctx, "fake", conf("1.0.0")); err == nil {
			t.Error("Add of a result that is not an object: got no error")
		}
	})
	t.Run("missing plugin", func(t *testing.T) {
		_, err := Add(ctx, "host-local", conf("1.0.0"))
		if err == nil || !strings.Contains(err.Error(), `"host-local"`) || !strings.Contains(err.Error(), dir) {
			t.Errorf("Add: got %v, want an error naming the plugin and CNI_PATH", err)
		}
	})
}

// TestBusyBinary executes a plugin whose file is still open for writing
// (ETXTBSY), as while it is being installed: the call waits for the write
// to end, as cni's invoke does.
func TestBusyBinary(t *testing.T) {
	dir := t.TempDir()
	p := writePlugin(t, dir, "fake", `echo '{"cniVersion":"1.0.0"}'`)
	t.Setenv("CNI_PATH", dir)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond) // time is the subject: the binary stays busy past the first try
		f.Close()
	}()
	start := time.Now()
	if _, err := Add(context.Background(), "fake", []byte(`{"cniVersion":"1.0.0"}`)); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if took := time.Since(start); took < busyWait {
		t.Errorf("Add took %v: got no wait, want a retry after %v", took, busyWait)
	}
}

func TestWithCommand(t *testing.T) {
	got := withCommand([]string{"A=1", "CNI_COMMAND=ADD", "CNI_COMMANDX=y", "B"}, "DEL", []byte(`{}`))
	want := []string{"A=1", "CNI_COMMANDX=y", "B", "CNI_COMMAND=DEL"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("withCommand: got %q, want %q", got, want)
	}
	// Multus's dual-stack request: CNI_ARGS IP=A,B and runtimeConfig.ips [A, B].
	got = withCommand([]string{"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAME=p;IP=198.51.100.241/28,2001:db8:22:200::1/64"}, "ADD",
		[]byte(`{"runtimeConfig":{"ips":["198.51.100.241/28","2001:db8:22:200::1/64"]}}`))
	want = []string{"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAME=p", "CNI_COMMAND=ADD"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("withCommand: got %q, want %q", got, want)
	}
}

func TestIPAMArgs(t *testing.T) {
	for _, c := range []struct {
		name, args string
		requested  []string
		want       string
	}{
		{"no request", "IgnoreUnknown=1;IP=192.0.2.5,2001:db8::5", nil, "IgnoreUnknown=1;IP=192.0.2.5,2001:db8::5"},
		{"same request", "IgnoreUnknown=1;IP=192.0.2.5/24,2001:db8::5/64;K8S_POD_NAME=p",
			[]string{"192.0.2.5/24", "2001:db8::5/64"}, "IgnoreUnknown=1;K8S_POD_NAME=p"},
		{"single", "IP=192.0.2.5", []string{"192.0.2.5"}, ""},
		{"another address kept", "IP=192.0.2.6", []string{"192.0.2.5"}, "IP=192.0.2.6"},
		{"partly requested kept", "IP=192.0.2.5,192.0.2.6", []string{"192.0.2.5"}, "IP=192.0.2.5,192.0.2.6"},
		{"no IP pair", "IgnoreUnknown=1;MAC=02:00:00:00:00:01", []string{"192.0.2.5"}, "IgnoreUnknown=1;MAC=02:00:00:00:00:01"},
		{"IPX is not IP", "IPX=192.0.2.5", []string{"192.0.2.5"}, "IPX=192.0.2.5"},
		{"empty", "", []string{"192.0.2.5"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ipamArgs(c.args, c.requested); got != c.want {
				t.Errorf("ipamArgs(%q, %q): got %q, want %q", c.args, c.requested, got, c.want)
			}
		})
	}
}

func TestRequestedIPs(t *testing.T) {
	got := requestedIPs([]byte(`{"runtimeConfig":{"ips":["192.0.2.5/24"]},"args":{"cni":{"ips":["2001:db8::5/64"]}}}`))
	if want := []string{"192.0.2.5/24", "2001:db8::5/64"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("requestedIPs: got %q, want %q", got, want)
	}
	if got := requestedIPs([]byte(`not json`)); got != nil {
		t.Errorf("requestedIPs of bad JSON: got %q, want none", got)
	}
}

// TestStart runs an ADD in the background that returns only once the test
// lets it (the plugin waits for a file to appear): Wait blocks until then and
// returns the result.
func TestStart(t *testing.T) {
	dir := t.TempDir()
	gate := filepath.Join(t.TempDir(), "go")
	writePlugin(t, dir, "slow", `while [ ! -e "$GATE" ]; do sleep 0.01; done
cat >/dev/null
echo "$REPLY"
`)
	t.Setenv("CNI_PATH", dir)
	t.Setenv("CNI_COMMAND", "ADD")
	t.Setenv("GATE", gate)
	t.Setenv("REPLY", result040)
	p := Start(context.Background(), "slow", []byte(`{"cniVersion":"0.4.0","name":"n","ipam":{"type":"slow"}}`))
	waited := make(chan error, 1)
	go func() { _, err := p.Wait(); waited <- err }()
	select {
	case err := <-waited:
		t.Fatalf("Wait returned before the plugin did: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	r, err := p.Wait() // again: the same answer
	if err != nil || r.Version() != "0.4.0" {
		t.Fatalf("second Wait: got %v, %v; want the 0.4.0 result", r, err)
	}
}

// TestHungPlugin runs a plugin that never answers (a shell script whose
// sleep, a child of its own, holds stdout open after the script is
// killed): every command returns once its context ends, with an error
// wrapping the context's, and so does a Start's Wait.
func TestHungPlugin(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(t.TempDir(), "pids")
	writePlugin(t, dir, "hung", `cat >/dev/null
/bin/sleep 60 &
echo $! >>"$PIDS"
wait
`)
	t.Setenv("CNI_PATH", dir)
	t.Setenv("PIDS", pids)
	t.Cleanup(func() {
		// the sleeps the killed scripts left behind
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	conf := []byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"hung"}}`)
	for _, tc := range []struct {
		command string
		call    func(context.Context) error
	}{
		{"ADD", func(ctx context.Context) error { _, err := Add(ctx, "hung", conf); return err }},
		{"DEL", func(ctx context.Context) error { return Del(ctx, "hung", conf) }},
		{"CHECK", func(ctx context.Context) error { return Check(ctx, "hung", conf) }},
		{"Start", func(ctx context.Context) error { _, err := Start(ctx, "hung", conf).Wait(); return err }},
	} {
		t.Run(tc.command, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.call(ctx) }()
			select {
			case err := <-done:
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "hung") {
					t.Errorf("got %v, want an error naming the plugin and wrapping context.DeadlineExceeded", err)
				}
			case <-time.After(30 * time.Second): // far beyond the context: it hangs
				t.Fatalf("%s of a hung plugin did not return after its context ended", tc.command)
			}
		})
	}
}
