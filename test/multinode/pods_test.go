package multinode

import (
	"fmt"
	"testing"
)

// TestPodToPodAcrossNodes: a pod on each node (CNI ADD through the node's
// CRI) reaches the pods of the other nodes over TCP, IPv4 and IPv6, routed
// by the nodes, and the server sees the client pod's own address.
func TestPodToPodAcrossNodes(t *testing.T) {
	needNodes(t)
	leaveNodesClean(t)
	var specs []podSpec
	for i, n := range nodes {
		specs = append(specs, podSpec{Node: n.Name, Name: fmt.Sprintf("a%d", i+1)})
	}
	pods := runPods(t, specs...)
	a1, a2 := pods[0], pods[1]
	calls := []call{
		{Name: "a1 on n1 to a2 on n2, IPv4", From: fromPod(a1), To: a2.IPv4, Port: 80, Server: a2.Name, Peer: true},
		{Name: "a1 on n1 to a2 on n2, IPv6", From: fromPod(a1), To: a2.IPv6, Port: 80, Server: a2.Name, Peer: true},
		{Name: "a2 on n2 to a1 on n1, IPv4", From: fromPod(a2), To: a1.IPv4, Port: 80, Server: a1.Name, Peer: true},
		{Name: "a2 on n2 to a1 on n1, IPv6", From: fromPod(a2), To: a1.IPv6, Port: 80, Server: a1.Name, Peer: true},
	}
	for _, p := range pods[2:] {
		calls = append(calls,
			call{Name: fmt.Sprintf("a1 on n1 to %s on %s, IPv4", p.Name, p.Node), From: fromPod(a1), To: p.IPv4, Port: 80, Server: p.Name, Peer: true},
			call{Name: fmt.Sprintf("%s on %s to a2 on n2, IPv6", p.Name, p.Node), From: fromPod(p), To: a2.IPv6, Port: 80, Server: a2.Name, Peer: true})
	}
	checkCalls(t, calls)
}
