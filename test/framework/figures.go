package framework

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Figure prints one line "FIGURE <name> k=v ..." to stdout (hack/resilience.sh
// and the benchmarks' readers collect them) and to the test's log.
func Figure(t testing.TB, name string, kv ...any) {
	t.Helper()
	var b strings.Builder
	b.WriteString("FIGURE " + name)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
	}
	fmt.Fprintln(os.Stdout, b.String())
	t.Log(b.String())
}
