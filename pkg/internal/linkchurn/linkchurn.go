// Package linkchurn is a test helper: it creates and deletes a veth over and
// over in a network namespace, as concurrent ADDs and DELs do, so that tests
// can prove that netlink dumps taken meanwhile neither fail nor miss links.
package linkchurn

import (
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
)

// Start churns a veth named name (its peer name+"p") in n until stop is
// called; stop returns how many times the veth was created.
func Start(n ns.NetNS, name string) (stop func() int) {
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
		close(quit)
		return <-done
	}
}
