// Package ofctl is the small executor for pkg/flows: it applies a bundle of
// flows atomically, deletes and dumps flows by cookie, and flushes conntrack
// entries on the bridge's management socket. The hot path (bundles and
// deletes, on every ADD and DEL) speaks OpenFlow itself through
// pkg/openflow, about 0.5 ms against 4-5 ms for an ovs-ofctl exec;
// conntrack flushes go through ovs-vswitchd's control socket (pkg/unixctl);
// dumps (CHECK, reconcile) and any bundle pkg/openflow does not compile go
// through ovs-ofctl.
//
// Every argument it passes is rendered by pkg/flows from typed values
// (addresses, ports, MACs, cookies); no string from a network config reaches
// the command line. It always passes --no-names (name lookups cost about 10 ms
// per call) and OpenFlow 1.4 (bundles need it).
package ofctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/ovsflow/ovs-cni/pkg/flows"
	"github.com/ovsflow/ovs-cni/pkg/openflow"
	"github.com/ovsflow/ovs-cni/pkg/unixctl"
)

// Bridge is one bridge's OpenFlow endpoint, such as "unix:/run/openvswitch/br0.mgmt".
type Bridge struct {
	Target string
}

// Timeout bounds every ovs-ofctl call: ovs-vswitchd answers no OpenFlow
// request while ovsdb-server is down, and a plugin must not hang.
const Timeout = 10 * time.Second

// ErrTimeout says that ovs-vswitchd did not answer within Timeout.
var ErrTimeout = errors.New("ovs-vswitchd did not answer on OpenFlow")

func (b Bridge) run(ctx context.Context, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	full := append([]string{"--no-names", "-O", "OpenFlow14"}, args...)
	cmd := exec.CommandContext(ctx, "ovs-ofctl", full...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		verb := args[0]
		for _, a := range args {
			if !strings.HasPrefix(a, "-") {
				verb = a
				break
			}
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("ovs-ofctl %s on %s: %w within %s", verb, b.Target, ErrTimeout, Timeout)
		}
		return "", fmt.Errorf("ovs-ofctl %s on %s: %w: %s", verb, b.Target, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ApplyBundle applies the text of an add-flows file as one atomic bundle.
func (b Bridge) ApplyBundle(ctx context.Context, bundle string) error {
	err := openflow.Apply(ctx, b.Target, bundle)
	if errors.Is(err, openflow.ErrUnsupported) {
		_, err = b.run(ctx, bundle, "--bundle", "add-flows", b.Target, "-")
		return err
	}
	return Native(err)
}

// StartRevalidation registers, before a flow change, a wait for the
// datapath's flow cache to follow it (see openflow.StartRevalidation).
func (b Bridge) StartRevalidation(ctx context.Context) (*openflow.Revalidation, error) {
	return openflow.StartRevalidation(ctx, b.Target)
}

// DeleteCookie removes every flow with exactly this cookie, in every table.
func (b Bridge) DeleteCookie(ctx context.Context, c flows.Cookie) error {
	return Native(openflow.DeleteCookie(ctx, b.Target, uint64(c), ^uint64(0)))
}

// DeleteAttachment removes every flow of the attachment of c, any kind, in
// one masked delete.
func (b Bridge) DeleteAttachment(ctx context.Context, c flows.Cookie) error {
	v, m := c.Attachment()
	return Native(openflow.DeleteCookie(ctx, b.Target, uint64(v), uint64(m)))
}

// Native gives pkg/openflow's timeout this package's ErrTimeout, which the
// plugins map to CNI code 11.
func Native(err error) error {
	if errors.Is(err, openflow.ErrTimeout) {
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	return err
}

// DumpCookie returns the flows with exactly this cookie, without statistics.
func (b Bridge) DumpCookie(ctx context.Context, c flows.Cookie) ([]string, error) {
	return b.dump(ctx, c.Match())
}

// DumpOurs returns every flow carrying the suite tag.
func (b Bridge) DumpOurs(ctx context.Context) ([]string, error) {
	return b.dump(ctx, flows.SuiteMatch())
}

func (b Bridge) dump(ctx context.Context, match string) ([]string, error) {
	out, err := b.run(ctx, "", "--no-stats", "dump-flows", b.Target, match)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "OFPST_FLOW") && !strings.HasPrefix(l, "NXST_FLOW") {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// FlushConntrack removes the conntrack entries of one original tuple in
// zone, through ovs-vswitchd's control socket next to a unix: target (no
// exec); for a tcp: target (an ovs-vswitchd elsewhere) through ovs-ofctl.
func (b Bridge) FlushConntrack(ctx context.Context, zone uint16, tuple string) error {
	cctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	err := unixctl.FlushConntrack(cctx, b.Target, zone, tuple)
	switch {
	case errors.Is(err, unixctl.ErrNoSocket):
		_, err = b.run(ctx, "", "ct-flush", b.Target, fmt.Sprintf("zone=%d", zone), tuple)
		return err
	case err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w: flushing conntrack on %s: %v", ErrTimeout, b.Target, err)
	}
	return err
}
