package resilience

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/cnicmd"
	"github.com/ovsflow/ovs-cni/test/framework"
)

// killMode says what a scheduled SIGKILL hits.
type killMode int

const (
	// killGroup kills the plugin's process group: the plugin and the helper
	// it runs at that instant (host-local, ovs-ofctl, nft).
	killGroup killMode = iota
	// killPlugin kills the plugin alone, as a runtime's timeout does; its
	// helper finishes on its own, and the runtime's DEL runs after it.
	killPlugin
)

func (m killMode) String() string { return [...]string{"group", "plugin"}[m] }

// invocation is one plugin execution as the runtime saw it.
type invocation struct {
	Plugin, Command string
	Planned         bool // a SIGKILL was scheduled
	Killed          bool // and the plugin died of it
	Mode            killMode
	Hung            bool // still running after hangAfter: SIGQUIT (Go dumps its goroutines)
	Delay, Took     time.Duration
	Err             error
	Stderr          string
}

// hangAfter is how long an invocation may run: every command of the plugins
// ends within its budget (at most cnicmd.DefaultTimeout, the conflists here
// giving no longer "timeout"), so one that outlives this hangs.
const hangAfter = cnicmd.DefaultTimeout + 15*time.Second

// pluginExec is an invoke.Exec that runs plugins as libcni's RawExec does
// (CNI_* in the environment, the plugin's config on stdin, a CNI error
// decoded from stdout), each in a process group of its own, and that can
// SIGKILL an invocation after a delay.
type pluginExec struct {
	netns string // run plugins inside this named netns ("" = the node)
	// kill decides, per invocation, whether and when to kill it.
	kill func(plugin, command string) (delay time.Duration, mode killMode, ok bool)
	// before, if set, runs before each invocation (fault injection).
	before func(plugin, command string)

	mu   sync.Mutex
	log  []invocation
	durs map[string][]time.Duration // invocations that ran to the end, by "plugin COMMAND"
}

func envGet(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

func (x *pluginExec) ExecPlugin(ctx context.Context, path string, stdin []byte, env []string) ([]byte, error) {
	inv := invocation{Plugin: filepath.Base(path), Command: envGet(env, "CNI_COMMAND")}
	argv := []string{path}
	if x.netns != "" {
		argv = []string{"ip", "netns", "exec", x.netns, path} // ip execs the plugin: same pid
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, bytes.NewReader(stdin), &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if x.kill != nil && ctx.Value(noKillKey{}) == nil {
		inv.Delay, inv.Mode, inv.Planned = x.kill(inv.Plugin, inv.Command)
	}
	if x.before != nil {
		x.before(inv.Plugin, inv.Command)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	var mu sync.Mutex
	exited := false
	if inv.Planned {
		timer := time.AfterFunc(inv.Delay, func() {
			mu.Lock()
			defer mu.Unlock()
			if exited {
				return
			}
			target := pid
			if inv.Mode == killGroup {
				target = -pid
			}
			_ = syscall.Kill(target, syscall.SIGKILL)
		})
		defer timer.Stop()
	}
	hung := false
	watchdog := time.AfterFunc(hangAfter, func() {
		mu.Lock()
		defer mu.Unlock()
		if !exited {
			hung = true
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	})
	defer watchdog.Stop()
	// Wait for the exit without reaping: until Wait below, the zombie holds
	// the pid and the process group, so the timer never signals a reused one.
	var si unix.Siginfo
	for unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
	}
	mu.Lock()
	exited = true
	if hung {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // the helper it was blocked on
	}
	mu.Unlock()
	err := cmd.Wait()
	inv.Took = time.Since(start)
	inv.Hung, inv.Stderr = hung, stderr.String()
	if hung {
		err = fmt.Errorf("%s %s hung: no exit after %s; its goroutines:\n%s", inv.Plugin, inv.Command, hangAfter, stderr.String())
	}
	if hung {
		_ = drainGroup(pid, 20*time.Second)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
		inv.Killed = true
		// Let orphaned helpers finish (killPlugin) or vanish (killGroup)
		// before the runtime goes on.
		if derr := drainGroup(pid, 20*time.Second); derr != nil {
			err = fmt.Errorf("%w (%v)", err, derr)
		}
	}
	var out []byte
	if hung {
		inv.Err = err
	} else if err != nil {
		inv.Err = pluginErr(err, stdout.Bytes(), stderr.Bytes())
	} else {
		out = stdout.Bytes()
	}
	if rec, ok := ctx.Value(recorderKey{}).(*recorder); ok {
		rec.mu.Lock()
		rec.invs = append(rec.invs, inv)
		rec.mu.Unlock()
	}
	x.mu.Lock()
	x.log = append(x.log, inv)
	if !inv.Killed && inv.Err == nil {
		if x.durs == nil {
			x.durs = map[string][]time.Duration{}
		}
		k := inv.Plugin + " " + inv.Command
		x.durs[k] = append(x.durs[k], inv.Took)
	}
	x.mu.Unlock()
	return out, inv.Err
}

// noKillKey in a context spares its invocations from kills (a runtime's
// last retries).
type noKillKey struct{}

func noKill(ctx context.Context) context.Context { return context.WithValue(ctx, noKillKey{}, true) }

// recorder collects the invocations of one runtime operation (a context
// carries it to ExecPlugin).
type recorder struct {
	mu   sync.Mutex
	invs []invocation
}

type recorderKey struct{}

func recording(ctx context.Context) (context.Context, *recorder) {
	r := &recorder{}
	return context.WithValue(ctx, recorderKey{}, r), r
}

func (r *recorder) killed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, inv := range r.invs {
		if inv.Killed {
			return true
		}
	}
	return false
}

func (r *recorder) hung() []invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []invocation
	for _, inv := range r.invs {
		if inv.Hung {
			out = append(out, inv)
		}
	}
	return out
}

// pluginErr is libcni's RawExec rendering of a failed plugin.
func pluginErr(err error, stdout, stderr []byte) error {
	e := &types.Error{}
	switch {
	case len(stdout) == 0 && len(stderr) == 0:
		e.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	case len(stdout) == 0:
		e.Msg = fmt.Sprintf("netplugin failed: %q: %v", stderr, err)
	default:
		if perr := json.Unmarshal(stdout, e); perr != nil {
			e.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", stdout, perr)
		}
	}
	return e
}

func (x *pluginExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

func (x *pluginExec) Decode(b []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(b)
}

// typical is the median duration of the invocations of plugin/command that
// ran to the end (fallback if there are none yet).
func (x *pluginExec) typical(plugin, command string, fallback time.Duration) time.Duration {
	x.mu.Lock()
	defer x.mu.Unlock()
	d := slices.Clone(x.durs[plugin+" "+command])
	if len(d) == 0 {
		return fallback
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// takeLog returns and clears the invocations recorded so far.
func (x *pluginExec) takeLog() []invocation {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.log
	x.log = nil
	return l
}

// Orphans of a killed plugin are reparented to the nearest subreaper. PID 1
// of a container may never reap them, so the crash and storm tests make this
// process the subreaper and reap the orphans of plugin process groups
// themselves (never a direct child: those are reaped by os/exec).

// becomeSubreaper makes this process the reaper of orphaned descendants
// until the test ends.
func becomeSubreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

type procStat struct {
	pid, ppid, pgrp int
	state           byte
}

func readProcStat(pid string) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return procStat{}, false
	}
	f := strings.Fields(s[i+2:]) // state ppid pgrp ...
	if len(f) < 3 {
		return procStat{}, false
	}
	p, _ := strconv.Atoi(pid)
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	return procStat{pid: p, ppid: ppid, pgrp: pgrp, state: f[0][0]}, true
}

// drainGroup waits until no live process is left in process group pgid,
// reaping those of its zombies that were reparented to this process.
func drainGroup(pgid int, timeout time.Duration) error {
	self := os.Getpid()
	live := 0
	if framework.Until(timeout, func() bool {
		entries, _ := os.ReadDir("/proc")
		live = 0
		for _, e := range entries {
			if e.Name()[0] < '0' || e.Name()[0] > '9' {
				continue
			}
			st, ok := readProcStat(e.Name())
			if !ok || st.pgrp != pgid || st.pid == pgid {
				continue
			}
			if st.state == 'Z' || st.state == 'X' {
				if st.ppid == self {
					var ws unix.WaitStatus
					_, _ = unix.Wait4(st.pid, &ws, unix.WNOHANG, nil)
				}
				continue
			}
			live++
		}
		return live == 0
	}) {
		return nil
	}
	return fmt.Errorf("%d helper process(es) of the killed plugin still running after %s", live, framework.Scaled(timeout))
}
