// Package cnilog writes one concise line per plugin command to the file named
// by the network config's "logFile" key: time, plugin, command, container ID,
// ifname, outcome, duration and what was done. It never writes the config
// (which may hold secrets) and never writes to stdout, which carries the
// result.
package cnilog

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
)

var (
	mu    sync.Mutex
	notes []string
)

// Note records what the running command did, for its log line.
func Note(format string, a ...any) {
	mu.Lock()
	notes = append(notes, fmt.Sprintf(format, a...))
	mu.Unlock()
}

// Wrap returns f, logging each call when the config names a logFile.
func Wrap(plugin, command string, f func(*skel.CmdArgs) error) func(*skel.CmdArgs) error {
	return func(args *skel.CmdArgs) error {
		start := time.Now()
		err := f(args)
		var c struct {
			LogFile string `json:"logFile"`
		}
		if json.Unmarshal(args.StdinData, &c) != nil || c.LogFile == "" {
			return err
		}
		outcome := "ok"
		if err != nil {
			outcome = "error: " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		mu.Lock()
		did := strings.Join(notes, "; ")
		mu.Unlock()
		line := fmt.Sprintf("%s %s %s container=%s ifname=%s %s in %.1fms", start.UTC().Format(time.RFC3339Nano),
			plugin, command, args.ContainerID, args.IfName, outcome, float64(time.Since(start).Microseconds())/1000)
		if did != "" {
			line += " | " + did
		}
		if fh, ferr := os.OpenFile(c.LogFile, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o640); ferr == nil {
			fh.WriteString(line + "\n") // one write: lines of parallel plugins do not interleave
			fh.Close()
		}
		return err
	}
}

// Funcs wraps every command of a plugin.
func Funcs(plugin string, f skel.CNIFuncs) skel.CNIFuncs {
	return skel.CNIFuncs{
		Add: Wrap(plugin, "ADD", f.Add), Del: Wrap(plugin, "DEL", f.Del), Check: Wrap(plugin, "CHECK", f.Check),
		GC: Wrap(plugin, "GC", f.GC), Status: Wrap(plugin, "STATUS", f.Status),
	}
}
