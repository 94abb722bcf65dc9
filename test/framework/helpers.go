package framework

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
)

// Conflist builds a network configuration list.
func Conflist(version, name string, plugins ...map[string]any) map[string]any {
	ps := make([]any, len(plugins))
	for i, p := range plugins {
		ps[i] = p
	}
	return map[string]any{"cniVersion": version, "name": name, "plugins": ps}
}

// PM is one runtimeConfig.portMappings entry.
func PM(hostPort, containerPort int, proto, hostIP string) map[string]any {
	return map[string]any{"hostPort": hostPort, "containerPort": containerPort, "protocol": proto, "hostIP": hostIP}
}

// Mappings is the portMappings capability argument of the entries m.
func Mappings(m ...map[string]any) map[string]any {
	l := make([]any, len(m))
	for i := range m {
		l[i] = m[i]
	}
	return map[string]any{"portMappings": l}
}

// HP joins an address and a port.
func HP(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }

// CNICode is the CNI error code of err, or 0.
func CNICode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// Parallel runs f for i in [0,n) on n goroutines and collects the errors.
func Parallel(n int, f func(i int) error) []error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = f(i)
		}(i)
	}
	wg.Wait()
	return errs
}

// Allocations lists the addresses host-local holds in dataDir for network.
func Allocations(t testing.TB, dataDir, network string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, network))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}

// Serve listens for TCP on port in netns on a wildcard address (it
// survives the interface being deleted and re-created), closed at the
// test's end, and calls handle for every connection in a goroutine of its
// own; handle closes the connection.
func Serve(t testing.TB, netns ns.NetNS, port int, handle func(net.Conn)) {
	t.Helper()
	var l net.Listener
	err := netns.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go handle(conn)
		}
	}()
}

// ServeTCP answers every TCP connection to port in netns with
// "hello from <id> to <client address>".
func ServeTCP(t testing.TB, netns ns.NetNS, id string, port int) {
	t.Helper()
	Serve(t, netns, port, func(conn net.Conn) {
		defer conn.Close()
		fmt.Fprintf(conn, "hello from %s to %s", id, conn.RemoteAddr())
	})
}
