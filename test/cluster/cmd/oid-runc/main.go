// oid-runc is runc for CRI-O on a node of the ovs-in-docker harness
// (test/cluster/harness/kubeconf's CRIOConfig points CRI-O at it): it makes a
// bundle's config.json what the node can run, then executes Debian's runc
// with the same arguments. It does what containerd's CRI plugin does by
// configuration and CRI-O has no setting for:
//   - restrict_oom_score_adj: a process's oomScoreAdj below this process's
//     own is raised to it. The node has no CAP_SYS_RESOURCE (this machine's
//     bounding set lacks it), so runc may not lower a score, and kubelet
//     asks -997 for a system-node-critical pod (the DaemonSet's);
//   - disable_hugetlb_controller: no hugepageLimits. The host's kernel has
//     the hugetlb controller but no hierarchy of it is mounted; CRI-O reads
//     /proc/cgroups, asks for the limits kubelet sends, and runc fails
//     ("cannot set hugetlb limit").
//
// A bundle is named by runc's --bundle (-b) of create and run; a process by
// exec's --process (-p).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const runc = "/usr/sbin/runc"

func main() {
	own, err := ownOOMScoreAdj()
	if err == nil {
		err = rewrite(os.Args[1:], own)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "oid-runc: %v\n", err)
		os.Exit(1)
	}
	err = syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "oid-runc: exec %s: %v\n", runc, err)
	os.Exit(1)
}

func ownOOMScoreAdj() (int, error) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// rewrite fixes the config.json of each bundle and each process file that
// args name.
func rewrite(args []string, own int) error {
	for i, a := range args {
		var path string
		var isProcess bool
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			path = filepath.Join(args[i+1], "config.json")
		case strings.HasPrefix(a, "--bundle="):
			path = filepath.Join(strings.TrimPrefix(a, "--bundle="), "config.json")
		case (a == "--process" || a == "-p") && i+1 < len(args):
			path, isProcess = args[i+1], true
		case strings.HasPrefix(a, "--process="):
			path, isProcess = strings.TrimPrefix(a, "--process="), true
		default:
			continue
		}
		if err := fix(path, isProcess, own); err != nil {
			return err
		}
	}
	return nil
}

func fix(path string, isProcess bool, own int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	changed := false
	process := spec
	if !isProcess {
		process, _ = spec["process"].(map[string]any)
		if linux, ok := spec["linux"].(map[string]any); ok {
			if res, ok := linux["resources"].(map[string]any); ok {
				if _, ok := res["hugepageLimits"]; ok {
					delete(res, "hugepageLimits")
					changed = true
				}
			}
		}
	}
	if adj, ok := process["oomScoreAdj"].(float64); ok && int(adj) < own {
		process["oomScoreAdj"] = own
		changed = true
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}
