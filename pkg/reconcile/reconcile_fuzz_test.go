package reconcile

import (
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// FuzzCookiesOf feeds arbitrary dumped cookies: only cookies with the suite
// tag come out, each once.
func FuzzCookiesOf(f *testing.F) {
	for _, c := range [][2]uint64{{0x0fc5010000000001, 0x1234}, {0x0fc5ffffffffffff, 0x0fc5ffffffffffff}, {0, 0}} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, c1, c2 uint64) {
		got := cookiesOf([]openflow.Flow{{Cookie: c1}, {Cookie: c2}, {Cookie: c1}})
		seen := map[flows.Cookie]bool{}
		for _, c := range got {
			if !c.IsOurs() || seen[c] {
				t.Fatalf("cookie %s is not ours or repeated: %v", c, got)
			}
			seen[c] = true
		}
		if want := flows.Cookie(c1).IsOurs(); seen[flows.Cookie(c1)] != want {
			t.Fatalf("cookie %#x: got %v, want %v", c1, seen[flows.Cookie(c1)], want)
		}
	})
}
