package ovsdb

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovsflow/ovs-cni/pkg/jsonrpc"
)

// TestCallAfterTimeout: a transaction that outlives its context (here a
// wait that never holds, as ovs-bridge's ADD can run out of time inside
// WaitOFPort) breaks the connection; what the client does next, such as
// the ADD's rollback (FindPorts, DetachPorts), runs on a new one and
// removes the port.
func TestCallAfterTimeout(t *testing.T) {
	requireOVS(t)
	cli := dial(t)
	br := newBridge(t, cli)
	a := Attachment{ContainerID: "timedout", IfName: "eth0"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	veth := newVeth(t)
	if _, err := cli.AttachPort(ctx, br.UUID, PortSpec{Name: veth, ExternalIDs: attachmentIDs(a, br.Name, "02:00:00:00:00:01")}); err != nil {
		t.Fatal(err)
	}

	stalled, cancelStalled := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelStalled()
	never := waitOp(tableBridge, byUUID(br.UUID), []string{"name"}, untilEqual, 10000, ovsdb.Row{"name": br.Name + "-never"})
	_, err := cli.transact(stalled, never)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("stalled transaction: got %v, want ErrUnreachable", err)
	}
	if !errors.Is(cli.c.Err(), os.ErrDeadlineExceeded) {
		t.Fatalf("after the stalled transaction: got connection error %v, want it broken by its deadline", cli.c.Err())
	}
	broken := cli.c

	ports, err := cli.FindPorts(ctx, a)
	if err != nil || len(ports) != 1 {
		t.Fatalf("FindPorts after the timeout: got %d ports, %v; want 1, nil", len(ports), err)
	}
	if err := cli.DetachPorts(ctx, ports[0].Port.UUID); err != nil {
		t.Fatalf("DetachPorts after the timeout: %v", err)
	}
	if ports, err := cli.FindPorts(ctx, a); err != nil || len(ports) != 0 {
		t.Errorf("after the rollback: got %d ports, %v; want none", len(ports), err)
	}
	if cli.c == broken {
		t.Errorf("the client kept the broken connection")
	}
	if err := broken.Call(ctx, "echo", []string{}, nil); !errors.Is(err, jsonrpc.ErrBroken) {
		t.Errorf("a call on the old connection: got %v, want ErrBroken", err)
	}
}
