package endpoint

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for ep, ok := range map[string]bool{
		"unix:/var/run/openvswitch/db.sock": true,
		"tcp:127.0.0.1:6640":                true,
		"tcp:[::1]:6640":                    true,
		"unix:":                             false,
		"tcp:127.0.0.1":                     false,
		"/var/run/openvswitch/db.sock":      false,
		"ssl:127.0.0.1:6640":                true,
		"ssl:127.0.0.1":                     false,
		"tcp:ovsdb.example.org:6640":        true,
		"tcp:a:6640":                        true,
		"tcp:-a:6640":                       false,
		"tcp:a.:6640":                       false,
		"tcp:a_b:6640":                      false,
		"tcp:" + strings.Repeat("a", 253) + ":6640": true,
		"tcp:" + strings.Repeat("a", 254) + ":6640": false,
	} {
		if _, err := Parse(ep); (err == nil) != ok {
			t.Errorf("Parse(%q) = %v, want ok=%v", ep, err, ok)
		}
	}
}

func TestParseOpenFlow(t *testing.T) {
	for s, ok := range map[string]bool{
		"unix:/run/openvswitch/br0.mgmt": true,
		"tcp:127.0.0.1:6653":             true,
		"unix:br0.mgmt":                  false, // ovs-ofctl wants an absolute path
		"unix:/run/a,b":                  false,
		"br0":                            false,
		"tcp:host:0":                     false,
		"ssl:127.0.0.1:6653":             false, // OpenFlow over TLS is not offered
	} {
		if _, err := ParseOpenFlow(s); (err == nil) != ok {
			t.Errorf("ParseOpenFlow(%q) = %v, want ok=%v", s, err, ok)
		}
	}
}

func TestOpenFlow(t *testing.T) {
	for _, tt := range []struct{ override, ovsdb, want string }{
		{"", "unix:/run/ovs/db.sock", "unix:/run/ovs/br0.mgmt"},
		{"", "tcp:127.0.0.1:6640", "unix:/var/run/openvswitch/br0.mgmt"},
		{"tcp:192.0.2.1:6653", "unix:/run/ovs/db.sock", "tcp:192.0.2.1:6653"},
	} {
		var override Endpoint
		if tt.override != "" {
			override = MustParse(tt.override)
		}
		if got := OpenFlow(override, MustParse(tt.ovsdb), "br0"); got != MustParse(tt.want) {
			t.Errorf("OpenFlow(%q, %q) = %q, want %q", tt.override, tt.ovsdb, got, tt.want)
		}
	}
}

// Listening tells a live socket from a dead daemon's socket file and from a
// missing one; a tcp: target counts as listening (the real call reports).
func TestListening(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.sock")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, "dead.sock")
	d, err := net.Listen("unix", dead)
	if err != nil {
		t.Fatal(err)
	}
	d.(*net.UnixListener).SetUnlinkOnClose(false)
	d.Close() // the file stays, nobody listens: ECONNREFUSED
	defer l.Close()
	for target, want := range map[string]bool{
		"unix:" + live:                       true,
		"unix:" + dead:                       false,
		"unix:" + filepath.Join(dir, "gone"): false,
		"tcp:127.0.0.1:1":                    true,
	} {
		if got := Listening(MustParse(target)); got != want {
			t.Errorf("Listening(%q) = %v, want %v", target, got, want)
		}
	}
}

// Without package tlsdial linked in (as in ovs-portmap), an ssl: endpoint
// is refused before any connection.
func TestDialSSLWithoutTLS(t *testing.T) {
	e, err := Parse("ssl:127.0.0.1:6641")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Dial(context.Background()); !errors.Is(err, ErrNoTLS) {
		t.Errorf("got %v, want ErrNoTLS", err)
	}
}

// An endpoint is stored as its text (records) and set from it (flags): ""
// is the zero Endpoint, anything else parses or fails.
func TestEndpointText(t *testing.T) {
	for _, s := range []string{"unix:/run/ovs/br0.mgmt", "tcp:127.0.0.1:6653", "ssl:[::1]:6641", ""} {
		var e Endpoint
		if err := e.UnmarshalText([]byte(s)); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		b, _ := e.MarshalText()
		if string(b) != s || e.String() != s || e.IsZero() != (s == "") {
			t.Errorf("%q: got %q, zero %v", s, b, e.IsZero())
		}
	}
	var e Endpoint
	if err := e.Set("br0"); err == nil {
		t.Errorf("Set(%q): got %v, want an error", "br0", e)
	}
}
