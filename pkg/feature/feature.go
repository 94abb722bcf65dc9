// Package feature declares what every feature of an attachment is to the
// code that handles all of them: a record on the attachment's port that
// rebuilds its flows and meters (record.Rebuilt), and the withdrawal of
// what it made. reconcile, metrics, trace, ovs-bridge's CHECK and its
// withdrawal of the chained plugins' state loop over All instead of naming
// each feature.
//
// The overlay is not one: it belongs to a bridge, not to an attachment
// (its record is on its tunnel port, its cookie one per bridge), and the
// node agent, not a CNI command, makes and withdraws it (pkg/overlay).
package feature

import (
	"context"

	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/limit"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/pkg/portsec"
	"github.com/ovsflow/ovs-cni/pkg/record"
)

// Feature is one feature of an attachment.
type Feature interface {
	// Name names it for people ("host ports").
	Name() string
	// Rebuild returns what port p's record of the feature asks of its
	// bridge and node, with what OVSDB holds now; ok is false when p has
	// none (no record, or nothing to install without an ofport).
	Rebuild(p ovsdb.OwnedPort) (r record.Rebuilt, ok bool)
	// Withdraw removes what the feature made for the ports (flows,
	// meters, rows, node-local rules, the record); a port without any is
	// no error.
	Withdraw(ctx context.Context, cli *ovsdb.Client, ports []ovsdb.OwnedPort) error
}

// All are the features in the order their flows are rebuilt (a port's
// own table-0 flows first); they are withdrawn in the reverse order, as a
// rollback list is run.
var All = []Feature{portsec.Feature{}, limit.Feature{}, hostport.Feature{}}
