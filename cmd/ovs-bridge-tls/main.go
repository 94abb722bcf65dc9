// Command ovs-bridge-tls is ovs-bridge with the dialer of ssl: OVSDB
// endpoints linked in: ovs-bridge runs a command whose "ovsdb" is ssl:
// here, so that the plugin most configs run does not carry crypto/tls
// (bridge.TLSBuild). It may also be named as the plugin type itself.
package main

import (
	"github.com/ovsflow/ovs-cni/pkg/bridge"
	_ "github.com/ovsflow/ovs-cni/pkg/endpoint/tlsdial" // an ssl: "ovsdb"
)

func main() { bridge.Main(bridge.TLSBuild) }
