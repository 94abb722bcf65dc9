// Command ovs-bridge is a CNI plugin that connects containers to an Open
// vSwitch bridge; see package bridge.
package main

import "github.com/ovsflow/ovs-cni/pkg/bridge"

func main() { bridge.Main("ovs-bridge") }
