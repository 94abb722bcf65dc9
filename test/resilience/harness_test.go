package resilience

import (
	"testing"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// Short names for the framework's most used helpers.
var (
	conflist = framework.Conflist
	pm       = framework.PM
	mappings = framework.Mappings
	hp       = framework.HP
	cniCode  = framework.CNICode
	parallel = framework.Parallel
)

var (
	uniq = framework.Uniq
	run  = framework.Run // executes a command and returns its combined output
)

// The node of docs/design.md (framework.WireOVSHost).
const (
	nodeV4    = framework.NodeV4
	nodeV6    = framework.NodeV6
	outsideV4 = framework.OutsideV4
	outsideV6 = framework.OutsideV6
)

// newCNI runs conflist's plugins with x, or a pluginExec of its own when x is nil.
func newCNI(t *testing.T, conflist map[string]any, x *pluginExec) *framework.CNI {
	t.Helper()
	if x == nil {
		x = &pluginExec{}
	}
	return framework.NewCNI(t, conflist, x)
}
