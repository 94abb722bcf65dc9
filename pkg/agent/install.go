package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/ovsflow/ovs-cni/pkg/conflist"
)

// installFile puts content at dst with mode unless dst already has it: a
// write to a temporary name in dst's directory, then a rename, so that a
// runtime never reads a half-written conflist nor executes a half-written
// plugin (and replacing a running plugin is safe). It reports whether it
// wrote.
func installFile(dst string, content []byte, mode fs.FileMode) (bool, error) {
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, content) {
		if st, err := os.Stat(dst); err == nil && st.Mode().Perm() == mode {
			return false, nil
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".ovsflow-agent.*")
	if err != nil {
		return false, fmt.Errorf("installing %s: %w", dst, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	_, err = tmp.Write(content)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return false, fmt.Errorf("installing %s: %w", dst, err)
	}
	return true, nil
}

// installPlugins copies the plugins from src into the node's CNI bin dir
// dst: each of plugins always (when its content differs), each of optional
// only where the node has none of that name.
func installPlugins(src, dst string, plugins, optional []string) (installed []string, err error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return nil, fmt.Errorf("CNI bin dir: %w", err)
	}
	var errs []error
	put := func(name string, onlyIfMissing bool) {
		target := filepath.Join(dst, name)
		if onlyIfMissing {
			if _, err := os.Lstat(target); err == nil {
				return
			}
		}
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: %w", name, err))
			return
		}
		wrote, err := installFile(target, b, 0o755)
		if err != nil {
			errs = append(errs, err)
		} else if wrote {
			installed = append(installed, target)
		}
	}
	for _, p := range plugins {
		put(p, false)
	}
	for _, p := range optional {
		put(p, true)
	}
	return installed, errors.Join(errs...)
}

// installConflist renders the template at templatePath for the node's pod
// ranges and installs it as dir/name.
func installConflist(templatePath, dir, name string, cidrs []netip.Prefix) (bool, error) {
	return installConflistMTU(templatePath, dir, name, cidrs, 0)
}

// installConflistMTU is installConflist with the pods' MTU, when set
// (conflist.RenderMTU).
func installConflistMTU(templatePath, dir, name string, cidrs []netip.Prefix, mtu int) (bool, error) {
	tmpl, err := os.ReadFile(templatePath)
	if err != nil {
		return false, fmt.Errorf("conflist template: %w", err)
	}
	out, err := conflist.RenderMTU(tmpl, cidrs, mtu)
	if err != nil {
		return false, fmt.Errorf("conflist template %s: %w", templatePath, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("CNI conf dir: %w", err)
	}
	return installFile(filepath.Join(dir, name), out, 0o644)
}
