// Command rssshim measures the peak RSS of a CNI plugin process. The bench
// driver puts symlinks named like the plugins, pointing here, in a directory
// of their own; run as NAME, it runs NAME from the first directory of the
// list $OVSFLOW_BENCH_REAL (colon-separated) that has it, with the same
// arguments, stdin, stdout and environment, then appends
// "NAME CNI_COMMAND MAXRSS_KIB" to $OVSFLOW_BENCH_RSSLOG and exits as the
// plugin did.
//
// Why a process of its own: a child's ru_maxrss counts the memory of the
// process that forked it until the exec (the kernel keeps the larger of the
// old and the new image), so rusage read by the driver would report the
// driver's own size. Forked from this small shim, the plugin's figure is its own.
// The driver uses it only for a separate pass, never for timed calls.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

func main() {
	name := filepath.Base(os.Args[0])
	real := name
	for _, dir := range filepath.SplitList(os.Getenv("OVSFLOW_BENCH_REAL")) {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			real = filepath.Join(dir, name)
			break
		}
	}
	cmd := exec.Command(real, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if cmd.ProcessState == nil {
		fmt.Fprintf(os.Stderr, "rssshim: %s: %v\n", name, err)
		os.Exit(127)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		if f, ferr := os.OpenFile(os.Getenv("OVSFLOW_BENCH_RSSLOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); ferr == nil {
			fmt.Fprintf(f, "%s %s %d\n", name, os.Getenv("CNI_COMMAND"), ru.Maxrss)
			f.Close()
		}
	}
	os.Exit(cmd.ProcessState.ExitCode())
}
