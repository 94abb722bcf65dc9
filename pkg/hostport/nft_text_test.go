package hostport

import (
	"fmt"
	"strings"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

// The nft text of what applyNodeLocal and RebuildNodeLocal send as netlink
// messages: the tests compare the two, and drive nft(8) with it.

var nftFamilies = []struct{ family, addr string }{{"ip", "ipv4_addr"}, {"ip6", "ipv6_addr"}}

// nftScript renders the nft transaction that adds (or removes) the elements of
// rules, creating the tables idempotently first. With rebuild, it creates both
// families' tables and replaces all elements with those of rules.
func nftScript(rules []flows.Rule, remove, rebuild bool) string {
	var b strings.Builder
	for _, fam := range nftFamilies {
		var elems []flows.Rule
		for _, r := range rules {
			if (fam.family == "ip") == r.NodeIP.Is4() {
				elems = append(elems, r)
			}
		}
		if len(elems) == 0 && !rebuild {
			continue
		}
		fmt.Fprintf(&b, "add table %s %s\n", fam.family, nftTable)
		fmt.Fprintf(&b, "add map %s %s hostports { type %s . inet_proto . inet_service : %s . inet_service ; }\n", fam.family, nftTable, fam.addr, fam.addr)
		fmt.Fprintf(&b, "add chain %s %s output { type nat hook output priority -100 ; policy accept ; }\n", fam.family, nftTable)
		fmt.Fprintf(&b, "flush chain %s %s output\n", fam.family, nftTable)
		fmt.Fprintf(&b, "add rule %s %s output dnat %s to %s daddr . meta l4proto . th dport map @hostports\n", fam.family, nftTable, fam.family, fam.family)
		if rebuild {
			fmt.Fprintf(&b, "flush map %s %s hostports\n", fam.family, nftTable)
		}
		b.WriteString(nftElements(elems, remove))
	}
	return b.String()
}

// nftElements renders the element lines of rules; with remove, each element
// is added then deleted, which makes the delete safe when it is already gone.
func nftElements(rules []flows.Rule, remove bool) string {
	var b strings.Builder
	for _, r := range rules {
		fam := "ip6"
		if r.NodeIP.Is4() {
			fam = "ip"
		}
		fmt.Fprintf(&b, "add element %s %s hostports { %s . %s . %d : %s . %d }\n", fam, nftTable, r.NodeIP, r.Protocol, r.HostPort, r.ContainerIP, r.ContainerPort)
		if remove {
			fmt.Fprintf(&b, "delete element %s %s hostports { %s . %s . %d }\n", fam, nftTable, r.NodeIP, r.Protocol, r.HostPort)
		}
	}
	return b.String()
}
