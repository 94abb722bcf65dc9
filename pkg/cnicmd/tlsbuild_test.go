package cnicmd

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// HandOffTLS runs the TLS build of a plugin for an ssl: endpoint only, with
// the command's config on its stdin; its result becomes this plugin's
// output and its CNI error this plugin's error.
func TestHandOffTLS(t *testing.T) {
	ssl := endpoint.MustParse("ssl:127.0.0.1:6640")
	ssl.TLS = endpoint.TLS{Key: "/k.pem", Cert: "/c.pem", CA: "/ca.pem"}
	dir := t.TempDir()
	build := func(t *testing.T, name, script string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build(t, "ok-tls", `cat > "$(dirname "$0")/stdin"; echo '{"cniVersion":"1.0.0"}'`)
	build(t, "refused-tls", `cat >/dev/null; echo '{"cniVersion":"1.0.0","code":7,"msg":"refused","details":"d"}'; exit 1`)
	build(t, "broken-tls", `echo 'not json'; exit 2`)
	args := &skel.CmdArgs{Path: dir, StdinData: []byte(`{"name":"n"}`)}

	t.Run("unix: stays", func(t *testing.T) {
		if ran, err := HandOffTLS(args, endpoint.MustParse("unix:/run/db.sock"), "ok-tls"); ran || err != nil {
			t.Errorf("got ran %v, error %v; want false, nil", ran, err)
		}
	})
	t.Run("result", func(t *testing.T) {
		var ran bool
		var err error
		out := stdoutOf(t, func() { ran, err = HandOffTLS(args, ssl, "ok-tls") })
		if !ran || err != nil || strings.TrimSpace(out) != `{"cniVersion":"1.0.0"}` {
			t.Errorf("got ran %v, error %v, output %q; want true, nil and the build's result", ran, err, out)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "stdin")); string(got) != string(args.StdinData) {
			t.Errorf("the build got config %q, want %q", got, args.StdinData)
		}
	})
	t.Run("CNI error", func(t *testing.T) {
		ran, err := HandOffTLS(args, ssl, "refused-tls")
		var e *types.Error
		if !ran || !errors.As(err, &e) || e.Code != 7 || e.Msg != "refused" || e.Details != "d" {
			t.Errorf("got ran %v, error %#v; want true and the build's code 7", ran, err)
		}
	})
	t.Run("not a CNI error", func(t *testing.T) {
		ran, err := HandOffTLS(args, ssl, "broken-tls")
		if !ran || err == nil || !strings.Contains(err.Error(), "not json") {
			t.Errorf("got ran %v, error %v; want true and an error with the build's output", ran, err)
		}
	})
	t.Run("no build", func(t *testing.T) {
		ran, err := HandOffTLS(args, ssl, "none-tls")
		if !ran || !errors.Is(err, endpoint.ErrNoTLS) || code(Code(err)) != types.ErrInvalidNetworkConfig {
			t.Errorf("got ran %v, error %v (code %d); want true, ErrNoTLS, code 7", ran, err, code(Code(err)))
		}
	})
}

// stdoutOf returns what f writes to os.Stdout.
func stdoutOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	f()
	os.Stdout = saved
	w.Close()
	b, _ := io.ReadAll(r)
	return string(b)
}
