// Package noderanges is the node agent's word that a conflist's pod ranges
// are its Node's: a file, under /run so that a reboot empties it, that holds
// the ranges the agent rendered the conflist for after it read them from the
// Node's spec.podCIDRs since the node booted. A conflist whose ovs-bridge
// names the file in "confirmedRanges" is served only while the file holds
// its IPAM ranges: STATUS says the network is unavailable (a runtime starts
// no pod on it) and ADD asks to try again, until the agent has confirmed
// them. Without it, a Node deleted and registered again with other pod
// ranges would start its pods, at its boot, from the conflist the agent
// rendered for the old ranges, with addresses no other node routes to it.
package noderanges

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Key is ovs-bridge's config key that names the file.
const Key = "confirmedRanges"

// Write records ranges in the file at path: to a temporary name in its
// directory, then renamed, so that a plugin never reads half of it. It
// reports whether it wrote (not when the file already held them).
func Write(path string, ranges []netip.Prefix) (bool, error) {
	content := []byte(format(ranges))
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("confirmed ranges: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return false, fmt.Errorf("confirmed ranges: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	_, err = tmp.Write(content)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return false, fmt.Errorf("confirmed ranges: %w", err)
	}
	return true, nil
}

// Remove takes the agent's word back; a file already gone is no error. It
// reports whether there was one.
func Remove(path string) (bool, error) {
	err := os.Remove(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("confirmed ranges: %w", err)
	}
	return true, nil
}

// Holds reports whether the file at path holds exactly ranges.
func Holds(path string, ranges []netip.Prefix) bool {
	b, err := os.ReadFile(path)
	return err == nil && string(b) == format(ranges)
}

// format is the file's content: the ranges, masked, sorted, one a line.
func format(ranges []netip.Prefix) string {
	var lines []string
	for _, p := range ranges {
		lines = append(lines, p.Masked().String()+"\n")
	}
	slices.Sort(lines)
	return strings.Join(slices.Compact(lines), "")
}

// ConfigPath is the file a conflist's (or a plugin config's) ovs-bridge
// names in Key, "" when none does.
func ConfigPath(conf []byte) string {
	var c struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if json.Unmarshal(conf, &c) != nil {
		return ""
	}
	for _, p := range c.Plugins {
		if s, ok := p[Key].(string); ok && p["type"] == "ovs-bridge" {
			return s
		}
	}
	return ""
}

// Check is the plugin's side: nil when the file at path holds exactly the
// host-local ranges of the plugin config conf ("ipam": "ranges" or
// "subnet"); else an error that says what differs.
func Check(path string, conf []byte) error {
	var c struct {
		IPAM struct {
			Subnet string `json:"subnet"`
			Ranges [][]struct {
				Subnet string `json:"subnet"`
			} `json:"ranges"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(conf, &c); err != nil {
		return fmt.Errorf("%s: %w", Key, err)
	}
	var ranges []netip.Prefix
	add := func(s string) error {
		if s == "" {
			return nil
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("%s: ipam subnet %q: %w", Key, s, err)
		}
		ranges = append(ranges, p)
		return nil
	}
	if err := add(c.IPAM.Subnet); err != nil {
		return err
	}
	for _, set := range c.IPAM.Ranges {
		for _, r := range set {
			if err := add(r.Subnet); err != nil {
				return err
			}
		}
	}
	want := format(ranges)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the node agent has not confirmed this network's pod ranges (%s) since the node booted: %s does not exist",
			strings.Join(strings.Fields(want), ", "), path)
	}
	if err != nil {
		return fmt.Errorf("the node agent's confirmed pod ranges: %w", err)
	}
	if string(b) != want {
		return fmt.Errorf("this network's pod ranges (%s) are not the Node's the node agent confirmed in %s (%s): the conflist is stale",
			strings.Join(strings.Fields(want), ", "), path, strings.Join(strings.Fields(string(b)), ", "))
	}
	return nil
}
