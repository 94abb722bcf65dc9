// Package ovsdb is a small typed client for the few Open_vSwitch tables and
// columns the plugins use. It speaks OVSDB (RFC 7047) over pkg/jsonrpc with
// libovsdb's wire types (its ovsdb package only) and encoding/json: the
// transactions are ovsdb.Operation values (wire.go), the answers
// []ovsdb.OperationResult with their ovsdb.Row values (reply.go), read so
// that a broken or hostile answer is an error, never a crash.
//
// It keeps no cache and starts no monitor: a short-lived plugin process
// sends a handful of transactions and exits, so downloading whole tables
// would only cost time. Nor does it load a schema: rows become the
// hand-written models below through a small decoder driven by their tags
// (decode.go), and ovsdb-server checks every transaction against its own
// schema. Decoding even a subset of the schema, building libovsdb's model on
// it and mapping rows through libovsdb's reflection mapper were a good share
// of every plugin process's CPU (docs/performance.md, "Design costs"). The
// tests keep the models, and every operation built here, fitting the schema
// Open vSwitch ships.
//
// Every Port and Interface row the plugins create carries namespaced
// external_ids (see the Key* constants); the plugins find their own state there
// and never modify rows without the owner key.
package ovsdb

// Hand-written models: only the columns read or written here.
// Optional columns are pointers, sets are slices.

// OpenvSwitch is the root row of the database.
type OpenvSwitch struct {
	UUID    string   `ovsdb:"_uuid"`
	Bridges []string `ovsdb:"bridges"`
	NextCfg int      `ovsdb:"next_cfg"`
	CurCfg  int      `ovsdb:"cur_cfg"`
	// ExternalIDs holds the in-flight records (inflight.go).
	ExternalIDs map[string]string `ovsdb:"external_ids"`
}

// Bridge is a row of table Bridge.
type Bridge struct {
	UUID         string            `ovsdb:"_uuid"`
	Name         string            `ovsdb:"name"`
	Ports        []string          `ovsdb:"ports"`
	DatapathType string            `ovsdb:"datapath_type"`
	FailMode     *string           `ovsdb:"fail_mode"`
	DatapathID   *string           `ovsdb:"datapath_id"`
	ExternalIDs  map[string]string `ovsdb:"external_ids"`
}

// Secure reports whether the bridge has fail_mode=secure: ovs-vswitchd then
// installs no flow of its own, not even after a restart.
func (b Bridge) Secure() bool { return b.FailMode != nil && *b.FailMode == "secure" }

// Port is a row of table Port.
type Port struct {
	UUID        string            `ovsdb:"_uuid"`
	Name        string            `ovsdb:"name"`
	Interfaces  []string          `ovsdb:"interfaces"`
	Tag         *int              `ovsdb:"tag"`
	Trunks      []int             `ovsdb:"trunks"`
	ExternalIDs map[string]string `ovsdb:"external_ids"`
}

// Interface is a row of table Interface.
type Interface struct {
	UUID        string            `ovsdb:"_uuid"`
	Name        string            `ovsdb:"name"`
	Type        string            `ovsdb:"type"`
	OFPort      *int              `ovsdb:"ofport"`
	Error       *string           `ovsdb:"error"`
	MTU         *int              `ovsdb:"mtu"`
	MACInUse    *string           `ovsdb:"mac_in_use"`
	ExternalIDs map[string]string `ovsdb:"external_ids"`
}

// Table names.
const (
	tableRoot      = "Open_vSwitch"
	tableBridge    = "Bridge"
	tablePort      = "Port"
	tableInterface = "Interface"
)

// external_ids keys on the Port and Interface rows the plugins create: the
// identity of an attachment (its records are pkg/record's).
const (
	KeyOwner       = "ovsflow.io/owner"        // OwnerValue: the row is ours
	KeyContainerID = "ovsflow.io/container-id" // CNI_CONTAINERID
	KeyIfName      = "ovsflow.io/ifname"       // CNI_IFNAME
	KeyNetNS       = "ovsflow.io/netns"        // CNI_NETNS at ADD time
	KeyNetNSInode  = "ovsflow.io/netns-inode"  // the inode number of that namespace, decimal (pkg/netns)
	KeyNetwork     = "ovsflow.io/network"      // network name from the config
	KeyBridge      = "ovsflow.io/bridge"       // bridge the port was attached to
	KeyMAC         = "ovsflow.io/mac"          // the container interface's MAC, lower case

	// KeyOVNIfaceID, on the Interface row, names the OVN logical port
	// ovn-controller binds the interface to.
	KeyOVNIfaceID = "iface-id"

	// OwnerValue marks rows created by this suite.
	OwnerValue = "ovsflow-cni"
)
