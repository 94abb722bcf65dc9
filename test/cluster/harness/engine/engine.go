// Package engine finds or starts the Docker engine the harness talks to and
// runs the docker command against it. Like kind, the harness drives the
// engine through its command line: the same commands an operator types, and
// no client library to keep in step with the engine's API version.
//
// The engine is the one answering at $DOCKER_HOST or /var/run/docker.sock;
// else, as root on Debian, Debian's docker.io is installed and a private
// dockerd started, with its own data root, exec root, socket and pid file,
// --iptables=false --ip6tables=false --bridge=none --ip-forward=false: the
// host's firewall and sysctls are left alone. It outlives the command that
// started it (up ... down); Stop stops only an engine started here.
package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// An Engine is a Docker engine that answers.
type Engine struct {
	Host string // DOCKER_HOST
}

// Paths are where a private engine keeps its state.
type Paths struct {
	State string // socket, pid file, exec root: /run/PREFIX (gone with a reboot, as the engine is)
	Data  string // data root: /var/lib/PREFIX (the image cache)
}

// ErrNone: no engine answers, and none was to be started.
var ErrNone = errors.New("no Docker engine answers (is the harness up?)")

const systemSocket = "unix:///var/run/docker.sock"

func (p Paths) host() string    { return "unix://" + filepath.Join(p.State, "docker.sock") }
func (p Paths) ourPid() string  { return filepath.Join(p.State, "started-by-us") }
func (p Paths) logFile() string { return filepath.Join(p.State, "dockerd.log") }

// Find returns the engine that answers, without starting one.
func Find(p Paths) (*Engine, error) {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		if answers(h) {
			return &Engine{Host: h}, nil
		}
		return nil, fmt.Errorf("DOCKER_HOST=%s does not answer", h)
	}
	for _, h := range []string{systemSocket, p.host()} {
		if strings.HasPrefix(h, systemSocket) {
			if _, err := os.Stat("/var/run/docker.sock"); err != nil {
				continue
			}
		}
		if answers(h) {
			return &Engine{Host: h}, nil
		}
	}
	return nil, ErrNone
}

// Start returns the engine that answers, or starts a private one.
// install is called first to install dockerd (Debian's docker.io).
func Start(p Paths, install func() error, logf func(string, ...any)) (*Engine, error) {
	if e, err := Find(p); !errors.Is(err, ErrNone) {
		return e, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("no Docker engine answers, and starting one needs root")
	}
	if _, err := os.Stat("/etc/debian_version"); err != nil {
		return nil, errors.New("no Docker engine answers (installing one is done on Debian only)")
	}
	if err := install(); err != nil {
		return nil, fmt.Errorf("installing dockerd: %w", err)
	}
	for _, d := range []string{p.State, p.Data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	host := p.host()
	logf("starting a private dockerd (%s, data root %s)", strings.TrimPrefix(host, "unix://"), filepath.Join(p.Data, "docker"))
	lf, err := os.Create(p.logFile())
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command("dockerd", "--data-root", filepath.Join(p.Data, "docker"), "--exec-root", filepath.Join(p.State, "exec"),
		"-H", host, "--pidfile", filepath.Join(p.State, "dockerd.pid"), "--iptables=false", "--ip6tables=false",
		"--bridge=none", "--ip-forward=false", "--ip-masq=false")
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // it outlives us: up ... down
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting dockerd: %w", err)
	}
	pid := cmd.Process.Pid
	if err := os.WriteFile(p.ourPid(), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if answers(host) {
			return &Engine{Host: host}, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("the private dockerd exited (%v): %s", err, tail(p.logFile(), 20))
		case <-time.After(300 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("the private dockerd did not answer within 30 s: %s", tail(p.logFile(), 20))
}

// Stop stops the private engine if it was started here, and removes its state.
func Stop(p Paths, logf func(string, ...any)) error {
	b, err := os.ReadFile(p.ourPid())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %w", p.ourPid(), err)
	}
	if syscall.Kill(pid, 0) == nil {
		logf("stopping the private dockerd (pid %d)", pid)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil; {
			time.Sleep(200 * time.Millisecond) // polling the process's exit: it is not our child
		}
		if syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return os.RemoveAll(p.State)
}

func answers(host string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "-H", host, "info").Run() == nil
}

func tail(file string, n int) string {
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Command is the docker command with ARGS against this engine.
func (e *Engine) Command(args ...string) *exec.Cmd {
	cmd := exec.Command("docker", args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+e.Host)
	return cmd
}

// Run runs docker ARGS and returns its standard output, trimmed; its
// standard error is in the error.
func (e *Engine) Run(args ...string) (string, error) {
	cmd := e.Command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// List runs docker ARGS and returns the words of its output (IDs, names).
func (e *Engine) List(args ...string) ([]string, error) {
	out, err := e.Run(args...)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}
