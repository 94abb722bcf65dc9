package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// The plugins' own log (pkg/cnilog, the "logFile" key) gives the time from
// the start to the end of the command's function inside the plugin; the
// process's wall time minus that is what start-up, config decoding in skel
// and exit cost. A pass with logFile set on chain A measures both for the
// same calls. It is a pass of its own because logging is extra work.

var cnilogLine = regexp.MustCompile(`^\S+ (\S+) (\S+) container=\S+ ifname=\S+ .* in ([0-9.]+)ms`)

// revalLine is the note of pkg/hostport's Publish: how long it waited for
// ovs-vswitchd's revalidation round.
var revalLine = regexp.MustCompile(`waited ([0-9.]+)ms for ovs-vswitchd's revalidation`)

type logSplit struct {
	wall, inside, cpu map[string][]time.Duration // "plugin COMMAND"
	reval             map[string][]time.Duration // of inside, the revalidation wait (commands that note one)
}

// withLogFile returns the conflist with "logFile" on every plugin.
func withLogFile(conflist map[string]any, file string) map[string]any {
	b, _ := json.Marshal(conflist)
	var c map[string]any
	json.Unmarshal(b, &c)
	for _, p := range c["plugins"].([]any) {
		p.(map[string]any)["logFile"] = file
	}
	return c
}

func runLogPass(ctx context.Context, ch *chain, conflist map[string]any, ex *timedExec, reps int, file string) (*logSplit, error) {
	b, _ := json.Marshal(withLogFile(conflist, file))
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		return nil, err
	}
	logged := *ch
	logged.list = list
	os.Remove(file)
	before := len(ex.all())
	ex.setTag("logpass", len(ch.attached))
	for r := 0; r < reps; r++ {
		c, _, err := logged.measureAdd(ctx, 2000+r)
		if err != nil {
			return nil, fmt.Errorf("log pass: %w", err)
		}
		if _, err := logged.del(ctx, c, probePort); err != nil {
			return nil, fmt.Errorf("log pass: %w", err)
		}
	}
	ex.setTag("", len(ch.attached))
	ls := &logSplit{wall: map[string][]time.Duration{}, inside: map[string][]time.Duration{}, cpu: map[string][]time.Duration{},
		reval: map[string][]time.Duration{}}
	for _, c := range ex.all()[before:] {
		if c.chain == ch.key && c.tag == "logpass" {
			k := c.plugin + " " + c.command
			ls.wall[k] = append(ls.wall[k], c.wall)
			ls.cpu[k] = append(ls.cpu[k], c.cpu)
		}
	}
	f, err := os.Open(file)
	if err != nil {
		return ls, nil // plugins without logFile support: no split
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := cnilogLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, _ := strconv.ParseFloat(m[3], 64)
		k := m[1] + " " + m[2]
		ls.inside[k] = append(ls.inside[k], time.Duration(v*float64(time.Millisecond)))
		if r := revalLine.FindStringSubmatch(sc.Text()); r != nil {
			v, _ := strconv.ParseFloat(r[1], 64)
			ls.reval[k] = append(ls.reval[k], time.Duration(v*float64(time.Millisecond)))
		}
	}
	return ls, nil
}
