package reconcile

import (
	"strings"
	"testing"
)

// FuzzCookiesOf parses arbitrary ovs-ofctl dump output: only cookies with
// the suite tag come out.
func FuzzCookiesOf(f *testing.F) {
	for _, s := range []string{" cookie=0xfc5010000000001, duration=1.0s, table=0, priority=200,tcp actions=drop",
		"cookie=0x1234, table=40", "cookie=0x", "cookie=0x0fc5ffffffffffffffff,", "OFPST_FLOW reply (OF1.4) (xid=0x2):"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, dump string) {
		for c := range cookiesOf(strings.Split(dump, "\n")) {
			if !c.IsOurs() {
				t.Fatalf("cookie %s is not ours", c)
			}
		}
	})
}
