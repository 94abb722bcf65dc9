package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// Attachment identifies the port of one container interface.
type Attachment struct {
	ContainerID string
	IfName      string
}

func (a Attachment) String() string { return a.ContainerID + "/" + a.IfName }

func (a Attachment) where() []ovsdb.Condition {
	return []ovsdb.Condition{ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes, strMap(map[string]string{
		KeyOwner: OwnerValue, KeyContainerID: a.ContainerID, KeyIfName: a.IfName,
	}))}
}

// PortSpec is what AttachPort writes.
type PortSpec struct {
	Name        string
	Tag         int   // access VLAN; 0 = VLAN 0 (untagged frames only)
	Trunks      []int // trunk VLANs; empty = an access port
	ExternalIDs map[string]string
	// UniqueMAC, when set, makes the transaction fail with a *MACInUseError
	// if another Port row records this container MAC (KeyMAC) by then.
	UniqueMAC string
	// OFPort, when set, is the interface's ofport_request (see ChooseOFPort):
	// the transaction fails with an *OFPortTakenError if another interface
	// requests it by then.
	OFPort int
}

// Requested ofports are taken from the upper half of the OpenFlow port
// range, [RequestedOFPortMin, RequestedOFPortMax]: ovs-vswitchd numbers the
// ports that request none upwards from 1, so they rarely meet.
const (
	RequestedOFPortMin = 32768
	RequestedOFPortMax = 65279 // OFPP_MAX - 1
	// ofportProbe is how many numbers from an attachment's own one
	// ChooseOFPort considers in one round trip.
	ofportProbe = 16
)

// OFPortTakenError says that another interface requested or holds the
// ofport that a port was to request.
type OFPortTakenError struct {
	OFPort int
}

func (e *OFPortTakenError) Error() string {
	return fmt.Sprintf("ofport %d is requested by another interface", e.OFPort)
}

// HomeOFPort is the ofport attachment a tries first: a hash of its identity
// in the requested range, so that a retried ADD of the same attachment
// usually gets its old number back.
func HomeOFPort(a Attachment) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(a.ContainerID + "/" + a.IfName))
	return RequestedOFPortMin + int(h.Sum32()%(RequestedOFPortMax-RequestedOFPortMin+1))
}

// ChooseOFPort returns the first ofport from from on (wrapping within the
// requested range) that no interface requests or holds. AttachPort checks
// it again in its own transaction: a concurrent ADD may take it meanwhile.
func (c *Client) ChooseOFPort(ctx context.Context, from int) (int, error) {
	p := from
	for tried := 0; tried <= RequestedOFPortMax-RequestedOFPortMin; tried += ofportProbe {
		if p < RequestedOFPortMin || p > RequestedOFPortMax {
			p = RequestedOFPortMin
		}
		end := min(p+ofportProbe, RequestedOFPortMax+1)
		var ops []ovsdb.Operation
		for _, col := range []string{"ofport", "ofport_request"} {
			// (The bounds must be in the column's range, 1-65279.)
			op := selectOp(tableInterface, ovsdb.NewCondition(col, ovsdb.ConditionGreaterThanOrEqual, p),
				ovsdb.NewCondition(col, ovsdb.ConditionLessThanOrEqual, end-1))
			op.Columns = []string{col}
			ops = append(ops, op)
		}
		res, err := c.transact(ctx, ops...)
		if err != nil {
			return 0, fmt.Errorf("looking up ofports %d-%d: %w", p, end-1, err)
		}
		taken := map[int]bool{}
		for i, col := range []string{"ofport", "ofport_request"} {
			for _, row := range res[i].Rows {
				ns, err := setOf(atomInt)(row[col])
				if err != nil {
					return 0, fmt.Errorf("looking up ofports %d-%d: %s: %w", p, end-1, col, err)
				}
				for _, n := range ns {
					taken[n] = true
				}
			}
		}
		for n := p; n < end; n++ {
			if !taken[n] {
				return n, nil
			}
		}
		p = end
	}
	return 0, fmt.Errorf("no free ofport in %d-%d", RequestedOFPortMin, RequestedOFPortMax)
}

// MACInUseError says that a MAC is already used on the node: by a container
// interface of another attachment or by an Open vSwitch interface.
type MACInUseError struct {
	MAC    string
	Holder string // "attachment C/I (port P)" or "interface I"
}

func (e *MACInUseError) Error() string {
	return fmt.Sprintf("MAC %s is already used by %s", e.MAC, e.Holder)
}

// MACHolder returns a *MACInUseError when mac is the recorded container MAC
// of a port of another attachment than self, or the MAC of any Open vSwitch
// interface (a bridge's internal interface, an uplink, a host veth).
func (c *Client) MACHolder(ctx context.Context, mac string, self Attachment) error {
	ports := selectOp(tablePort, ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes, strMap(map[string]string{KeyMAC: mac})))
	ports.Columns = []string{"_uuid", "name", "external_ids"}
	ifaces := selectOp(tableInterface, ovsdb.NewCondition("mac_in_use", ovsdb.ConditionEqual, ovsSet(mac)))
	ifaces.Columns = []string{"_uuid", "name"}
	res, err := c.transact(ctx, ports, ifaces)
	if err != nil {
		return fmt.Errorf("looking up MAC %s: %w", mac, err)
	}
	ps, err := decode[Port](tablePort, res[0].Rows)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if a := (OwnedPort{Port: p}).Attachment(); a != self {
			return &MACInUseError{MAC: mac, Holder: fmt.Sprintf("attachment %s (port %q)", a, p.Name)}
		}
	}
	is, err := decode[Interface](tableInterface, res[1].Rows)
	if err != nil || len(is) == 0 {
		return err
	}
	return &MACInUseError{MAC: mac, Holder: fmt.Sprintf("interface %q", is[0].Name)}
}

// AttachPort adds a Port with one system Interface to bridge in one
// transaction and returns the new Port's UUID.
func (c *Client) AttachPort(ctx context.Context, bridgeUUID string, spec PortSpec) (string, error) {
	ids := strMap(spec.ExternalIDs)
	portRow := ovsdb.Row{"name": spec.Name, "interfaces": uuidSet("iface"), "external_ids": ids}
	// The VLAN mode is explicit: a port without a tag is an access port of
	// VLAN 0 (Open vSwitch's default would make it a trunk of every VLAN).
	portRow["vlan_mode"] = "access"
	if spec.Tag > 0 {
		portRow["tag"] = spec.Tag
	}
	if len(spec.Trunks) > 0 {
		portRow["trunks"] = ovsSet(spec.Trunks...)
		portRow["vlan_mode"] = "trunk"
	}
	ifaceRow := ovsdb.Row{"name": spec.Name, "external_ids": ids}
	if spec.OFPort > 0 {
		ifaceRow["ofport_request"] = spec.OFPort
	}
	zero := 0
	ops := []ovsdb.Operation{
		{Op: ovsdb.OperationInsert, Table: tableInterface, UUIDName: "iface", Row: ifaceRow},
		{Op: ovsdb.OperationInsert, Table: tablePort, UUIDName: "port", Row: portRow},
		{Op: ovsdb.OperationMutate, Table: tableBridge,
			Where:     []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: bridgeUUID})},
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("ports", ovsdb.MutateOperationInsert, uuidSet("port"))}},
	}
	if spec.OFPort > 0 {
		// The new interface must be the only one requesting the number:
		// two concurrent ADDs cannot both win. (One that ovs-vswitchd
		// numbered without a request is ChooseOFPort's to avoid; should
		// it hold the number, ovs-vswitchd gives this port another.)
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationWait, Table: tableInterface, Timeout: &zero,
			Where:   []ovsdb.Condition{ovsdb.NewCondition("ofport_request", ovsdb.ConditionEqual, spec.OFPort)},
			Columns: []string{"_uuid"}, Until: string(ovsdb.WaitConditionEqual), Rows: []ovsdb.Row{{"_uuid": ovsdb.UUID{GoUUID: "iface"}}}})
	}
	if spec.UniqueMAC != "" {
		// The new port must be the only one recording the MAC (the
		// container MAC is in its external_ids): two concurrent ADDs with
		// the same MAC cannot both win.
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationWait, Table: tablePort, Timeout: &zero,
			Where:   []ovsdb.Condition{ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes, strMap(map[string]string{KeyMAC: spec.UniqueMAC}))},
			Columns: []string{"_uuid"}, Until: string(ovsdb.WaitConditionEqual), Rows: []ovsdb.Row{{"_uuid": ovsdb.UUID{GoUUID: "port"}}}})
	}
	res, err := c.transact(ctx, ops...)
	if err != nil {
		var to *ovsdb.TimedOut
		if errors.As(err, &to) {
			// The table of the wait that did not hold says which.
			if op := to.Operation(); op != nil && op.Table == tableInterface {
				return "", &OFPortTakenError{OFPort: spec.OFPort}
			}
			if spec.UniqueMAC != "" {
				return "", &MACInUseError{MAC: spec.UniqueMAC, Holder: "a port attached at the same time"}
			}
		}
		return "", fmt.Errorf("attaching port %q: %w", spec.Name, err)
	}
	if n := res[2].Count; n != 1 {
		return "", fmt.Errorf("attaching port %q: bridge row is gone", spec.Name)
	}
	return res[1].UUID.GoUUID, nil
}

// detachOps removes ports from whichever bridge holds them; Open vSwitch then
// garbage-collects the Port and its Interfaces (they are not root rows).
func detachOps(portUUIDs []string) []ovsdb.Operation {
	ops := make([]ovsdb.Operation, 0, len(portUUIDs))
	for _, u := range portUUIDs {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tableBridge,
			Where:     []ovsdb.Condition{ovsdb.NewCondition("ports", ovsdb.ConditionIncludes, uuidSet(u))},
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("ports", ovsdb.MutateOperationDelete, uuidSet(u))}})
	}
	return ops
}

// DetachPorts removes the given ports in one transaction.
func (c *Client) DetachPorts(ctx context.Context, portUUIDs ...string) error {
	if len(portUUIDs) == 0 {
		return nil
	}
	if _, err := c.transact(ctx, append(detachOps(portUUIDs), bumpCfg)...); err != nil {
		return fmt.Errorf("detaching %d port(s): %w", len(portUUIDs), err)
	}
	return nil
}

// OwnedPort is one of our ports with its interface.
type OwnedPort struct {
	Port      Port
	Interface Interface
}

// Attachment returns the identity recorded on the port.
func (p OwnedPort) Attachment() Attachment {
	return Attachment{ContainerID: p.Port.ExternalIDs[KeyContainerID], IfName: p.Port.ExternalIDs[KeyIfName]}
}

// FindPorts returns our ports for attachment a (normally zero or one).
func (c *Client) FindPorts(ctx context.Context, a Attachment) ([]OwnedPort, error) {
	return c.ownedPorts(ctx, a.where())
}

// OwnedPorts returns every port this suite owns.
func (c *Client) OwnedPorts(ctx context.Context) ([]OwnedPort, error) {
	return c.ownedPorts(ctx, []ovsdb.Condition{ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes,
		strMap(map[string]string{KeyOwner: OwnerValue}))})
}

func (c *Client) ownedPorts(ctx context.Context, where []ovsdb.Condition) ([]OwnedPort, error) {
	res, err := c.transact(ctx, selectModel[Port](tablePort, where...), selectModel[Interface](tableInterface, where...))
	if err != nil {
		return nil, fmt.Errorf("listing our ports: %w", err)
	}
	ports, err := decode[Port](tablePort, res[0].Rows)
	if err != nil {
		return nil, err
	}
	ifaces, err := decode[Interface](tableInterface, res[1].Rows)
	if err != nil {
		return nil, err
	}
	byUUID := make(map[string]Interface, len(ifaces))
	for _, i := range ifaces {
		byUUID[i.UUID] = i
	}
	out := make([]OwnedPort, 0, len(ports))
	for _, p := range ports {
		op := OwnedPort{Port: p}
		for _, iu := range p.Interfaces {
			if i, ok := byUUID[iu]; ok {
				op.Interface = i
			}
		}
		out = append(out, op)
	}
	return out, nil
}

// WaitOFPort blocks (in ovsdb-server, not by polling) until ovs-vswitchd has
// set the ofport of interface name, or timeout passes, and returns it.
func (c *Client) WaitOFPort(ctx context.Context, name string, timeout time.Duration) (int, error) {
	ms := int(timeout / time.Millisecond)
	byName := []ovsdb.Condition{ovsdb.NewCondition("name", ovsdb.ConditionEqual, name)}
	ops := []ovsdb.Operation{
		{Op: ovsdb.OperationWait, Table: tableInterface, Timeout: &ms, Where: byName,
			Columns: []string{"ofport"}, Until: string(ovsdb.WaitConditionNotEqual),
			Rows: []ovsdb.Row{{"ofport": ovsdb.OvsSet{GoSet: []any{}}}}},
		{Op: ovsdb.OperationSelect, Table: tableInterface, Where: byName, Columns: []string{"_uuid", "name", "ofport", "error"}},
	}
	wctx, cancel := context.WithTimeout(ctx, timeout+2*time.Second)
	defer cancel()
	res, err := c.transact(wctx, ops...)
	if err != nil {
		if waitTimedOut(err) {
			return 0, fmt.Errorf("waiting for ofport of %q: %w: not attached within %s", name, endpoint.ErrTimeout, timeout)
		}
		return 0, fmt.Errorf("waiting for ofport of %q: %w", name, err)
	}
	ifs, err := decode[Interface](tableInterface, res[1].Rows)
	if err != nil {
		return 0, err
	}
	if len(ifs) == 0 || ifs[0].OFPort == nil {
		return 0, fmt.Errorf("waiting for ofport of %q: interface row is gone", name)
	}
	if of := *ifs[0].OFPort; of > 0 {
		return of, nil
	}
	msg := "unknown error"
	if ifs[0].Error != nil {
		msg = *ifs[0].Error
	}
	return 0, fmt.Errorf("ovs-vswitchd could not attach %q: %s", name, msg)
}

// SetPortExternalIDs sets keys on our port (replacing old values) and removes
// the keys in unset, in one transaction.
func (c *Client) SetPortExternalIDs(ctx context.Context, portUUID string, set map[string]string, unset ...string) error {
	keys := unset
	for k := range set {
		keys = append(keys, k)
	}
	where := []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: portUUID})}
	muts := []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationDelete, ovsSet(keys...))}
	if len(set) > 0 {
		muts = append(muts, *ovsdb.NewMutation("external_ids", ovsdb.MutateOperationInsert, strMap(set)))
	}
	if _, err := c.transact(ctx, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tablePort, Where: where, Mutations: muts}); err != nil {
		return fmt.Errorf("recording on port %s: %w", portUUID, err)
	}
	return nil
}
