package cnicmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ovsflow/ovs-cni/pkg/endpoint"
)

// HandOffTLS runs the command in build, the plugin's TLS build (the same
// plugin with package tlsdial linked in), when ep is an ssl: endpoint and
// this binary has no TLS dialer: crypto/tls costs every process of a binary
// that links it, whatever its endpoint (docs/performance.md, "Design
// costs"), so the plugin that most configs run over unix: leaves it out.
// build is looked for next to this binary, then in CNI_PATH; it gets the
// same arguments, environment and config, its result is printed as this
// plugin's, and its error is returned as it reported it. HandOffTLS
// reports whether it ran the command.
func HandOffTLS(args *skel.CmdArgs, ep endpoint.Endpoint, build string) (bool, error) {
	if ep.Network != "ssl" || endpoint.TLSLinked() {
		return false, nil
	}
	path, err := findBuild(build, args.Path)
	if err != nil {
		return true, err
	}
	var out bytes.Buffer
	cmd := exec.Command(path, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(args.StdinData), &out, os.Stderr
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		_, err = os.Stdout.Write(out.Bytes())
		return true, err
	case errors.As(err, &exit):
		var e types.Error
		if json.Unmarshal(out.Bytes(), &e) == nil && e.Code != 0 {
			return true, &e
		}
		return true, fmt.Errorf("%s: %w: %s", path, err, bytes.TrimSpace(out.Bytes()))
	default:
		return true, fmt.Errorf("running %s: %w", path, err)
	}
}

// findBuild returns the path of the binary build next to this one or in
// cniPath (CNI_PATH), never this binary itself (a TLS build without TLS
// would run itself again and again).
func findBuild(build, cniPath string) (string, error) {
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	dirs := append([]string{filepath.Dir(self)}, filepath.SplitList(cniPath)...)
	for _, dir := range dirs {
		p := filepath.Join(dir, build)
		real, err := filepath.EvalSymlinks(p)
		if err != nil || real == self {
			continue
		}
		if fi, err := os.Stat(real); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s, which serves them, is neither next to %s nor in CNI_PATH", endpoint.ErrNoTLS, build, self)
}
