package netns

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCheck(t *testing.T) {
	own := "/proc/self/ns/net"
	ino := Inode(own)
	if ino == 0 {
		t.Fatalf("Inode(%s) = 0, want the namespace's inode", own)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "cni-left")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := Inode(file); got != 0 {
		t.Errorf("Inode of a regular file: got %d, want 0", got)
	}
	for _, tc := range []struct {
		name string
		path string
		ino  uint64
		want State
	}{
		{"the same namespace", own, ino, Alive},
		{"a namespace, no inode recorded", own, 0, Alive},
		{"another namespace at the path", own, ino + 1, Gone},
		{"unmounted: a plain file", file, ino, Gone},
		{"removed", filepath.Join(dir, "cni-gone"), ino, Gone},
		{"directory not visible", filepath.Join(dir, "no", "cni-x"), ino, Unknown},
		{"nothing recorded", "", 0, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := Check(tc.path, tc.ino); got != tc.want {
				t.Errorf("Check(%q, %d): got %v (%s), want %v", tc.path, tc.ino, got, why, tc.want)
			}
		})
	}
}
