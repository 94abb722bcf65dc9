package e2e

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/ovsdb"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// Requested ofports against the real ovsdb-server: ChooseOFPort skips the
// numbers other interfaces request or hold, and of two inserts requesting
// the same number the second fails with an *OFPortTakenError and leaves
// nothing behind.
func TestRequestedOFPort(t *testing.T) {
	requireSandbox(t)
	br := framework.NewBridge(t, "e2ebr")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := ovsdb.Dial(ctx, ovsdbEP)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	b, err := cli.Bridge(ctx, br)
	if err != nil || b == nil {
		t.Fatalf("bridge %s: %v", br, err)
	}
	// An internal port holding 40000 (requested) and one requesting 40001.
	held, requested := uniq("rq"), uniq("rq")
	framework.Vsctl(t, "add-port", br, held, "--", "set", "Interface", held, "type=internal", "ofport_request=40000")
	framework.Vsctl(t, "--no-wait", "add-port", br, requested, "--", "set", "Interface", requested, "type=internal", "ofport_request=40001")
	if got, err := cli.ChooseOFPort(ctx, 40000); err != nil || got != 40002 {
		t.Fatalf("ChooseOFPort(40000): got %d, %v; want 40002", got, err)
	}
	if got, err := cli.ChooseOFPort(ctx, ovsdb.RequestedOFPortMax); err != nil || got != ovsdb.RequestedOFPortMax {
		t.Fatalf("ChooseOFPort(max): got %d, %v; want %d", got, err, ovsdb.RequestedOFPortMax)
	}

	// Two ports without devices (the bridge's deletion removes them).
	first, second := uniq("rq"), uniq("rq")
	if _, err := cli.AttachPort(ctx, b.UUID, ovsdb.PortSpec{Name: first, OFPort: 40002, ExternalIDs: map[string]string{}}); err != nil {
		t.Fatal(err)
	}
	_, err = cli.AttachPort(ctx, b.UUID, ovsdb.PortSpec{Name: second, OFPort: 40002, ExternalIDs: map[string]string{}})
	var taken *ovsdb.OFPortTakenError
	if !errors.As(err, &taken) || taken.OFPort != 40002 {
		t.Fatalf("second AttachPort of ofport 40002: got %v, want an *OFPortTakenError", err)
	}
	if out, err := run("ovs-vsctl", "--db="+ovsdbAddr, "--bare", "--columns=name", "find", "Interface", "name="+second); err != nil || out != "" {
		t.Errorf("the losing insert left interface %q: %q, %v", second, out, err)
	}
	if req := framework.Vsctl(t, "get", "Interface", first, "ofport_request"); req != strconv.Itoa(40002) {
		t.Errorf("ofport_request of %s: got %s, want 40002", first, req)
	}
}
