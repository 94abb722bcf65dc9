package multinode

import (
	"strings"
	"testing"
)

// TestHostPortReachedFromEveryKindOfClient: a pod's hostPort on n1 (8080 ->
// 80) answers from another node's own netns (IPv4 and IPv6), from a pod on
// another node, from the Docker host (IPv4 and IPv6), the pod seeing each
// client's own address; and by hairpin from a pod on n1 (IPv4 and IPv6)
// and from n1's own netns.
func TestHostPortReachedFromEveryKindOfClient(t *testing.T) {
	needNodes(t)
	leaveNodesClean(t)
	n1, n2 := nodes[0], nodes[1]
	p := runPods(t, podSpec{n1.Name, "a1", nil}, podSpec{n2.Name, "a2", nil}, podSpec{n1.Name, "h1", []string{"8080:80"}})
	a1, a2, h1 := p[0], p[1], p[2]
	checkCalls(t, []call{
		{Name: "from n2's own netns, IPv4", From: fromNode(n2), To: n1.IPv4, Port: 8080, Server: h1.Name, Peer: true},
		{Name: "from n2's own netns, IPv6", From: fromNode(n2), To: n1.IPv6, Port: 8080, Server: h1.Name, Peer: true},
		{Name: "from pod a2 on n2", From: fromPod(a2), To: n1.IPv4, Port: 8080, Server: h1.Name, Peer: true},
		{Name: "from the Docker host, IPv4", From: fromHost{}, To: n1.IPv4, Port: 8080, Server: h1.Name, Peer: true},
		{Name: "from the Docker host, IPv6", From: fromHost{}, To: n1.IPv6, Port: 8080, Server: h1.Name, Peer: true},
		{Name: "hairpin from pod a1 on n1, IPv4", From: fromPod(a1), To: n1.IPv4, Port: 8080, Server: h1.Name},
		{Name: "hairpin from pod a1 on n1, IPv6", From: fromPod(a1), To: n1.IPv6, Port: 8080, Server: h1.Name},
		{Name: "from n1's own netns", From: fromNode(n1), To: n1.IPv4, Port: 8080, Server: h1.Name},
	})
}

// TestSameHostPortOnEachNode: hostPort 8081 taken on n1 and on n2 by a pod
// of each; each node's port is its own pod's, from the Docker host and
// from the other node (IPv4 and IPv6).
func TestSameHostPortOnEachNode(t *testing.T) {
	needNodes(t)
	leaveNodesClean(t)
	n1, n2 := nodes[0], nodes[1]
	p := runPods(t, podSpec{n1.Name, "w1", []string{"8081:80"}}, podSpec{n2.Name, "w2", []string{"8081:80"}})
	w1, w2 := p[0], p[1]
	checkCalls(t, []call{
		{Name: "the Docker host to n1 is w1", From: fromHost{}, To: n1.IPv4, Port: 8081, Server: w1.Name, Peer: true},
		{Name: "the Docker host to n2 is w2", From: fromHost{}, To: n2.IPv4, Port: 8081, Server: w2.Name, Peer: true},
		{Name: "n2 to n1 is w1", From: fromNode(n2), To: n1.IPv4, Port: 8081, Server: w1.Name, Peer: true},
		{Name: "n1 to n2 over IPv6 is w2", From: fromNode(n1), To: n2.IPv6, Port: 8081, Server: w2.Name, Peer: true},
	})
}

// TestHostPortConflictRefused: a pod asking for a hostPort another pod of
// its node holds is refused by the runtime's CNI ADD, which leaves the
// node's ports and allocations as they were and the holder serving; the
// same hostPort on another node is free, and that node's other host
// ports are unaffected.
func TestHostPortConflictRefused(t *testing.T) {
	needNodes(t)
	leaveNodesClean(t)
	n1, n2 := nodes[0], nodes[1]
	p := runPods(t, podSpec{n1.Name, "h1", []string{"8080:80"}}, podSpec{n2.Name, "w2", []string{"8081:80"}})
	h1, w2 := p[0], p[1]

	before := cniState(t, n1.Name)
	t.Run("refused by the runtime's ADD", func(t *testing.T) {
		_, err := startPod(n1.Name, "c1", "8080:80")
		if err == nil || !strings.Contains(err.Error(), "host port conflict") {
			t.Errorf("pod c1 on n1 with hostPort 8080 (h1's): %v, want a host port conflict", err)
		}
	})
	t.Run("the refused ADD left the node as it was", func(t *testing.T) {
		if after := cniState(t, n1.Name); after != before {
			t.Errorf("n1's ports and allocations changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
	t.Run("the holder still serves", func(t *testing.T) {
		if err := (call{From: fromHost{}, To: n1.IPv4, Port: 8080, Server: h1.Name}).check(); err != nil {
			t.Error(err)
		}
	})
	c2 := runPod(t, n2.Name, "c2", "8080:80")
	checkCalls(t, []call{
		{Name: "the same hostPort on n2 is c2", From: fromHost{}, To: n2.IPv4, Port: 8080, Server: c2.Name, Peer: true},
		{Name: "n2's other hostPort still w2", From: fromHost{}, To: n2.IPv4, Port: 8081, Server: w2.Name},
	})
}
