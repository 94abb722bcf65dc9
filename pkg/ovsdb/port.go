package ovsdb

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
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
	return []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{
		KeyOwner: OwnerValue, KeyContainerID: a.ContainerID, KeyIfName: a.IfName,
	}.ovs())}
}

// PortSpec is what AttachPort writes.
type PortSpec struct {
	Name        string
	Tag         int   // access VLAN; 0 = VLAN 0 (untagged frames only)
	Trunks      []int // trunk VLANs; empty = an access port
	ExternalIDs map[string]string
	// InterfaceIDs are external_ids of the Interface row only, beside
	// ExternalIDs (OVN's "iface-id", which it reads there).
	InterfaceIDs map[string]string
	// UniqueMAC, when set, makes the transaction fail with a *MACInUseError
	// if another Port row records this container MAC (KeyMAC) by then.
	UniqueMAC string
	// OFPort, when set, is the interface's ofport_request (see ChooseOFPort):
	// the transaction fails with an *OFPortTakenError if another interface
	// requests it by then.
	OFPort int
	// Reservation, when set, is the claim of OFPort and of the identity
	// (KeyIdentity) that Reserve made: the insert takes them over, and
	// fails with ErrSweeping while a sweep is under way or after one ran
	// since the claim.
	Reservation *Reservation
	// Claims are keys the port takes (ClaimValue) that no other Port row
	// may hold by then, and Excludes keys that no other Port row may
	// hold: the transaction fails with a *ClaimedError naming the holder
	// (as Claim's).
	Claims, Excludes []string
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
		var ops []operation
		for _, col := range []string{"ofport", "ofport_request"} {
			// (The bounds must be in the column's range, 1-65279.)
			op := selectOp(tableInterface, cond(col, fnAtLeast, p), cond(col, fnAtMost, end-1))
			op.Columns = []string{col}
			ops = append(ops, op)
		}
		res, err := c.transact(ctx, ops...)
		if err != nil {
			return 0, fmt.Errorf("looking up ofports %d-%d: %w", p, end-1, err)
		}
		taken := map[int]bool{}
		for i := range ops {
			ifs, err := decode[ofports](tableInterface, res[i].Rows)
			if err != nil {
				return 0, fmt.Errorf("looking up ofports %d-%d: %w", p, end-1, err)
			}
			for _, i := range ifs {
				for _, n := range append(i.OFPort, i.Requested...) {
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

// ofports are the two ofport columns of an Interface, as ChooseOFPort
// selects them (one in each select).
type ofports struct {
	OFPort    []int `ovsdb:"ofport"`
	Requested []int `ovsdb:"ofport_request"`
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
	ports := selectOp(tablePort, cond("external_ids", fnIncludes, strMap{KeyMAC: mac}.ovs()))
	ports.Columns = []string{"_uuid", "name", "external_ids"}
	ifaces := selectOp(tableInterface, cond("mac_in_use", fnEqual, mac))
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
	ops, idx := attachOps(bridgeUUID, spec)
	res, err := c.transact(ctx, ops...)
	if err != nil {
		// The wait that did not hold says which.
		if w := timedOutWait(err); w != nil {
			switch {
			case w.Index == idx.ofport:
				return "", &OFPortTakenError{OFPort: spec.OFPort}
			case w.Index == idx.mac:
				return "", &MACInUseError{MAC: spec.UniqueMAC, Holder: "a port attached at the same time"}
			case idx.claims >= 0 && w.Index >= idx.claims && w.Index < idx.claims+len(spec.Claims)+len(spec.Excludes):
				return "", c.claimed(ctx, append(slices.Clone(spec.Claims), spec.Excludes...)[w.Index-idx.claims], "", err)
			case w.Index == idx.identity:
				return "", &IdentityTakenError{Identity: spec.Reservation.Identity, Holder: Attachment{ContainerID: "(a port attached at the same time)"}}
			case spec.Reservation != nil && w.Index == handOverClaimWait:
				return "", fmt.Errorf("attaching port %q: %w", spec.Name, ErrClaimLost)
			case w.Index < idx.bridge:
				return "", fmt.Errorf("attaching port %q: %w", spec.Name, ErrSweeping)
			}
		}
		return "", fmt.Errorf("attaching port %q: %w", spec.Name, err)
	}
	if n := res[idx.bridge].Count; n != 1 {
		return "", fmt.Errorf("attaching port %q: bridge row is gone", spec.Name)
	}
	return res[idx.bridge-1].UUID.GoUUID, nil
}

// attachIndex are the indexes of the operations of attachOps that callers
// look at (-1: not there).
type attachIndex struct{ bridge, ofport, mac, identity, claims int }

// attachOps are AttachPort's transaction: a reservation's hand-over, the
// Interface, the Port, the Bridge's mutation, then the waits for the
// requested ofport, the MAC, the identity and the claims (claimOps).
func attachOps(bridgeUUID string, spec PortSpec) ([]operation, attachIndex) {
	idx := attachIndex{ofport: -1, mac: -1, identity: -1, claims: -1}
	ids := withSchema(spec.ExternalIDs)
	for _, k := range spec.Claims {
		ids[k] = ClaimValue
	}
	var ops []operation
	if r := spec.Reservation; r != nil {
		ops = append(ops, r.handOverOps()...)
		if r.Identity != "" {
			ids[KeyIdentity] = r.Identity
		}
	}
	// The VLAN mode is explicit: a port without a tag is an access port of
	// VLAN 0 (Open vSwitch's default would make it a trunk of every VLAN).
	mode := "access"
	if len(spec.Trunks) > 0 {
		mode = "trunk"
	}
	portRow := ovsdb.Row{"name": spec.Name, "interfaces": named("iface"), "external_ids": ids.ovs(), "vlan_mode": mode}
	if spec.Tag > 0 {
		portRow["tag"] = spec.Tag
	}
	if len(spec.Trunks) > 0 {
		portRow["trunks"] = intSet(spec.Trunks...)
	}
	ifaceIDs := withSchema(spec.ExternalIDs) // a copy
	maps.Copy(ifaceIDs, spec.InterfaceIDs)
	ifaceRow := ovsdb.Row{"name": spec.Name, "external_ids": ifaceIDs.ovs()}
	if spec.OFPort > 0 {
		ifaceRow["ofport_request"] = spec.OFPort
	}
	ops = append(ops,
		insertOp(tableInterface, "iface", ifaceRow),
		insertOp(tablePort, "port", portRow),
		mutateOp(tableBridge, byUUID(bridgeUUID), mut("ports", mutInsert, named("port"))))
	idx.bridge = len(ops) - 1
	// Waits with timeout 0: they fail at once.
	if spec.OFPort > 0 {
		// The new interface must be the only one requesting the number:
		// two concurrent ADDs cannot both win. (One that ovs-vswitchd
		// numbered without a request is ChooseOFPort's to avoid; should
		// it hold the number, ovs-vswitchd gives this port another.)
		idx.ofport = len(ops)
		ops = append(ops, waitOp(tableInterface, []ovsdb.Condition{cond("ofport_request", fnEqual, spec.OFPort)},
			[]string{"_uuid"}, untilEqual, 0, ovsdb.Row{"_uuid": named("iface")}))
	}
	if spec.UniqueMAC != "" {
		// The new port must be the only one recording the MAC (the
		// container MAC is in its external_ids): two concurrent ADDs with
		// the same MAC cannot both win.
		idx.mac = len(ops)
		ops = append(ops, waitOp(tablePort, []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{KeyMAC: spec.UniqueMAC}.ovs())},
			[]string{"_uuid"}, untilEqual, 0, ovsdb.Row{"_uuid": named("port")}))
	}
	if r := spec.Reservation; r != nil && r.Identity != "" {
		idx.identity = len(ops)
		ops = append(ops, waitOp(tablePort, []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{KeyIdentity: r.Identity}.ovs())},
			[]string{"_uuid"}, untilEqual, 0, ovsdb.Row{"_uuid": named("port")}))
	}
	if len(spec.Claims)+len(spec.Excludes) > 0 {
		idx.claims = len(ops)
		ops = append(ops, claimOps(named("port"), spec.Claims, spec.Excludes)...)
	}
	return ops, idx
}

// detachOps removes ports from whichever bridge holds them; Open vSwitch then
// garbage-collects the Port and its Interfaces (they are not root rows).
func detachOps(portUUIDs []string) []operation {
	ops := make([]operation, 0, len(portUUIDs))
	for _, u := range portUUIDs {
		ops = append(ops, mutateOp(tableBridge, []ovsdb.Condition{cond("ports", fnIncludes, uuid(u))},
			mut("ports", mutDelete, uuid(u))))
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
	return c.ownedPorts(ctx, []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{KeyOwner: OwnerValue}.ovs())})
}

// OwnedPortsWith returns our ports whose external_ids hold key=value.
func (c *Client) OwnedPortsWith(ctx context.Context, key, value string) ([]OwnedPort, error) {
	return c.ownedPorts(ctx, []ovsdb.Condition{cond("external_ids", fnIncludes, strMap{KeyOwner: OwnerValue, key: value}.ovs())})
}

// AnyOwnedPortWith reports, for each set of ids, whether a port of ours
// holds every pair of it in its external_ids, in one transaction of a
// select per set. It reads their UUIDs alone: on a node of hundreds of
// ports, the answer a DEL needs without the cost of reading every record
// (OwnedPorts).
func (c *Client) AnyOwnedPortWith(ctx context.Context, sets ...map[string]string) ([]bool, error) {
	if len(sets) == 0 {
		return nil, nil
	}
	ops := make([]operation, 0, len(sets))
	for _, ids := range sets {
		want := strMap{KeyOwner: OwnerValue}
		for k, v := range ids {
			want[k] = v
		}
		op := selectOp(tablePort, cond("external_ids", fnIncludes, want.ovs()))
		op.Columns = []string{"_uuid"}
		ops = append(ops, op)
	}
	res, err := c.transact(ctx, ops...)
	if err != nil {
		return nil, fmt.Errorf("looking for ports with %v: %w", sets, err)
	}
	found := make([]bool, len(sets))
	for i := range sets {
		found[i] = len(res[i].Rows) > 0
	}
	return found, nil
}

func (c *Client) ownedPorts(ctx context.Context, where []ovsdb.Condition) ([]OwnedPort, error) {
	res, err := c.transact(ctx, selectModel[Port](tablePort, where...), selectModel[Interface](tableInterface, where...))
	if err != nil {
		return nil, fmt.Errorf("listing our ports: %w", err)
	}
	return joinPorts(res[0].Rows, res[1].Rows)
}

// joinPorts pairs the selected Port rows with their selected Interface rows.
func joinPorts(portRows, ifaceRows []ovsdb.Row) ([]OwnedPort, error) {
	ports, err := decode[Port](tablePort, portRows)
	if err != nil {
		return nil, err
	}
	ifaces, err := decode[Interface](tableInterface, ifaceRows)
	if err != nil {
		return nil, err
	}
	byUUID := make(map[string]Interface, len(ifaces))
	for _, i := range ifaces {
		byUUID[i.UUID] = i
	}
	out := make([]OwnedPort, 0, len(ports))
	for _, p := range ports {
		// A sweeper must not act on records it cannot read, nor DEL
		// remove them half understood.
		if err := CheckSchema(fmt.Sprintf("port %q", p.Name), p.ExternalIDs); err != nil {
			return nil, err
		}
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
// set the ofport of interface name, or ctx is about to end (waitTime: a
// busy ovs-vswitchd is waited for as long as the caller waits), and
// returns it.
func (c *Client) WaitOFPort(ctx context.Context, name string) (int, error) {
	ctx, cancel := endpoint.Bounded(ctx)
	defer cancel()
	w := waitTime(ctx)
	ms := int(max(w, 0) / time.Millisecond)
	byName := []ovsdb.Condition{cond("name", fnEqual, name)}
	sel := selectOp(tableInterface, byName...)
	sel.Columns = []string{"_uuid", "name", "ofport", "error"}
	ops := []operation{
		waitOp(tableInterface, byName, []string{"ofport"}, untilNotEqual, ms, ovsdb.Row{"ofport": intSet()}),
		sel,
	}
	res, err := c.transact(ctx, ops...)
	if err != nil {
		if waitTimedOut(err) {
			return 0, fmt.Errorf("waiting for ofport of %q: %w: not attached within %s", name, endpoint.ErrTimeout, w.Round(time.Millisecond))
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
	return 0, &AttachError{Name: name, Reason: msg}
}

// AttachError is ovs-vswitchd's refusal of an interface: Reason is the
// Interface row's error column.
type AttachError struct {
	Name, Reason string
}

func (e *AttachError) Error() string {
	return fmt.Sprintf("ovs-vswitchd could not attach %q: %s", e.Name, e.Reason)
}

// SetPortExternalIDs sets keys on our port (replacing old values) and removes
// the keys in unset, in one transaction.
func (c *Client) SetPortExternalIDs(ctx context.Context, portUUID string, set map[string]string, unset ...string) error {
	keys := append(slices.Clone(unset), strMap(set).keys()...)
	muts := []ovsdb.Mutation{mut("external_ids", mutDelete, strSet(keys...))}
	if len(set) > 0 {
		muts = append(muts, mut("external_ids", mutInsert, withSchema(set).ovs()))
	}
	if _, err := c.transact(ctx, mutateOp(tablePort, byUUID(portUUID), muts...)); err != nil {
		return fmt.Errorf("recording on port %s: %w", portUUID, err)
	}
	return nil
}
