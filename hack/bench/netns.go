package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// netnsDir holds the bind mounts of every network namespace the driver makes
// (chain B/C nodes and all containers). It is a private directory, not
// /run/netns, and the driver runs in a mount namespace of its own (ip netns
// exec gives it one), so none of these mounts is visible outside and all of
// them go away with the driver.
type netnsDir struct {
	mu    sync.Mutex
	dir   string
	made  []string
	count int
}

// create makes a new, empty network namespace and returns it open.
func (d *netnsDir) create(name string) (ns.NetNS, error) {
	path := filepath.Join(d.dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", name, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread switches namespace and is never switched back: a
		// goroutine that exits while locked takes its thread with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		errc <- unix.Mount(src, path, "none", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("netns %s: %w", name, err)
	}
	d.mu.Lock()
	d.made = append(d.made, path)
	d.count++
	d.mu.Unlock()
	return ns.GetNS(path)
}

// remove unmounts and closes one namespace made here; the kernel frees it
// once nothing holds it.
func (d *netnsDir) remove(n ns.NetNS) {
	p := n.Path()
	n.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	i := slices.Index(d.made, p)
	if i < 0 {
		return
	}
	_ = unix.Unmount(p, unix.MNT_DETACH)
	_ = os.Remove(p)
	d.made = slices.Delete(d.made, i, i+1)
}

// removeAll unmounts every namespace made; the kernel then frees each one
// (and the veths and rules in it) once nothing holds it.
func (d *netnsDir) removeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.made {
		_ = unix.Unmount(p, unix.MNT_DETACH)
		_ = os.Remove(p)
	}
	d.made = nil
}
