package noderanges

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

func TestWriteCheckRemove(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "pod-ranges")
	conf := []byte(`{"type":"ovs-bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"192.0.2.0/24"}],[{"subnet":"2001:db8:c::/64"}]]}}`)
	if err := Check(path, conf); err == nil || !strings.Contains(err.Error(), "has not confirmed this network's pod ranges (192.0.2.0/24, 2001:db8:c::/64)") {
		t.Errorf("no file: %v", err)
	}
	if wrote, err := Write(path, prefixes("2001:db8:c::/64", "192.0.2.0/24")); !wrote || err != nil {
		t.Fatalf("Write: %v %v", wrote, err)
	}
	if wrote, err := Write(path, prefixes("192.0.2.0/24", "2001:db8:c::/64")); wrote || err != nil {
		t.Errorf("Write of the same ranges in another order: wrote %v, %v; want nothing written", wrote, err)
	}
	if err := Check(path, conf); err != nil {
		t.Errorf("the ranges confirmed: %v", err)
	}
	if !Holds(path, prefixes("192.0.2.0/24", "2001:db8:c::/64")) || Holds(path, prefixes("192.0.2.0/24")) {
		t.Error("Holds: wrong answer")
	}
	for _, other := range [][]byte{
		[]byte(`{"ipam":{"ranges":[[{"subnet":"192.0.2.0/24"}]]}}`),                                // one family fewer
		[]byte(`{"ipam":{"subnet":"192.0.2.0/25","ranges":[[{"subnet":"2001:db8:c::/64"}]]}}`),     // another range
		[]byte(`{"ipam":{"ranges":[[{"subnet":"192.0.2.0/24"}],[{"subnet":"2001:db8:d::/64"}]]}}`), // another range
	} {
		if err := Check(path, other); err == nil || !strings.Contains(err.Error(), "the conflist is stale") {
			t.Errorf("%s: %v, want stale", other, err)
		}
	}
	if err := Check(path, []byte(`{"ipam":{"ranges":[[{"subnet":"192.0.2.0/33"}]]}}`)); err == nil || !strings.Contains(err.Error(), `ipam subnet "192.0.2.0/33"`) {
		t.Errorf("a bad subnet: %v", err)
	}
	if gone, err := Remove(path); !gone || err != nil {
		t.Errorf("Remove: %v %v", gone, err)
	}
	if gone, err := Remove(path); gone || err != nil {
		t.Errorf("Remove again: %v %v, want nothing, no error", gone, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 0 {
		t.Errorf("left in the directory: %v", entries)
	}
}

func TestConfigPath(t *testing.T) {
	for _, tc := range []struct{ conf, want string }{
		{`{"plugins":[{"type":"ovs-bridge","confirmedRanges":"/run/ovsflow/pod-ranges"},{"type":"ovs-portmap"}]}`, "/run/ovsflow/pod-ranges"},
		{`{"plugins":[{"type":"ovs-bridge"}]}`, ""},
		{`{"plugins":[{"type":"bridge","confirmedRanges":"/x"}]}`, ""},
		{`not json`, ""},
	} {
		if got := ConfigPath([]byte(tc.conf)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.conf, got, tc.want)
		}
	}
}
