package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// rssPass measures peak RSS through rssshim: a directory of symlinks named
// like the plugins, so that libcni and the plugins' own delegation (IPAM)
// run every plugin through the shim. It is separate from the timed calls
// because the shim adds an exec.
type rssPass struct {
	dir, log, binDir string
}

func newRSSPass(shim, binDir, work string) (*rssPass, error) {
	dir := filepath.Join(work, "shim")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(binDir)
	if err != nil {
		return nil, err
	}
	if *protoDir != "" {
		more, err := os.ReadDir(*protoDir)
		if err != nil {
			return nil, err
		}
		entries = append(entries, more...)
	}
	for _, e := range entries {
		if _, err := os.Lstat(filepath.Join(dir, e.Name())); err == nil {
			continue
		}
		if err := os.Symlink(shim, filepath.Join(dir, e.Name())); err != nil {
			return nil, err
		}
	}
	p := &rssPass{dir: dir, log: filepath.Join(work, "rss.log"), binDir: binDir}
	os.Setenv("OVSFLOW_BENCH_REAL", binDir)
	os.Setenv("OVSFLOW_BENCH_RSSLOG", p.log)
	return p, nil
}

// read returns "plugin COMMAND" → peak RSS (KiB) of each call logged since
// the last read.
func (p *rssPass) read() map[string][]int64 {
	out := map[string][]int64{}
	f, err := os.Open(p.log)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			continue
		}
		if v, err := strconv.ParseInt(fs[2], 10, 64); err == nil {
			out[fs[0]+" "+fs[1]] = append(out[fs[0]+" "+fs[1]], v)
		}
	}
	os.Remove(p.log)
	return out
}

// chainRSS runs `reps` ADD+DEL of the probe container of ch through the shim.
func (p *rssPass) chainRSS(ctx context.Context, ch *chain, ex *timedExec, reps int) (map[string][]int64, error) {
	p.read()
	os.Setenv("OVSFLOW_BENCH_REAL", strings.Join(ch.cfg.Path, string(os.PathListSeparator)))
	shimmed := *ch
	shimmed.cfg = libcni.NewCNIConfigWithCacheDir([]string{p.dir}, ch.cacheDir, ex)
	for r := 0; r < reps; r++ {
		c, _, err := shimmed.measureAdd(ctx, 1000+r)
		if err != nil {
			return nil, fmt.Errorf("rss pass: %w", err)
		}
		if _, err := shimmed.del(ctx, c, probePort); err != nil {
			return nil, fmt.Errorf("rss pass: %w", err)
		}
	}
	return p.read(), nil
}

// versionRSS runs each binary's VERSION through the shim.
func (p *rssPass) versionRSS(bins []string) map[string]int64 {
	out := map[string]int64{}
	p.read()
	os.Setenv("OVSFLOW_BENCH_REAL", p.binDir)
	for _, b := range bins {
		execFloor(filepath.Join(p.dir, b))
	}
	for k, v := range p.read() {
		out[strings.Fields(k)[0]] = maxI(v)
	}
	return out
}
