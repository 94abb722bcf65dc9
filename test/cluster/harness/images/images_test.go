package images

import (
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
	// The name bash's `echo "$SUITE $MIRROR $BASE_PACKAGES" | sha256sum` gave:
	// images built before the tool are found again.
	b := DefaultBase("")
	if got, want := b.Name(topology.Plan{Prefix: "ovsflow-oid"}), "ovsflow-oid-base:bd3da5049021"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
