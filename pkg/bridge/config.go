// Package bridge implements the ovs-bridge CNI plugin: a veth pair per
// container interface, the host end attached to an Open vSwitch bridge over
// OVSDB, with delegated IPAM.
package bridge

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/pkg/cnierr"
	"github.com/ovsflow/ovs-cni/pkg/endpoint"
	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/hostport"
	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
)

// NetConf is the network configuration of ovs-bridge. The JSON keys are the
// documented contract (README "ovs-bridge configuration").
type NetConf struct {
	types.PluginConf
	// "ovsdb" (its PEM files below), "openflow", "timeout".
	cnicmd.Access
	Bridge       string  `json:"bridge"`
	CreateBridge bool    `json:"createBridge,omitempty"`
	DatapathType string  `json:"datapathType,omitempty"`
	MTU          int     `json:"mtu,omitempty"`
	VLAN         *int    `json:"vlan,omitempty"`
	Trunk        []Trunk `json:"trunk,omitempty"`
	IsGateway    bool    `json:"isGateway,omitempty"`
	PortSecurity *bool   `json:"portSecurity,omitempty"`
	// AllowRouter lets containers send IPv6 router advertisements and
	// redirects (and IPv4 redirects); AllowDHCPServer lets them answer as
	// DHCPv4 or DHCPv6 servers or relays. Both off: port security drops them.
	AllowRouter     bool `json:"allowRouter,omitempty"`
	AllowDHCPServer bool `json:"allowDHCPServer,omitempty"`
	// AllowedAddresses are further CIDRs the container may send from (a
	// VIP, a VRRP address, a nested guest); AllowVRRP lets it send VRRP
	// adverts to their group from its own and allowed addresses.
	AllowedAddresses []string `json:"allowedAddresses,omitempty"`
	AllowVRRP        bool     `json:"allowVRRP,omitempty"`
	// The PEM files of an ssl: "ovsdb" (mutual TLS): the client's key and
	// certificate, and the CA that signed ovsdb-server's certificate.
	OVSDBKey  string `json:"ovsdbKey,omitempty"`
	OVSDBCert string `json:"ovsdbCert,omitempty"`
	OVSDBCA   string `json:"ovsdbCA,omitempty"`
	// VswitchdControl: see ovs-portmap's (Mesos port mappings only).
	VswitchdControl string `json:"vswitchdControl,omitempty"`
	// ConfirmedRanges: the file in which the node agent confirms that
	// this network's IPAM ranges are its Node's (package noderanges);
	// while it does not, STATUS is unavailable and ADD asks to try again.
	ConfirmedRanges string `json:"confirmedRanges,omitempty"`
	// LeaveVethToNetns: DEL takes the veth down and leaves it to go with
	// the container's netns, which the runtime deletes right after the DEL
	// (Kubernetes' runtimes do), instead of deleting it: the kernel's
	// deletion of a link waits for RCU (docs/performance.md).
	LeaveVethToNetns bool `json:"leaveVethToNetns,omitempty"`

	RuntimeConfig struct {
		MAC string   `json:"mac,omitempty"`
		IPs []string `json:"ips,omitempty"`
	} `json:"runtimeConfig,omitempty"`
	Args struct {
		CNI struct {
			MAC string   `json:"mac,omitempty"`
			IPs []string `json:"ips,omitempty"`
		} `json:"cni,omitempty"`
		hostport.Args // Apache Mesos: args["org.apache.mesos"].network_info.port_mappings
	} `json:"args,omitempty"`
	LogFile string `json:"logFile,omitempty"` // see package cnilog

	// The keys of k8snetworkplumbingwg/ovs-cni that mean something here
	// (docs/ovs-cni.md); "vlan", "trunk" and "mtu" are the same keys.
	SocketFile        string `json:"socket_file,omitempty"`
	ConfigurationPath string `json:"configuration_path,omitempty"`
	OFPortRequest     *int   `json:"ofport_request,omitempty"`
	InterfaceType     string `json:"interface_type,omitempty"`
	OVNPort           string `json:"ovnPort,omitempty"`
	// Accepted and ignored: the veth is up when ADD returns, so there is no
	// link state to wait for.
	LinkStateCheckInterval int `json:"link_state_check_interval,omitempty"`
	LinkStateCheckRetries  int `json:"link_state_check_retries,omitempty"`

	// Resolved by LoadConf.
	MAC      net.HardwareAddr `json:"-"`
	Allowed  []netip.Prefix   `json:"-"` // AllowedAddresses, masked
	Trunks   []int            `json:"-"`
	Mappings []flows.Mapping  `json:"-"` // Mesos port mappings, published by ovs-bridge itself

}

// Trunk is one entry of "trunk": a single VLAN or a range.
type Trunk struct {
	ID    *int `json:"id,omitempty"`
	MinID *int `json:"minID,omitempty"`
	MaxID *int `json:"maxID,omitempty"`
}

// envArgs are the CNI_ARGS keys understood (others are ignored).
type envArgs struct {
	types.CommonArgs
	MAC types.UnmarshallableString `json:"mac,omitempty"`
	// OvnPort is ovs-cni's CNI_ARGS key for the OVN logical port.
	OvnPort types.UnmarshallableString `json:"ovnPort,omitempty"`
}

// validBridgeName reports whether s is what Open vSwitch and the kernel
// accept for a bridge with an internal interface: 1 to 15 of [A-Za-z0-9_.-]
// (no '/', no whitespace). A loop, not a regexp: compiled at start-up, the
// two regexps these functions replace cost every ADD 3 ms and 200 KB
// (GODEBUG=inittrace=1, docs/performance.md).
func validBridgeName(s string) bool {
	if len(s) < 1 || len(s) > 15 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// validOVNPortName reports whether s is what an OVN logical port name may be
// here: at most 255 printable ASCII bytes, no whitespace (ovn-controller
// matches it byte for byte).
func validOVNPortName(s string) bool {
	if len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '!' || s[i] > '~' {
			return false
		}
	}
	return true
}

func invalid(format string, a ...any) error {
	return cnierr.Invalid(format, a...)
}

// LoadConf decodes stdin, applies defaults, then validates, in that order.
func LoadConf(stdin []byte, cniArgs string) (*NetConf, error) {
	n := &NetConf{}
	if err := cnicmd.Decode(stdin, n); err != nil {
		return nil, err
	}
	if err := ovsCNIEndpoint(n); err != nil {
		return nil, err
	}
	// Defaults.
	if n.PortSecurity == nil {
		on := true
		n.PortSecurity = &on
	}
	mac := ""
	if cniArgs != "" {
		e := envArgs{}
		if err := types.LoadArgs(cniArgs, &e); err != nil {
			return nil, invalid("CNI_ARGS: %v", err)
		}
		mac = string(e.MAC)
		if e.OvnPort != "" && n.OVNPort != "" && string(e.OvnPort) != n.OVNPort {
			return nil, invalid(`"ovnPort" %q and CNI_ARGS OvnPort %q disagree`, n.OVNPort, e.OvnPort)
		}
		if n.OVNPort == "" {
			n.OVNPort = string(e.OvnPort)
		}
	}
	if n.Args.CNI.MAC != "" {
		mac = n.Args.CNI.MAC
	}
	if n.RuntimeConfig.MAC != "" {
		mac = n.RuntimeConfig.MAC
	}
	// Validation.
	if n.Bridge == "" {
		return nil, invalid(`"bridge" is required`)
	}
	if !validBridgeName(n.Bridge) {
		return nil, invalid(`"bridge" %q: want 1-15 characters of letters, digits, '_', '.', '-'`, n.Bridge)
	}
	if err := n.ParseAccess(); err != nil {
		return nil, err
	}
	if err := validateTLS(n); err != nil {
		return nil, err
	}
	n.Endpoints.OVSDB.TLS = endpoint.TLS{Key: n.OVSDBKey, Cert: n.OVSDBCert, CA: n.OVSDBCA}
	if err := cnicmd.ValidateControl(n.VswitchdControl); err != nil {
		return nil, err
	}
	switch n.DatapathType {
	case "", "system", "netdev":
	default:
		return nil, invalid(`"datapathType" %q: want "system" or "netdev"`, n.DatapathType)
	}
	if n.MTU < 0 || (n.MTU > 0 && n.MTU < 68) || n.MTU > 65535 {
		return nil, invalid(`"mtu" %d: want 68-65535`, n.MTU)
	}
	if n.VLAN != nil && (*n.VLAN < 1 || *n.VLAN > 4094) {
		return nil, invalid(`"vlan" %d: want 1-4094`, *n.VLAN)
	}
	if n.VLAN != nil && len(n.Trunk) > 0 {
		return nil, invalid(`"vlan" and "trunk" are exclusive`)
	}
	if n.OFPortRequest != nil && (*n.OFPortRequest < 1 || *n.OFPortRequest > ovsdb.RequestedOFPortMax) {
		return nil, invalid(`"ofport_request" %d: want 1-%d`, *n.OFPortRequest, ovsdb.RequestedOFPortMax)
	}
	switch n.InterfaceType {
	case "", "system":
	default:
		// ovs-cni's "dpdk" and the like need a device this plugin does
		// not make: the port is the host end of a veth, a system interface.
		return nil, invalid(`"interface_type" %q: ovs-bridge attaches a veth, want "system"`, n.InterfaceType)
	}
	if !validOVNPortName(n.OVNPort) {
		return nil, invalid(`"ovnPort" %q: want up to 255 printable characters`, n.OVNPort)
	}
	allowed, err := parseAllowed(n.AllowedAddresses)
	if err != nil {
		return nil, err
	}
	n.Allowed = allowed
	trunks, err := expandTrunks(n.Trunk)
	if err != nil {
		return nil, err
	}
	n.Trunks = trunks
	if n.Mappings, err = hostport.ParseMappings(n.Args.Entries(), `args["org.apache.mesos"].network_info.port_mappings`); err != nil {
		return nil, err
	}
	if mac != "" {
		hw, err := net.ParseMAC(mac)
		if err != nil || len(hw) != 6 {
			return nil, invalid(`"mac" %q: not an Ethernet MAC address`, mac)
		}
		if hw[0]&1 == 1 {
			return nil, invalid(`"mac" %q: multicast address`, mac)
		}
		n.MAC = hw
	}
	return n, nil
}

// validateTLS: an ssl: "ovsdb" needs the three PEM files, as absolute
// paths (the plugin's working directory is the runtime's); the files are
// read when the command dials. Another endpoint takes none.
func validateTLS(n *NetConf) error {
	ssl := n.Endpoints.OVSDB.Network == "ssl"
	for _, f := range []struct{ key, path string }{{"ovsdbKey", n.OVSDBKey}, {"ovsdbCert", n.OVSDBCert}, {"ovsdbCA", n.OVSDBCA}} {
		switch {
		case ssl && f.path == "":
			return invalid(`"ovsdb" %q: ssl: needs "ovsdbKey", "ovsdbCert" and "ovsdbCA"; %q is missing`, n.OVSDB, f.key)
		case ssl && !filepath.IsAbs(f.path):
			return invalid(`%q %q: want an absolute path`, f.key, f.path)
		case !ssl && f.path != "":
			return invalid(`%q is for an ssl: "ovsdb", not %q`, f.key, n.OVSDB)
		}
	}
	return nil
}

// GCScope: ovs-bridge's GC considers the network's ports on its bridge.
func (n *NetConf) GCScope() (string, string, []types.GCAttachment) {
	return n.Name, n.Bridge, n.ValidAttachments
}

func loadConf(args *skel.CmdArgs) (*NetConf, error) { return LoadConf(args.StdinData, args.Args) }

// TLSBuild is ovs-bridge with the dialer of ssl: endpoints linked in
// (cmd/ovs-bridge-tls, installed next to ovs-bridge): a command whose
// "ovsdb" is ssl: runs there (cnicmd.HandOffTLS).
const TLSBuild = "ovs-bridge-tls"

// handOffTLS runs the command in TLSBuild when conf's "ovsdb" is ssl: and
// this binary does not dial it; it reports whether it did, and the
// command's error.
func handOffTLS(args *skel.CmdArgs, conf *NetConf) (bool, error) {
	return cnicmd.HandOffTLS(args, conf.Endpoints.OVSDB, TLSBuild)
}

// ovsCNIEndpoint resolves ovs-cni's "socket_file" (and the one of the file
// "configuration_path" names) into n.OVSDB: a path is unix:PATH, the
// unix:/tcp:/ssl: forms are taken as they are. Given with a different
// "ovsdb", it is code 7 naming both.
func ovsCNIEndpoint(n *NetConf) error {
	socket, key := n.SocketFile, `"socket_file"`
	if socket == "" && n.ConfigurationPath != "" {
		raw, err := os.ReadFile(n.ConfigurationPath)
		if err != nil {
			return invalid(`"configuration_path" %q: %v`, n.ConfigurationPath, err)
		}
		var file struct {
			SocketFile string `json:"socket_file"`
		}
		if err := json.Unmarshal(raw, &file); err != nil {
			return invalid(`"configuration_path" %q: %v`, n.ConfigurationPath, err)
		}
		socket, key = file.SocketFile, fmt.Sprintf(`"socket_file" of "configuration_path" %q`, n.ConfigurationPath)
	}
	if socket == "" {
		return nil
	}
	ep := socket
	if !strings.HasPrefix(ep, "unix:") && !strings.HasPrefix(ep, "tcp:") && !strings.HasPrefix(ep, "ssl:") {
		ep = "unix:" + ep
	}
	if n.OVSDB != "" && n.OVSDB != ep {
		return invalid(`%s %q and "ovsdb" %q disagree`, key, socket, n.OVSDB)
	}
	n.OVSDB = ep
	return nil
}

// parseAllowed checks "allowedAddresses": unicast CIDRs, IPv6 ones single
// addresses (port security matches neighbour discovery targets exactly),
// none of length 0 ("portSecurity": false is the way to allow everything).
func parseAllowed(cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, invalid(`"allowedAddresses"[%d] %q: want a CIDR or an address`, i, s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		p = p.Masked()
		a := p.Addr()
		switch {
		case a.Zone() != "" || a.Is4In6():
			return nil, invalid(`"allowedAddresses"[%d] %q: want a plain IPv4 or IPv6 CIDR`, i, s)
		case p.Bits() == 0:
			return nil, invalid(`"allowedAddresses"[%d] %q: a /0 allows every source; set "portSecurity": false instead`, i, s)
		case a.IsMulticast() || a.IsUnspecified() || a.IsLoopback() || (a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255})):
			return nil, invalid(`"allowedAddresses"[%d] %q: not a unicast source`, i, s)
		case a.Is6() && !p.IsSingleIP():
			return nil, invalid(`"allowedAddresses"[%d] %q: IPv6 entries are single addresses (/128)`, i, s)
		}
		out = append(out, p)
	}
	return out, nil
}

func expandTrunks(ts []Trunk) ([]int, error) {
	var seen [4095]bool
	var out []int
	add := func(id int) error {
		if id < 1 || id > 4094 {
			return invalid(`"trunk" VLAN %d: want 1-4094`, id)
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
		return nil
	}
	for i, t := range ts {
		switch {
		case t.ID != nil && t.MinID == nil && t.MaxID == nil:
			if err := add(*t.ID); err != nil {
				return nil, err
			}
		case t.ID == nil && t.MinID != nil && t.MaxID != nil:
			if *t.MinID > *t.MaxID {
				return nil, invalid(`"trunk"[%d]: minID %d > maxID %d`, i, *t.MinID, *t.MaxID)
			}
			if *t.MinID < 1 || *t.MaxID > 4094 {
				return nil, invalid(`"trunk"[%d]: range %d-%d outside 1-4094`, i, *t.MinID, *t.MaxID)
			}
			// Every range is checked; once all VLANs are in, none adds any.
			for id := *t.MinID; id <= *t.MaxID && len(out) < 4094; id++ {
				_ = add(id)
			}
		default:
			return nil, invalid(`"trunk"[%d]: want {"id":N} or {"minID":A,"maxID":B}`, i)
		}
	}
	return out, nil
}
