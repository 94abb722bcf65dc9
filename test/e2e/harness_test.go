package e2e

import (
	"time"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// Short names for the framework's most used helpers.
var (
	conflist    = framework.Conflist
	pm          = framework.PM
	mappings    = framework.Mappings
	hp          = framework.HP
	cniCode     = framework.CNICode
	parallel    = framework.Parallel
	allocations = framework.Allocations
)

var (
	uniq = framework.Uniq
	run  = framework.Run // executes a command and returns its combined output
)

var timeNow = time.Now
