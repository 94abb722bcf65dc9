// Package netns tells whether a sandbox's network namespace is still
// there, from what ADD recorded of it (CNI_NETNS and the namespace's inode
// number, on the attachment's Port row): what the orphan sweep needs before
// it replays a DEL. A host veth gone says only that the container's end was
// deleted (a container with CAP_NET_ADMIN can delete its own eth0); the
// namespace gone says the sandbox is.
package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// State is what Check found of a recorded namespace.
type State int

const (
	// Alive: the path names a network namespace, the recorded one when its
	// inode was recorded.
	Alive State = iota
	// Gone: the path no longer exists while its directory does, or names a
	// file that is not a namespace (the runtime unmounted it), or another
	// namespace than the recorded one.
	Gone
	// Unknown: nothing recorded, the path's directory is not visible here
	// (another mount or PID namespace: a /proc/PID/ns/net path whose
	// process this one cannot see), or the stat failed otherwise.
	Unknown
)

func (s State) String() string {
	switch s {
	case Alive:
		return "alive"
	case Gone:
		return "gone"
	}
	return "unknown"
}

// Inode is the inode number of the network namespace that path names, 0
// when it names none (the caller records nothing then).
func Inode(path string) uint64 {
	var fs unix.Statfs_t
	var st unix.Stat_t
	if unix.Statfs(path, &fs) != nil || fs.Type != unix.NSFS_MAGIC || unix.Stat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

// Check tells whether the namespace recorded at ADD as path, with inode ino
// (0: not recorded), is still there, and why.
func Check(path string, ino uint64) (State, string) {
	if path == "" {
		return Unknown, "no netns recorded"
	}
	var st unix.Stat_t
	err := unix.Stat(path, &st)
	switch {
	case errors.Is(err, unix.ENOENT):
		if _, derr := os.Stat(filepath.Dir(path)); derr != nil {
			return Unknown, fmt.Sprintf("netns %s: its directory is not visible here: %v", path, derr)
		}
		return Gone, fmt.Sprintf("netns %s no longer exists", path)
	case err != nil:
		return Unknown, fmt.Sprintf("netns %s: %v", path, err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return Unknown, fmt.Sprintf("netns %s: %v", path, err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		return Gone, fmt.Sprintf("netns %s is no longer a namespace (unmounted)", path)
	}
	if ino != 0 && st.Ino != ino {
		return Gone, fmt.Sprintf("netns %s is another namespace (inode %d, recorded %d)", path, st.Ino, ino)
	}
	return Alive, fmt.Sprintf("netns %s still exists", path)
}
