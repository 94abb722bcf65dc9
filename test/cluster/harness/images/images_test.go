package images

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/ovsflow/ovs-cni/test/cluster/harness/topology"
)

// The node image carries the conflist of the DaemonSet's ConfigMap.
func TestConfigMapConflist(t *testing.T) {
	m, err := os.ReadFile("../../../../deploy/ovsflow-cni.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := ConfigMapConflist(m)
	var v struct {
		Name    string            `json:"name"`
		Plugins []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(c), &v); err != nil {
		t.Fatalf("the ConfigMap's conflist is not JSON: %v\n%s", err, c)
	}
	if len(v.Plugins) == 0 || !strings.Contains(c, `"type": "ovs-bridge"`) {
		t.Errorf("got %d plugins, want ovs-bridge's chain:\n%s", len(v.Plugins), c)
	}
}

func TestBaseName(t *testing.T) {
	// The name is the recipe's digest, as bash's
	// `echo "$SUITE $MIRROR $BASE_PACKAGES" | sha256sum` gave it: another
	// package list is another image.
	b := DefaultBase("")
	sum := sha256.Sum256([]byte("bookworm http://deb.debian.org/debian " + strings.Join(b.Packages, " ") + "\n"))
	p := topology.Plan{Prefix: "ovsflow-oid"}
	if got, want := b.Name(p), "ovsflow-oid-base:"+hex.EncodeToString(sum[:])[:12]; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	other := b
	other.Packages = append(other.Packages[:len(other.Packages):len(other.Packages)], "curl")
	if other.Name(p) == b.Name(p) {
		t.Errorf("another package list kept the name %q", b.Name(p))
	}
}
