package agent

import (
	"io"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/overlay"
)

// -overlay: hybrid unless given; a bad value is refused by the flag.
func TestParseOverlay(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want overlay.Mode
	}{{nil, overlay.Hybrid}, {[]string{"-overlay", "vxlan"}, overlay.VXLAN}, {[]string{"-overlay=none"}, overlay.None},
		{[]string{"-overlay", "geneve"}, overlay.Geneve}} {
		_, cfg, err := ParseArgs(tc.args, io.Discard)
		if err != nil || cfg.Overlay != tc.want {
			t.Errorf("ParseArgs(%q): overlay %q, %v; want %q", tc.args, cfg.Overlay, err, tc.want)
		}
	}
	if _, _, err := ParseArgs([]string{"-overlay", "gre"}, io.Discard); err == nil {
		t.Error("-overlay gre: no error")
	}
	var c Config
	c.Defaults()
	if c.Overlay != overlay.Hybrid {
		t.Errorf("Defaults: overlay %q, want hybrid", c.Overlay)
	}
}
