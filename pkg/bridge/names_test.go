package bridge

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// The name checks are loops (a regexp compiled at start-up cost every ADD
// 3 ms); they accept exactly what the regexps they replace accepted.
func TestNameChecksMatchTheirRegexps(t *testing.T) {
	bridgeRE := regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)
	ovnRE := regexp.MustCompile(`^[!-~]{0,255}$`)
	inputs := []string{"", "br0", "br-int", "a.b_c-d", "123456789012345", "1234567890123456",
		"br 0", "br/0", "br\t", "ünï", "\x00", "~!", strings.Repeat("x", 255), strings.Repeat("x", 256)}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(20))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(4) > 0 { // mostly printable ASCII, where the edges are
				b[i] = byte(0x1f + r.IntN(0x62))
			}
		}
		inputs = append(inputs, string(b))
	}
	for _, s := range inputs {
		if got, want := validBridgeName(s), bridgeRE.MatchString(s); got != want {
			t.Errorf("validBridgeName(%q) = %v, want %v", s, got, want)
		}
		if got, want := validOVNPortName(s), ovnRE.MatchString(s); got != want {
			t.Errorf("validOVNPortName(%q) = %v, want %v", s, got, want)
		}
	}
}
