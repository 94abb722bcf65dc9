package e2e

// Every test of this package is in one of two lists: kernelDatapath, whose
// outcome depends on what the datapath does (frames forwarded or dropped,
// conntrack and NAT, fragments, meters and QoS on traffic, ovs-vswitchd
// restarts under the kernel datapath's flows, datapath state read back),
// and anyDatapath, which assert on OVSDB rows, ovs-vswitchd's OpenFlow
// tables, CNI results and IPAM stores alone, the same on either datapath.
//
// The machine's run (netdev) runs both. The QEMU guest (hack/ovs-vm.sh test
// e2e, on "system" bridges, ten times slower under software emulation)
// runs kernelDatapath only: test/e2e/tools/kernel-tests turns it into the
// guest's -test.run, and its unit test fails when a name here is no test of
// this package, or a test of this package is in neither list (a new test
// must be placed). A traffic test goes in kernelDatapath unless its traffic
// is only the control of something decided before any frame moves.
// `hack/ovs-vm.sh test e2e-all` runs the whole package in the guest.

// datapathGroup is tests that share one reason for their list.
type datapathGroup struct {
	why   string
	tests []string
}

var kernelDatapath = []datapathGroup{
	{"pods of two nodes on two subnets through a Geneve or VXLAN tunnel: the datapath's tunnel ports, a forged outer source dropped, ofproto/trace into and out of the tunnel", []string{
		"TestOverlayAcrossSubnets",
	}},
	{"frames through port security: spoofing, ARP and ND, DHCP, VRRP, VLAN hopping", []string{
		"TestPortSecurity", "TestAttackAllowedAddresses", "TestAttackVRRP", "TestVIPFailover",
		"TestAttackDHCPServerPorts", "TestAttackVLANHopping", "TestAttackRogueDHCP",
		"TestAttackDHCPClientUnicast", "TestAttackRogueRouter", "TestAttackLinkLocal",
		"TestAttackSpoofDuringAddDel", "TestAttackDHCPLeaseReconcile", "TestBusyOFPortCollision",
	}},
	{"fragments and ICMP errors: the datapath's reassembly, conntrack of related packets, path MTU", []string{
		"TestAttackFragments", "TestFragmentedUDP", "TestPortmapUDPFragments", "TestPortmapTCPFragments",
		"TestPortmapPathMTU", "TestPortmapICMPFromContainer", "TestPortmapPathMTUToClient",
	}},
	{"host ports: conntrack, NAT, zone limits and the datapath's flow cache, with traffic", []string{
		"TestPortmapDatapath", "TestPortmapStaleConntrack", "TestPortmapConflict", "TestPortmapManyMappings",
		"TestPortmapParallel", "TestPortmapVswitchdControl", "TestPortmapDelFlushesConntrack",
		"TestPortmapWithoutConntrackFlush", "TestAttackHostPortReplyMAC", "TestAttackHostPortVLANOverlap",
		"TestAttackVLANHostPort", "TestAttackConntrackFlood", "TestPortmapLocalhost", "TestAttackHostPortLoopback",
	}},
	{"host ports that must go dark when their flows go (the datapath's cached flows must follow)", []string{
		"TestSchemaOldRecord", "TestAgentUninstall",
	}},
	{"a sandbox's veth gone under its port (the kernel datapath drops the port, ofport -1), then its host port and meter taken again", []string{
		"TestOrphanDelReplayed", "TestDelOVSDBUnreachable", "TestOrphanForeignPluginFails",
	}},
	{"a Service's replies from a backend on the same bridge: conntrack in zone 64004, the node's DNAT", []string{
		"TestServiceBackendOnTheSameBridge",
	}},
	{"meters and QoS on traffic", []string{
		"TestBandwidthShapes", "TestAttackHostPortConnectionRate",
	}},
	{"counters read from the datapath: drop flows' packets, a zone's conntrack entries", []string{
		"TestMetricsScrape",
	}},
	{"ovs-vswitchd killed or restarted: the kernel datapath keeps its flows and ports meanwhile, flow-restore-wait", []string{
		"TestRestartKeepsTraffic", "TestReconcileAfterVswitchdRestart", "TestAttackRestartWindow",
		"TestAllowedAddressesAfterRestart", "TestBandwidthAfterVswitchdRestart", "TestBusyNode",
		"TestGatewayWithdrawnWithItsRange", "TestOneShotReconcileClearsRestoreWait",
	}},
	{"ovs-vswitchd started as at boot: the kernel datapath's per-CPU upcall dispatch loses every upcall (Open vSwitch 3.1.0)", []string{
		"TestUpcallsLostAtBoot",
	}},
	{"flow-restore-wait: reconcile and uninstall act on the bridges of the kernel datapath only (pkg/reconcile)", []string{
		"TestRestoreWaitOfOthersStays", "TestUninstallClearsRestoreWait",
	}},
	{"forwarding: ADD's kernel-datapath order (addresses once the port is in), VLANs, a created bridge, dhcp", []string{
		"TestBridgeConnectivity", "TestBridgeVLAN", "TestBridgeCreateBridge", "TestBridgeDHCP",
		"TestReAddOverTombstone",
	}},
	{"the node's own packets into the bridge: its ICMPv6 redirects to a pod, dropped by a base flow", []string{
		"TestNodeRedirectsDropped",
	}},
	{"ofproto/trace translates with the datapath's features", []string{
		"TestTraceVerdicts",
	}},
}

var anyDatapath = []datapathGroup{
	{"a DEL that leaves the veth to its netns: links, OVSDB rows and IPAM stores; no traffic", []string{
		"TestBridgeDelLeavesVethToNetns",
	}},
	{"admission: refused or serialised on OVSDB claims before anything is installed; traffic only as a control", []string{
		"TestAttackRuntimeMAC", "TestAttackNodeNetNS", "TestAttackAddressClaim", "TestAddressClaimConcurrent",
		"TestAttackAddressClaimPoisoning", "TestAllowedAddressesConcurrentConflict", "TestBusyCookieCollision",
		"TestBusyDHCPCookie", "TestBusyDHCPOFPort", "TestRequestedOFPort", "TestGatewayKeptForConcurrentAdd",
	}},
	{"config, validation and the CNI contract: codes, versions, STATUS, IPAM, TLS", []string{
		"TestBridgeBadConfig", "TestBandwidthBadInput", "TestBridgeVersions", "TestPortmapVersions",
		"TestOVSCNIConfig", "TestOVSCNIKeys", "TestOVSDBTLS", "TestBridgeStatus", "TestBridgeStatusSlowIPAM", "TestBridgeConfirmedRanges",
		"TestBridgeIPsRequestedTwiceAsMultusDoes", "TestBridgeIPAMHangs",
	}},
	{"an operator's first hour: messages, exit codes, node tools, the sandbox script, the quick start", []string{
		"TestOperatorNodeTools", "TestOperatorCheckCapArgs", "TestOperatorOtherNetNS", "TestOperatorPortmapWithoutOVSDB",
		"TestOperatorReconcileCount", "TestOperatorSandboxForeignNetNS", "TestOperatorTypos",
		"TestOperatorUnknownDatapath", "TestOperatorUnopenableBridge", "TestQuickStart",
	}},
	{"records and tables without traffic: OVSDB rows, ovs-vswitchd's flows and meters (CHECK, DEL, GC, sweeps)", []string{
		"TestBridgePortRecord", "TestBridgeCheck", "TestBridgeDel", "TestBridgeGC", "TestBridgeParallel",
		"TestBridgeCheckFlows", "TestBusyInFlight", "TestReconcilePastDeadEndpoint", "TestBusyGC",
		"TestBusyGCLeavesADDInFlight", "TestBusyPortmapDel", "TestDelTombstone", "TestOrphanKeepsLiveSandbox",
		"TestOrphanIPAMChanged", "TestMetricsScrapesDuringADDs", "TestBandwidthCheckDetectsRemoval",
		"TestBandwidthGC", "TestBandwidthParallel", "TestBandwidthMetersFollowAttachment",
		"TestAgentUninstallShaped",
	}},
	{"ovs-vswitchd stopped (SIGSTOP, a saturated node): commands wait within their budget, a DEL killed midway and run again; OVSDB rows and flows", []string{
		"TestBusyVswitchdWaited", "TestBusyVswitchdTimesOut", "TestBusyDelRetried",
	}},
}
