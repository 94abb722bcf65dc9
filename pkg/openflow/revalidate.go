package openflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// WaitRevalidation returns once ovs-vswitchd's revalidators have finished a
// round, like `ovs-appctl revalidator/wait`. A barrier reply means the flow
// table has changed, not that the datapath's flow cache has: until a
// revalidator has gone over it, a cached megaflow made before the change
// (for example while a container's host port had no flows, between a DEL
// and an ADD of the same attachment) still steers packets the old way, and
// a connection made right after ADD returns is refused. Waiting for one
// round makes new flows effective on return, as the kernel's rules are.
//
// It speaks to ovs-vswitchd's control socket, which lives beside the
// bridge's management socket (ovs-vswitchd.PID.ctl, PID from
// ovs-vswitchd.pid). For a tcp: target, or when there is no pidfile beside
// the socket, there is no control socket to reach and it returns nil at once.
func WaitRevalidation(ctx context.Context, target string) error {
	path, ok := strings.CutPrefix(target, "unix:")
	if !ok {
		return nil
	}
	dir := filepath.Dir(path)
	pid, err := os.ReadFile(filepath.Join(dir, "ovs-vswitchd.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the ovs-vswitchd pidfile: %w", err)
	}
	ctl := filepath.Join(dir, "ovs-vswitchd."+strings.TrimSpace(string(pid))+".ctl")
	return session(ctx, "unix:"+ctl, "waiting for revalidation", func(s *conn) error {
		req, _ := json.Marshal(map[string]any{"id": 0, "method": "revalidator/wait", "params": []string{}})
		if err := s.send(req); err != nil {
			return err
		}
		var reply struct {
			Error any `json:"error"`
		}
		if err := json.NewDecoder(s.r).Decode(&reply); err != nil {
			return fmt.Errorf("reading the reply: %w", err)
		}
		if reply.Error != nil {
			return fmt.Errorf("ovs-vswitchd: %v", reply.Error)
		}
		return nil
	})
}
