package ovsdb

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovsflow/ovs-cni/pkg/jsonrpc"
)

// DefaultEndpoint is where Open vSwitch puts its database socket.
const DefaultEndpoint = "unix:/var/run/openvswitch/db.sock"

// ErrUnreachable wraps every failure to reach ovsdb-server, so that callers can
// tell "try again later" from other errors.
var ErrUnreachable = errors.New("ovsdb unreachable")

// ErrVswitchdTimeout wraps waits for ovs-vswitchd (an ofport, a configuration)
// that ran out: ovs-vswitchd is down or overloaded, try again later.
var ErrVswitchdTimeout = errors.New("ovs-vswitchd did not answer in time")

// Client is a connection to ovsdb-server without cache or monitor.
type Client struct {
	c  *jsonrpc.Conn
	db model.DatabaseModel
}

// ValidateEndpoint checks the "unix:PATH" / "tcp:HOST:PORT" syntax.
func ValidateEndpoint(ep string) error {
	switch {
	case strings.HasPrefix(ep, "unix:") && len(ep) > len("unix:"):
		return nil
	case strings.HasPrefix(ep, "tcp:"):
		return ValidateHostPort(ep, strings.TrimPrefix(ep, "tcp:"))
	}
	return fmt.Errorf("endpoint %q: want unix:PATH or tcp:HOST:PORT", ep)
}

// ValidateHostPort checks the HOST:PORT of a tcp: endpoint ep: an IP address
// or a DNS name, and a port from 1 to 65535.
func ValidateHostPort(ep, hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("endpoint %q: %w", ep, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("endpoint %q: port %q: want 1-65535", ep, port)
	}
	if _, err := netip.ParseAddr(host); err != nil && !isDNSName(host) {
		return fmt.Errorf("endpoint %q: host %q: not an IP address or DNS name", ep, host)
	}
	return nil
}

// isDNSName reports whether host is 1-253 letters, digits, '.' and '-',
// starting and ending with a letter or digit. (A regexp with a {0,251}
// repetition would cost every plugin process 0.6 ms to compile at start-up.)
func isDNSName(host string) bool {
	if len(host) < 1 || len(host) > 253 {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(host); i++ {
		if c := host[i]; !alnum(c) && ((c != '.' && c != '-') || i == 0 || i == len(host)-1) {
			return false
		}
	}
	return true
}

// Dial connects to the database at endpoint. Failures wrap ErrUnreachable.
func Dial(ctx context.Context, endpoint string) (*Client, error) {
	if err := ValidateEndpoint(endpoint); err != nil {
		return nil, err
	}
	dbModel, err := DatabaseModel()
	if err != nil {
		return nil, fmt.Errorf("ovsdb model: %w", err)
	}
	schema, err := schemaOnce()
	if err != nil {
		return nil, err
	}
	full, errs := model.NewDatabaseModel(schema, dbModel)
	if len(errs) > 0 {
		return nil, fmt.Errorf("ovsdb model does not match the embedded schema: %v", errs)
	}
	c, err := jsonrpc.Dial(ctx, endpoint)
	if err != nil {
		return nil, fmt.Errorf("%w: connecting to %s: %v", ErrUnreachable, endpoint, err)
	}
	return &Client{c: c, db: full}, nil
}

const dbName = "Open_vSwitch"

// Close ends the connection.
func (c *Client) Close() { c.c.Close() }

// transact runs ops as one transaction and checks every per-operation result.
func (c *Client) transact(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	if !c.db.Schema.ValidateOperations(ops...) {
		return nil, fmt.Errorf("ovsdb operations do not fit the schema: %v", ops)
	}
	var res []ovsdb.OperationResult
	err := c.c.Call(ctx, "transact", ovsdb.NewTransactArgs(dbName, ops...), &res)
	if err != nil {
		if lostConnection(err) {
			return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
		}
		return nil, err
	}
	if opErrs, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		// Each operation's error stays matchable (errors.As), e.g. the
		// *ovsdb.TimedOut of a wait that did not hold.
		errs := []error{err}
		for _, e := range opErrs {
			errs = append(errs, e)
		}
		return nil, errors.Join(errs...)
	}
	return res, nil
}

// waitTimedOut reports whether err is a wait operation that did not hold
// within its timeout.
func waitTimedOut(err error) bool {
	var to *ovsdb.TimedOut
	return errors.As(err, &to)
}

// lostConnection reports errors that mean ovsdb-server went away or did not
// answer in time: the caller may try again later.
func lostConnection(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED)
}

// decode turns the rows of a select result into models of table.
func decode[T any](c *Client, table string, rows []ovsdb.Row) ([]T, error) {
	out := make([]T, 0, len(rows))
	for i := range rows {
		uuid := ""
		if u, ok := rows[i]["_uuid"].(ovsdb.UUID); ok {
			uuid = u.GoUUID
		}
		m, err := model.CreateModel(c.db, table, &rows[i], uuid)
		if err != nil {
			return nil, fmt.Errorf("decoding %s row: %w", table, err)
		}
		out = append(out, *(m.(any).(*T)))
	}
	return out, nil
}

// allRows is a condition every row meets: libovsdb drops an empty "where"
// from non-select operations, and RFC 7047 requires the member.
var allRows = []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionNotEqual,
	ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"})}

func selectOp(table string, where ...ovsdb.Condition) ovsdb.Operation {
	return ovsdb.Operation{Op: ovsdb.OperationSelect, Table: table, Where: where}
}

func strMap(m map[string]string) ovsdb.OvsMap {
	g := make(map[any]any, len(m))
	for k, v := range m {
		g[k] = v
	}
	return ovsdb.OvsMap{GoMap: g}
}

func uuidSet(uuids ...string) ovsdb.OvsSet {
	s := make([]any, len(uuids))
	for i, u := range uuids {
		s[i] = ovsdb.UUID{GoUUID: u}
	}
	return ovsdb.OvsSet{GoSet: s}
}

func intSet(vals ...int) ovsdb.OvsSet {
	s := make([]any, len(vals))
	for i, v := range vals {
		s[i] = v
	}
	return ovsdb.OvsSet{GoSet: s}
}

func strSet(vals ...string) ovsdb.OvsSet {
	s := make([]any, len(vals))
	for i, v := range vals {
		s[i] = v
	}
	return ovsdb.OvsSet{GoSet: s}
}

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

// Bridge returns the bridge called name, or nil when there is none, without
// its ports (on a busy node the row carries hundreds of port UUIDs).
func (c *Client) Bridge(ctx context.Context, name string) (*Bridge, error) {
	op := selectOp(tableBridge, ovsdb.NewCondition("name", ovsdb.ConditionEqual, name))
	op.Columns = []string{"_uuid", "name", "datapath_type", "fail_mode", "external_ids"}
	res, err := c.transact(ctx, op)
	if err != nil {
		return nil, fmt.Errorf("looking up bridge %q: %w", name, err)
	}
	brs, err := decode[Bridge](c, tableBridge, res[0].Rows)
	if err != nil || len(brs) == 0 {
		return nil, err
	}
	return &brs[0], nil
}

// BridgeHasPort reports whether bridge name holds the port.
func (c *Client) BridgeHasPort(ctx context.Context, name, portUUID string) (bool, error) {
	op := selectOp(tableBridge, ovsdb.NewCondition("name", ovsdb.ConditionEqual, name),
		ovsdb.NewCondition("ports", ovsdb.ConditionIncludes, uuidSet(portUUID)))
	op.Columns = []string{"_uuid"}
	res, err := c.transact(ctx, op)
	if err != nil {
		return false, fmt.Errorf("looking up bridge %q: %w", name, err)
	}
	return len(res[0].Rows) == 1, nil
}

// EnsureBridge creates bridge name (with its internal port) unless it exists.
// Concurrent callers are safe: the bridge name is a unique index, so a losing
// insert fails and the bridge is looked up again.
func (c *Client) EnsureBridge(ctx context.Context, name, datapathType string) (*Bridge, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		br, err := c.Bridge(ctx, name)
		if err != nil || br != nil {
			return br, err
		}
		ids := strMap(map[string]string{KeyOwner: OwnerValue})
		ops := []ovsdb.Operation{
			{Op: ovsdb.OperationInsert, Table: tableInterface, UUIDName: "newiface",
				Row: ovsdb.Row{"name": name, "type": "internal"}},
			{Op: ovsdb.OperationInsert, Table: tablePort, UUIDName: "newport",
				Row: ovsdb.Row{"name": name, "interfaces": uuidSet("newiface")}},
			{Op: ovsdb.OperationInsert, Table: tableBridge, UUIDName: "newbridge",
				Row: ovsdb.Row{"name": name, "ports": uuidSet("newport"), "datapath_type": datapathType, "external_ids": ids,
					// Nothing is forwarded after an ovs-vswitchd restart
					// until reconcile has put the port security flows back.
					"fail_mode": "secure"}},
			{Op: ovsdb.OperationMutate, Table: tableRoot, Where: allRows,
				Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("bridges", ovsdb.MutateOperationInsert, uuidSet("newbridge"))}},
		}
		if _, err := c.transact(ctx, ops...); err != nil {
			if errors.Is(err, ErrUnreachable) {
				return nil, err
			}
			lastErr = err // most likely a concurrent creator won; look again
		}
	}
	br, err := c.Bridge(ctx, name)
	if err == nil && br == nil {
		err = fmt.Errorf("creating bridge %q: %w", name, lastErr)
	}
	return br, err
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
				vals := []any{row[col]}
				if set, ok := row[col].(ovsdb.OvsSet); ok {
					vals = set.GoSet
				}
				for _, v := range vals {
					switch n := v.(type) { // JSON numbers decode as float64
					case float64:
						taken[int(n)] = true
					case int:
						taken[n] = true
					}
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
	ifaces := selectOp(tableInterface, ovsdb.NewCondition("mac_in_use", ovsdb.ConditionEqual, strSet(mac)))
	ifaces.Columns = []string{"_uuid", "name"}
	res, err := c.transact(ctx, ports, ifaces)
	if err != nil {
		return fmt.Errorf("looking up MAC %s: %w", mac, err)
	}
	ps, err := decode[Port](c, tablePort, res[0].Rows)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if a := (OwnedPort{Port: p}).Attachment(); a != self {
			return &MACInUseError{MAC: mac, Holder: fmt.Sprintf("attachment %s (port %q)", a, p.Name)}
		}
	}
	is, err := decode[Interface](c, tableInterface, res[1].Rows)
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
		portRow["trunks"] = intSet(spec.Trunks...)
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

// bumpCfg asks ovs-vswitchd to report, through cur_cfg, when it has applied
// the transaction; SyncPending waits on that.
var bumpCfg = ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tableRoot, Where: allRows,
	Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("next_cfg", ovsdb.MutateOperationAdd, 1)}}

// SyncPending waits, only if a change is pending (cur_cfg < next_cfg), until
// ovs-vswitchd has applied it. ADD calls it before creating a device whose
// name a just-removed port may still hold inside ovs-vswitchd (a DEL quickly
// followed by an ADD of the same attachment).
func (c *Client) SyncPending(ctx context.Context, timeout time.Duration) error {
	res, err := c.transact(ctx, ovsdb.Operation{Op: ovsdb.OperationSelect, Table: tableRoot, Where: allRows, Columns: []string{"next_cfg", "cur_cfg"}})
	if err != nil {
		return fmt.Errorf("reading next_cfg: %w", err)
	}
	roots, err := decode[OpenvSwitch](c, tableRoot, res[0].Rows)
	if err != nil || len(roots) != 1 {
		return fmt.Errorf("reading next_cfg: %v", err)
	}
	if roots[0].CurCfg >= roots[0].NextCfg {
		return nil
	}
	return c.waitCfg(ctx, roots[0].NextCfg, timeout)
}

// DetachPortsAndSync removes ports like DetachPorts, then waits until
// ovs-vswitchd has applied the change. A retried ADD needs this before it
// re-creates a device of the same name: if ovs-vswitchd saw the old and the
// new port in one reconfiguration, it would keep reading the deleted device.
func (c *Client) DetachPortsAndSync(ctx context.Context, timeout time.Duration, portUUIDs ...string) error {
	ops := append(detachOps(portUUIDs), bumpCfg,
		ovsdb.Operation{Op: ovsdb.OperationSelect, Table: tableRoot, Where: allRows, Columns: []string{"next_cfg"}})
	res, err := c.transact(ctx, ops...)
	if err != nil {
		return fmt.Errorf("detaching %d port(s): %w", len(portUUIDs), err)
	}
	roots, err := decode[OpenvSwitch](c, tableRoot, res[len(res)-1].Rows)
	if err != nil || len(roots) != 1 {
		return fmt.Errorf("reading next_cfg: %v", err)
	}
	return c.waitCfg(ctx, roots[0].NextCfg, timeout)
}

// waitCfg blocks until ovs-vswitchd's cur_cfg reaches n. Each round is an
// OVSDB wait for cur_cfg to change, so there is no polling; it loops because
// other clients may bump next_cfg too, and cur_cfg can skip n.
func (c *Client) waitCfg(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		res, err := c.transact(ctx, ovsdb.Operation{Op: ovsdb.OperationSelect, Table: tableRoot, Where: allRows, Columns: []string{"cur_cfg"}})
		if err != nil {
			return fmt.Errorf("reading cur_cfg: %w", err)
		}
		roots, err := decode[OpenvSwitch](c, tableRoot, res[0].Rows)
		if err != nil || len(roots) != 1 {
			return fmt.Errorf("reading cur_cfg: %v", err)
		}
		cur := roots[0].CurCfg
		if cur >= n {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w: configuration %d not applied within %s (at %d)", ErrVswitchdTimeout, n, timeout, cur)
		}
		ms := int(left / time.Millisecond)
		wctx, cancel := context.WithTimeout(ctx, left+2*time.Second)
		_, err = c.transact(wctx, ovsdb.Operation{Op: ovsdb.OperationWait, Table: tableRoot, Where: allRows, Timeout: &ms,
			Columns: []string{"cur_cfg"}, Until: string(ovsdb.WaitConditionNotEqual), Rows: []ovsdb.Row{{"cur_cfg": cur}}})
		cancel()
		if err != nil && !waitTimedOut(err) {
			return fmt.Errorf("waiting for cur_cfg: %w", err)
		}
	}
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
	res, err := c.transact(ctx, selectOp(tablePort, where...), selectOp(tableInterface, where...))
	if err != nil {
		return nil, fmt.Errorf("listing our ports: %w", err)
	}
	ports, err := decode[Port](c, tablePort, res[0].Rows)
	if err != nil {
		return nil, err
	}
	ifaces, err := decode[Interface](c, tableInterface, res[1].Rows)
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
			return 0, fmt.Errorf("waiting for ofport of %q: %w: not attached within %s", name, ErrVswitchdTimeout, timeout)
		}
		return 0, fmt.Errorf("waiting for ofport of %q: %w", name, err)
	}
	ifs, err := decode[Interface](c, tableInterface, res[1].Rows)
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
	muts := []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationDelete, strSet(keys...))}
	if len(set) > 0 {
		muts = append(muts, *ovsdb.NewMutation("external_ids", ovsdb.MutateOperationInsert, strMap(set)))
	}
	if _, err := c.transact(ctx, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tablePort, Where: where, Mutations: muts}); err != nil {
		return fmt.Errorf("recording on port %s: %w", portUUID, err)
	}
	return nil
}

// ErrPortGone says that the port a change was for no longer exists.
var ErrPortGone = errors.New("the port is gone")

// ClaimedError says that a claim key is held by another port.
type ClaimedError struct {
	Key    string
	Holder Attachment
	Port   string
}

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("%s is already held by attachment %s (port %q)", e.Key, e.Holder, e.Port)
}

// ClaimValue is the value of a held claim key.
const ClaimValue = "1"

// Record updates our port's external_ids in one transaction: removes the keys
// in unset, sets the keys in set, and takes every key in claims exclusively.
// A claim is a key that at most one Port row may hold; the transaction waits
// (with timeout 0, so it fails at once) for each claim to be held by this port
// alone, so two concurrent claimers cannot both win. A lost claim is a
// *ClaimedError naming the holder.
func (c *Client) Record(ctx context.Context, portUUID string, unset []string, set map[string]string, claims []string) error {
	where := []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: portUUID})}
	ins := make(map[string]string, len(set)+len(claims))
	for k, v := range set {
		ins[k] = v
	}
	for _, k := range claims {
		ins[k] = ClaimValue
	}
	ops := []ovsdb.Operation{}
	if len(unset) > 0 {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tablePort, Where: where,
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationDelete, strSet(unset...))}})
	}
	if len(ins) > 0 {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tablePort, Where: where,
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationInsert, strMap(ins))}})
	}
	zero := 0
	for _, k := range claims {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationWait, Table: tablePort, Timeout: &zero,
			Where:   []ovsdb.Condition{ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes, strMap(map[string]string{k: ClaimValue}))},
			Columns: []string{"_uuid"}, Until: string(ovsdb.WaitConditionEqual),
			Rows: []ovsdb.Row{{"_uuid": ovsdb.UUID{GoUUID: portUUID}}}})
	}
	if len(ops) == 0 {
		return nil
	}
	res, err := c.transact(ctx, ops...)
	if err == nil {
		if res[0].Count != 1 {
			return fmt.Errorf("recording on port %s: %w", portUUID, ErrPortGone)
		}
		return nil
	}
	if errors.Is(err, ErrUnreachable) {
		return err
	}
	// Find who holds what we could not claim.
	for _, k := range claims {
		sel := selectOp(tablePort,
			ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes, strMap(map[string]string{k: ClaimValue})),
			ovsdb.NewCondition("_uuid", ovsdb.ConditionNotEqual, ovsdb.UUID{GoUUID: portUUID}))
		r, serr := c.transact(ctx, sel)
		if serr != nil {
			break
		}
		if ports, derr := decode[Port](c, tablePort, r[0].Rows); derr == nil && len(ports) > 0 {
			p := OwnedPort{Port: ports[0]}
			return &ClaimedError{Key: k, Holder: p.Attachment(), Port: p.Port.Name}
		}
	}
	return fmt.Errorf("recording on port %s: %w", portUUID, err)
}

// Bridges returns every bridge.
func (c *Client) Bridges(ctx context.Context) ([]Bridge, error) {
	res, err := c.transact(ctx, selectOp(tableBridge))
	if err != nil {
		return nil, fmt.Errorf("listing bridges: %w", err)
	}
	return decode[Bridge](c, tableBridge, res[0].Rows)
}

// SetBridgeExternalIDs adds keys to a bridge's external_ids; existing keys
// keep their value (an OVSDB map insert does not overwrite).
func (c *Client) SetBridgeExternalIDs(ctx context.Context, bridgeUUID string, set map[string]string) error {
	where := []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: bridgeUUID})}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	// A map insert keeps a key that is already there: delete the keys first.
	_, err := c.transact(ctx, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: tableBridge, Where: where,
		Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationDelete, strSet(keys...)),
			*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationInsert, strMap(set))}})
	if err != nil {
		return fmt.Errorf("recording on bridge %s: %w", bridgeUUID, err)
	}
	return nil
}
