// Package ipam delegates to the network's IPAM plugin as the CNI
// specification has a plugin do (found by name in CNI_PATH, executed with
// this process's environment but its own CNI_COMMAND, the network config on
// stdin), and applies to the container interface, or checks there, what that
// plugin returned.
//
// It stands in for cni's pkg/invoke and the reference plugins' pkg/ipam and
// pkg/ip, which ovs-bridge imported before: through them every ovs-bridge
// process linked and initialised OpenTelemetry, net/http, crypto/tls,
// knftables and go-iptables, for a fork, an exec and a few netlink requests.
// What that cost each invocation at start-up is in docs/performance.md
// ("Design costs").
package ipam

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/types/create"

	"github.com/ovsflow/ovs-cni/pkg/cnierr"
)

// busyRetries and busyWait bound the wait for a plugin binary that is being
// written as it is executed (ETXTBSY), as cni's invoke waits.
const (
	busyRetries = 5
	busyWait    = time.Second
)

// waitDelay bounds the wait for a plugin's output once its context has
// ended (the plugin is then killed) or it has exited: a child it left
// behind (a shell script's sleep, a daemon) may hold its stdout open for
// ever.
const waitDelay = time.Second

// Pending is an ADD running in the background (Start): ovs-bridge makes the
// veth meanwhile.
type Pending struct {
	done chan struct{}
	r    types.Result
	err  error
}

// Start runs the plugin's ADD (as Add) in the background, until ctx ends.
func Start(ctx context.Context, plugin string, netconf []byte) *Pending {
	p := &Pending{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.r, p.err = Add(ctx, plugin, netconf)
	}()
	return p
}

// Wait returns what the ADD returned, once it has.
func (p *Pending) Wait() (types.Result, error) {
	<-p.done
	return p.r, p.err
}

// Add runs the plugin's ADD and returns its result, in the version the
// plugin printed (the specification has it print netconf's cniVersion); a
// result without a cniVersion is taken to be in netconf's, as libcni takes
// it (containernetworking/cni#895).
func Add(ctx context.Context, plugin string, netconf []byte) (types.Result, error) {
	out, err := run(ctx, plugin, "ADD", netconf)
	if err != nil {
		return nil, err
	}
	return decodeResult(netconf, out)
}

// Del runs the plugin's DEL.
func Del(ctx context.Context, plugin string, netconf []byte) error {
	_, err := run(ctx, plugin, "DEL", netconf)
	return err
}

// Check runs the plugin's CHECK.
func Check(ctx context.Context, plugin string, netconf []byte) error {
	_, err := run(ctx, plugin, "CHECK", netconf)
	return err
}

// GC runs the plugin's GC. netconf is the one this plugin was given: GC
// exists from CNI 1.1.0 on, and skel calls a plugin's GC only for such a
// config, so the version needs no check here (cni's invoke makes none).
func GC(ctx context.Context, plugin string, netconf []byte) error {
	_, err := run(ctx, plugin, "GC", netconf)
	return err
}

// Status runs the plugin's STATUS (CNI 1.1.0 on, like GC).
func Status(ctx context.Context, plugin string, netconf []byte) error {
	_, err := run(ctx, plugin, "STATUS", netconf)
	return err
}

// find returns the path of the plugin in cniPath, the first of its
// directories that holds a regular file of that name, as libcni finds the
// plugins it runs.
func find(plugin, cniPath string) (string, error) {
	if plugin == "" {
		return "", errors.New("no plugin name")
	}
	if strings.ContainsRune(plugin, os.PathSeparator) {
		return "", fmt.Errorf("plugin name %q is a path", plugin)
	}
	dirs := filepath.SplitList(cniPath)
	if len(dirs) == 0 {
		return "", fmt.Errorf("plugin %q: CNI_PATH is empty", plugin)
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, plugin)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	// The one failure that is the network config's: a name with no plugin
	// (the reference plugins' invoke.FindInPath fails the same way).
	return "", cnierr.Invalid(`"ipam.type" %q: no plugin of that name in CNI_PATH %q`, plugin, cniPath)
}

// withCommand is env with CNI_COMMAND set to command, and CNI_ARGS as
// ipamArgs leaves it for the addresses netconf requests.
func withCommand(env []string, command string, netconf []byte) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "CNI_COMMAND="):
		case strings.HasPrefix(kv, "CNI_ARGS="):
			out = append(out, "CNI_ARGS="+ipamArgs(strings.TrimPrefix(kv, "CNI_ARGS="), requestedIPs(netconf)))
		default:
			out = append(out, kv)
		}
	}
	return append(out, "CNI_COMMAND="+command)
}

// requestedIPs: the addresses netconf requests in its current forms,
// runtimeConfig.ips (capability "ips") and args.cni.ips.
func requestedIPs(netconf []byte) []string {
	var c struct {
		RuntimeConfig struct {
			IPs []string `json:"ips"`
		} `json:"runtimeConfig"`
		Args struct {
			CNI struct {
				IPs []string `json:"ips"`
			} `json:"cni"`
		} `json:"args"`
	}
	if json.Unmarshal(netconf, &c) != nil {
		return nil
	}
	return append(c.RuntimeConfig.IPs, c.Args.CNI.IPs...)
}

// ipamArgs is cniArgs without its "IP" pair when every address of that pair
// is also in requested: the same request in its older form. Multus sends a
// network selection's "ips" both as runtimeConfig.ips and, comma-joined, as
// CNI_ARGS IP=A,B; host-local reads CNI_ARGS IP as one address and refuses
// two (a dual-stack request), while it reads runtimeConfig.ips whole. An
// "IP" pair of addresses not requested otherwise is left as it is.
func ipamArgs(cniArgs string, requested []string) string {
	if cniArgs == "" || len(requested) == 0 {
		return cniArgs
	}
	have := map[string]bool{}
	for _, r := range requested {
		have[strings.TrimSpace(r)] = true
	}
	pairs := strings.Split(cniArgs, ";")
	out := pairs[:0]
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == "IP" && allIn(strings.Split(v, ","), have) {
			continue
		}
		out = append(out, kv)
	}
	return strings.Join(out, ";")
}

func allIn(addrs []string, have map[string]bool) bool {
	for _, a := range addrs {
		if !have[strings.TrimSpace(a)] {
			return false
		}
	}
	return true
}

// run executes the plugin's command and returns its stdout. What the plugin
// writes to stderr goes to ours when it succeeds, into the error when it
// fails. A plugin still running when ctx ends is killed, and the error
// wraps ctx's: the caller's command has a deadline, an IPAM plugin that
// hangs must not make it hang too.
func run(ctx context.Context, plugin, command string, netconf []byte) ([]byte, error) {
	path, err := find(plugin, os.Getenv("CNI_PATH"))
	if err != nil {
		return nil, err
	}
	env := withCommand(os.Environ(), command, netconf)
	for attempt := 0; ; attempt++ {
		var stdout, stderr bytes.Buffer
		c := exec.CommandContext(ctx, path)
		c.Env, c.Stdin, c.Stdout, c.Stderr = env, bytes.NewReader(netconf), &stdout, &stderr
		c.WaitDelay = waitDelay
		err := c.Run()
		if errors.Is(err, syscall.ETXTBSY) && attempt < busyRetries {
			select {
			case <-time.After(busyWait):
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("%s %s: %w", plugin, command, ctx.Err())
			}
		}
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w (%v)", plugin, command, ctx.Err(), err)
		}
		if err != nil {
			return nil, pluginError(plugin, command, err, stdout.Bytes(), stderr.Bytes())
		}
		if stderr.Len() > 0 {
			_, _ = os.Stderr.Write(stderr.Bytes())
		}
		return stdout.Bytes(), nil
	}
}

// pluginError is the CNI error the plugin printed on stdout, as a
// *types.Error so that its code reaches the runtime, or else an error
// carrying what the plugin printed.
func pluginError(plugin, command string, err error, stdout, stderr []byte) error {
	var e types.Error
	if json.Unmarshal(stdout, &e) == nil && (e.Code != 0 || e.Msg != "") {
		return &e
	}
	msg := fmt.Sprintf("%s %s: %v", plugin, command, err)
	if s := bytes.TrimSpace(stderr); len(s) > 0 {
		msg += fmt.Sprintf(", stderr %q", s)
	}
	if s := bytes.TrimSpace(stdout); len(s) > 0 {
		msg += fmt.Sprintf(", stdout %q", s)
	}
	return errors.New(msg)
}

// decodeResult decodes a plugin's ADD result (see Add).
func decodeResult(netconf, out []byte) (types.Result, error) {
	confVersion, err := create.DecodeVersion(netconf)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(out, &fields); err != nil {
		return nil, fmt.Errorf("decoding result %q: %w", out, err)
	}
	var resultVersion string
	if raw, ok := fields["cniVersion"]; !ok || json.Unmarshal(raw, &resultVersion) != nil || resultVersion == "" {
		if fields == nil { // the plugin printed null
			fields = map[string]json.RawMessage{}
		}
		resultVersion = confVersion
		fields["cniVersion"], _ = json.Marshal(confVersion)
		if out, err = json.Marshal(fields); err != nil {
			return nil, err
		}
	}
	return create.Create(resultVersion, out)
}
