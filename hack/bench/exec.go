package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// call is one plugin process that libcni ran.
type call struct {
	chain   string // chain key, from the context
	plugin  string // binary name
	command string // CNI_COMMAND
	start   time.Time
	wall    time.Duration
	cpu     time.Duration // user+system, its delegates and helpers (IPAM, ovs-ofctl, nft) included
	tag     string        // what the driver was doing: "probe", "fill", ...
	level   int           // containers attached per chain at the time
}

type chainKey struct{}

// withChain tags a context so that the plugin processes it starts are
// attributed to chain key.
func withChain(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, chainKey{}, key)
}

// timedExec is libcni's invoke.Exec doing exactly what invoke.RawExec does
// (fork+exec the plugin, config on stdin, result on stdout), and in addition
// keeping the wall time of every plugin process. It adds no process and no
// work to the measured path. (Peak RSS is measured in a separate pass through
// rssshim: the rusage of a child of this process would count this process's
// own memory.)
type timedExec struct {
	version.PluginDecoder

	mu    sync.Mutex
	calls []call
	tag   string // attached to the calls from now on
	level int
}

func (e *timedExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (e *timedExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, pluginPath)
	c.Env = environ
	c.Stdin = bytes.NewReader(stdinData)
	c.Stdout, c.Stderr = &stdout, &stderr
	start := time.Now()
	err := c.Run()
	wall := time.Since(start)
	if c.ProcessState != nil {
		cl := call{plugin: filepath.Base(pluginPath), command: envValue(environ, "CNI_COMMAND"), start: start, wall: wall,
			cpu: c.ProcessState.UserTime() + c.ProcessState.SystemTime()}
		if k, ok := ctx.Value(chainKey{}).(string); ok {
			cl.chain = k
		}
		e.mu.Lock()
		cl.tag, cl.level = e.tag, e.level
		e.calls = append(e.calls, cl)
		e.mu.Unlock()
	}
	if err != nil {
		return nil, pluginErr(err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// setTag labels the calls that follow.
func (e *timedExec) setTag(tag string, level int) {
	e.mu.Lock()
	e.tag, e.level = tag, level
	e.mu.Unlock()
}

// all returns every call recorded.
func (e *timedExec) all() []call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]call(nil), e.calls...)
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// pluginErr is invoke.RawExec's error: the plugin's JSON error if it printed one.
func pluginErr(err error, stdout, stderr []byte) error {
	emsg := types.Error{}
	switch {
	case len(stdout) == 0 && len(stderr) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	case len(stdout) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed: %q: %v", string(stderr), err)
	default:
		if perr := json.Unmarshal(stdout, &emsg); perr != nil {
			emsg.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", string(stdout), perr)
		}
	}
	return &emsg
}
