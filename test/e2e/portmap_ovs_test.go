package e2e

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// ctFlushRefuser stands for an ovs-vswitchd older than 3.1 in front of the
// real one: a unix socket that relays OpenFlow to upstream (a unix:
// target), with every NXT_CT_FLUSH turned into a Nicira message of a
// subtype no ovs-vswitchd knows, which upstream refuses as such an
// ovs-vswitchd refuses NXT_CT_FLUSH, in order with its other replies. It
// returns its own target and the count of flushes it turned.
func ctFlushRefuser(t *testing.T, upstream string) (string, *atomic.Int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.mgmt")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var refused atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go relayOpenFlow(c, strings.TrimPrefix(upstream, "unix:"), &refused)
		}
	}()
	return "unix:" + path, &refused
}

// Nicira subtypes: NXT_CT_FLUSH, and one that no ovs-vswitchd has.
const (
	nxtCTFlush = 32
	nxtUnknown = 0x7fff
)

func relayOpenFlow(c net.Conn, upstream string, refused *atomic.Int64) {
	defer c.Close()
	up, err := net.Dial("unix", upstream)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { io.Copy(c, up); c.Close() }()
	for {
		m, err := readOpenFlow(c)
		if err != nil {
			return
		}
		// OFPT_EXPERIMENTER (4), vendor NX (0x2320).
		if m[1] == 4 && len(m) >= 16 && binary.BigEndian.Uint32(m[8:]) == 0x2320 && binary.BigEndian.Uint32(m[12:]) == nxtCTFlush {
			refused.Add(1)
			binary.BigEndian.PutUint32(m[12:], nxtUnknown)
		}
		if _, err := up.Write(m); err != nil {
			return
		}
	}
}

// readOpenFlow reads one OpenFlow message.
func readOpenFlow(r io.Reader) ([]byte, error) {
	h := make([]byte, 8)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(h[2:]))
	if n < 8 {
		return nil, io.ErrUnexpectedEOF
	}
	m := append(h, make([]byte, n-8)...)
	_, err := io.ReadFull(r, m[8:])
	return m, err
}

// An ovs-vswitchd without NXT_CT_FLUSH (before 3.1) refuses the conntrack
// flush of a UDP or SCTP mapping: ADD still publishes it (the flows are in;
// stale entries expire), and DEL still withdraws it. The refuser proves the
// flushes were sent and refused.
func TestPortmapWithoutConntrackFlush(t *testing.T) {
	requireSandbox(t)
	h := framework.NewOVSHost(t)
	target, refused := ctFlushRefuser(t, h.OFTarget())
	n := h.PortmapList(t, "1.0.0", "pmold", map[string]any{"openflow": target, "vswitchdControl": vswitchdCtl(t)})
	a := framework.NewContainer(t)
	caps := mappings(pm(5360, 53, "udp", ""), pm(5361, 54, "sctp", ""))
	n.MustAdd(t, a, "eth0", caps)
	t.Cleanup(func() { n.Del(a, "eth0", nil) })
	if refused.Load() == 0 {
		t.Fatalf("ADD sent no conntrack flush to refuse")
	}
	a.ServeUDP(t, 53)
	expect(t, h.Outside.NS, "udp", hp(nodeV4, 5360), a, outsideV4)
	expect(t, h.Outside.NS, "udp", hp(nodeV6, 5360), a, outsideV6)
	if err := n.Check(a, "eth0", caps); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	before := refused.Load()
	if err := n.Del(a, "eth0", nil); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if refused.Load() == before {
		t.Errorf("DEL sent no conntrack flush to refuse")
	}
	if fl := h.FlowsOf(t, flows.AttachmentCookie(a.ID, "eth0")); len(fl) != 0 {
		t.Errorf("after DEL: flows %v", fl)
	}
}
