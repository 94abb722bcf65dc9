// Package nettest holds helpers of the tests that need scratch network
// namespaces: the root check, and link churn (a veth created and deleted over
// and over, as concurrent ADDs and DELs do) to prove that netlink dumps taken
// meanwhile neither fail nor miss links.
package nettest

import (
	"os"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
)

// RequireRoot skips t without root, loudly, and fails it in CI (CI set),
// where a skip must not pass for a run.
func RequireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI: this test needs root (scratch network namespaces)")
		}
		t.Skip("SKIPPED: needs root (scratch network namespaces)")
	}
}

// NewNS is a scratch network namespace, removed at the end of the test.
func NewNS(t *testing.T) ns.NetNS {
	t.Helper()
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() {
		_ = n.Close()
		_ = testutils.UnmountNS(n)
	})
	return n
}

// Churn churns a veth named name (its peer name+"p") in n until stop is
// called; stop returns how many times the veth was created, and fails t
// when it never was (the test would have measured nothing).
func Churn(t *testing.T, n ns.NetNS, name string) (stop func() int) {
	quit := make(chan struct{})
	done := make(chan int)
	go func() {
		churned := 0
		_ = n.Do(func(ns.NetNS) error {
			la := netlink.NewLinkAttrs()
			la.Name = name
			v := &netlink.Veth{LinkAttrs: la, PeerName: name + "p"}
			for {
				select {
				case <-quit:
					return nil
				default:
				}
				if netlink.LinkAdd(v) == nil {
					churned++
				}
				_ = netlink.LinkDel(v)
			}
		})
		done <- churned
	}()
	return func() int {
		t.Helper()
		close(quit)
		churned := <-done
		if churned == 0 {
			t.Error("no churn: the test measured nothing")
		}
		return churned
	}
}
