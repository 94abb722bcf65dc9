package multinode

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/test/framework"
)

// The tests of this file restart or kill a node; go test runs them last.

// rebuildTimeout is a hang guard, not a speed claim: after ovs-vswitchd and
// ovsdb-server restart, or a node's reboot, every hostPort of the node must
// answer again, rebuilt without a CNI call. How long it took is a figure the
// test prints (each harness exec alone takes seconds on a loaded machine).
const rebuildTimeout = 60 * time.Second

// n1Servers are the pods whose host ports the tests of this file follow on
// n1: a1 (a client), h1 (hostPort 8080) and w1 (hostPort 8081).
func n1Servers() []podSpec {
	n1 := nodes[0].Name
	return []podSpec{{n1, "a1", nil}, {n1, "h1", []string{"8080:80"}}, {n1, "w1", []string{"8081:80"}}}
}

// n1HostPorts: every hostPort of n1 from the Docker host (IPv4 and IPv6)
// and from n2.
func n1HostPorts(h1, w1 pod) []call {
	n1, n2 := nodes[0], nodes[1]
	return []call{
		{From: fromHost{}, To: n1.IPv4, Port: 8080, Server: h1.Name},
		{From: fromHost{}, To: n1.IPv6, Port: 8080, Server: h1.Name},
		{From: fromHost{}, To: n1.IPv4, Port: 8081, Server: w1.Name},
		{From: fromHost{}, To: n1.IPv6, Port: 8081, Server: w1.Name},
		{From: fromNode(n2), To: n1.IPv4, Port: 8080, Server: h1.Name},
	}
}

// answerWithin waits until every call answers (rebuildTimeout is the hang
// guard) and prints how long that took.
func answerWithin(t *testing.T, calls []call) {
	t.Helper()
	start := time.Now()
	if err := framework.Wait(rebuildTimeout, func() error { return allAnswer(calls) }); err != nil {
		t.Fatal(err)
	}
	t.Logf("every hostPort answered after %v", time.Since(start).Round(time.Millisecond))
}

var attachmentsRE = regexp.MustCompile(`reconcile: attachments=[1-9]`)

// reconcilePasses is the reconcile container's log of its passes on a node.
func reconcilePasses(t *testing.T, nodeName string) []string {
	t.Helper()
	out, err := run(nodeName, "cat", "/var/log/oid/reconcile.log")
	if err != nil {
		t.Fatal(err)
	}
	var passes []string
	for _, l := range lines(out) {
		if strings.Contains(l, "reconcile: attachments=") {
			passes = append(passes, l)
		}
	}
	return passes
}

// TestHostPortsComeBackAfterOVSRestart: ovs-vswitchd and ovsdb-server of a
// node killed and started again, under running pods: the reconcile
// container rebuilds the flows, every hostPort answers again (how soon is printed),
// with no CNI call (the node's ports and allocations as they were), and pod
// to pod traffic flows again.
func TestHostPortsComeBackAfterOVSRestart(t *testing.T) {
	needNodes(t)
	leaveNodesClean(t)
	n1, n2 := nodes[0], nodes[1]
	p := runPods(t, append(n1Servers(), podSpec{n2.Name, "a2", nil})...)
	a1, h1, w1, a2 := p[0], p[1], p[2], p[3]
	ports := n1HostPorts(h1, w1)
	if err := allAnswer(ports); err != nil {
		t.Fatalf("before the restart: %v", err)
	}
	before := cniState(t, n1.Name)
	passes := len(reconcilePasses(t, n1.Name))

	if _, err := run(n1.Name, "node-init.sh", "ovs-restart"); err != nil {
		t.Fatalf("killing ovs-vswitchd and ovsdb-server of n1 and starting them again: %v", err)
	}
	t.Run("every hostPort answers again", func(t *testing.T) { answerWithin(t, ports) })
	t.Run("the reconcile container rebuilt the flows", func(t *testing.T) {
		framework.Eventually(t, time.Minute, "a reconcile pass with attachments after the restart", func() error {
			since := reconcilePasses(t, n1.Name)[passes:]
			for _, l := range since {
				if attachmentsRE.MatchString(l) {
					return nil
				}
			}
			return fmt.Errorf("passes since the restart: %q", since)
		})
	})
	t.Run("no CNI call", func(t *testing.T) {
		if after := cniState(t, n1.Name); after != before {
			t.Errorf("n1's ports and allocations changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})
	checkCalls(t, []call{
		{Name: "pod to pod again, a2 on n2 to a1 on n1 IPv4", From: fromPod(a2), To: a1.IPv4, Port: 80, Server: a1.Name, Peer: true},
		{Name: "pod to pod again, a1 on n1 to a2 on n2 IPv6", From: fromPod(a1), To: a2.IPv6, Port: 80, Server: a2.Name, Peer: true},
	})
}

// TestNodeRebootedByDockerRestart: a node restarted (docker restart) boots
// again (OVS from its database, node prep, containerd, install-cni,
// reconcile); its pods died with it and removing them (CNI DEL) leaves
// nothing; new pods' hostPorts answer and pod to pod traffic flows.
func TestNodeRebootedByDockerRestart(t *testing.T) {
	needNodes(t)
	leaveNodesClean(t)
	n1, n2 := nodes[0], nodes[1]
	a2 := runPods(t, append(n1Servers(), podSpec{n2.Name, "a2", nil})...)[3]

	if err := docker("restart", container(n1.Name)); err != nil {
		t.Fatal(err)
	}
	waitBooted(t, n1.Name)
	t.Run("OVS came back from its database", func(t *testing.T) {
		out, err := run(n1.Name, "ovs-vsctl", "list-ports", "br0")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains("\n"+out, "\neth0\n") {
			t.Errorf("br0's ports: %q, want the uplink eth0 among them", lines(out))
		}
	})
	t.Run("the dead pods removed (CNI DEL) leave nothing", func(t *testing.T) {
		out, err := run(n1.Name, "crictl", "pods", "-q", "--state", "NotReady")
		if err != nil {
			t.Fatal(err)
		}
		if got := len(lines(out)); got != 3 {
			t.Errorf("n1's pods not ready after the reboot: %d, want its 3 pods", got)
		}
		if _, err := run(n1.Name, "oid-pod", "rm", "--all"); err != nil {
			t.Fatal(err)
		}
		if err := clean(n1.Name); err != nil {
			t.Error(err)
		}
	})
	p := runPods(t, n1Servers()...)
	a1, h1, w1 := p[0], p[1], p[2]
	t.Run("every hostPort of the new pods answers", func(t *testing.T) { answerWithin(t, n1HostPorts(h1, w1)) })
	checkCalls(t, []call{
		{Name: "pod to pod, a1 on n1 to a2 on n2 IPv4", From: fromPod(a1), To: a2.IPv4, Port: 80, Server: a2.Name, Peer: true},
		{Name: "pod to pod, a2 on n2 to a1 on n1 IPv6", From: fromPod(a2), To: a1.IPv6, Port: 80, Server: a1.Name, Peer: true},
	})
}

// TestNodeKilledWhileAddingPods: a node killed (docker kill) while its
// runtime adds pods: the other node keeps serving its host ports; started
// again, the killed node boots, deleting its pods (CNI DEL of each, some
// of them half added) leaves nothing, and a new pod there reaches the other
// node's pods.
func TestNodeKilledWhileAddingPods(t *testing.T) {
	needNodes(t)
	leaveNodesClean(t)
	n1, n2 := nodes[0], nodes[1]
	p := runPods(t, n1Servers()...)
	a1, h1, w1 := p[0], p[1], p[2]

	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	adder := exec.CommandContext(ctx, harness, "exec", n2.Name, "bash", "-c",
		"for i in 1 2 3 4 5 6 7 8; do oid-pod run k$i 909$i:80; done")
	if err := adder.Start(); err != nil {
		t.Fatalf("adding pods on n2: %v", err)
	}
	// Runs before leaveNodesClean's: n2 running again, even if the test stops early.
	t.Cleanup(func() {
		if err := docker("start", container(n2.Name)); err != nil {
			t.Error(err)
			return
		}
		if err := framework.Wait(bootTimeout, func() error {
			_, err := run(n2.Name, "test", "-f", "/run/oid/ready")
			return err
		}); err != nil {
			t.Errorf("n2 booted again: %v", err)
		}
	})
	var adding int
	framework.Eventually(t, time.Minute, "n2 adding its first pod", func() error {
		out, err := run(n2.Name, "crictl", "pods", "-q", "--name", "^k")
		if adding = len(lines(out)); err == nil && adding == 0 {
			err = errors.New("no pod sandbox yet")
		}
		return err
	})
	if err := docker("kill", container(n2.Name)); err != nil {
		t.Fatal(err)
	}
	t.Logf("n2 killed with %d pods being added so far", adding)
	_ = adder.Wait() // ends with n2: an error, and that is the point

	checkCalls(t, []call{
		{Name: "n1 keeps serving, the Docker host to h1", From: fromHost{}, To: n1.IPv4, Port: 8080, Server: h1.Name},
		{Name: "n1 keeps serving, the Docker host to w1 over IPv6", From: fromHost{}, To: n1.IPv6, Port: 8081, Server: w1.Name},
		{Name: "n1 keeps serving, hairpin from pod a1", From: fromPod(a1), To: n1.IPv4, Port: 8081, Server: w1.Name},
	})
	if err := docker("start", container(n2.Name)); err != nil {
		t.Fatal(err)
	}
	waitBooted(t, n2.Name)
	t.Run("deleting n2's pods (CNI DEL of each) leaves nothing", func(t *testing.T) {
		if _, err := run(n2.Name, "oid-pod", "rm", "--all"); err != nil {
			t.Fatal(err)
		}
		if err := clean(n2.Name); err != nil {
			t.Error(err)
		}
	})
	a2 := runPod(t, n2.Name, "a2")
	checkCalls(t, []call{
		{Name: "a new pod a2 on n2 to a1 on n1, IPv4", From: fromPod(a2), To: a1.IPv4, Port: 80, Server: a1.Name, Peer: true},
	})
}
