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
		maps := []string{"hostports"}
		if fam.family == "ip" {
			maps = append(maps, "localhost")
		}
		for _, m := range maps {
			fmt.Fprintf(&b, "add map %s %s %s { type %s . inet_proto . inet_service : %s . inet_service ; }\n", fam.family, nftTable, m, fam.addr, fam.addr)
		}
		fmt.Fprintf(&b, "add chain %s %s output { type nat hook output priority -100 ; policy accept ; }\n", fam.family, nftTable)
		fmt.Fprintf(&b, "flush chain %s %s output\n", fam.family, nftTable)
		for _, m := range maps {
			fmt.Fprintf(&b, "add rule %s %s output dnat %s to %s daddr . meta l4proto . th dport map @%s\n", fam.family, nftTable, fam.family, fam.family, m)
		}
		if fam.family == "ip" {
			b.WriteString(nftLocalnet)
		}
		if rebuild {
			for _, m := range maps {
				fmt.Fprintf(&b, "flush map %s %s %s\n", fam.family, nftTable, m)
			}
		}
		b.WriteString(nftElements(elems, remove))
	}
	return b.String()
}

// nftLocalnet is the nft text of the IPv4 table's other chains: the
// masquerade of the node's own connections from a loopback address, and
// the guards that no packet to or from 127.0.0.0/8 crosses an interface
// other than lo.
const nftLocalnet = `add chain ip ovsflow_hostport postrouting { type nat hook postrouting priority 100 ; policy accept ; }
flush chain ip ovsflow_hostport postrouting
add rule ip ovsflow_hostport postrouting ip saddr 127.0.0.0/8 oif != "lo" ct status dnat masquerade
add chain ip ovsflow_hostport localnet_in { type filter hook prerouting priority -300 ; policy accept ; }
flush chain ip ovsflow_hostport localnet_in
add rule ip ovsflow_hostport localnet_in iif != "lo" ip daddr 127.0.0.0/8 drop
add rule ip ovsflow_hostport localnet_in iif != "lo" ip saddr 127.0.0.0/8 drop
add chain ip ovsflow_hostport localnet_out { type filter hook postrouting priority 300 ; policy accept ; }
flush chain ip ovsflow_hostport localnet_out
add rule ip ovsflow_hostport localnet_out oif != "lo" ip saddr 127.0.0.0/8 drop
`

// nftElements renders the element lines of rules; with remove, each element
// is added then deleted, which makes the delete safe when it is already gone.
func nftElements(rules []flows.Rule, remove bool) string {
	var b strings.Builder
	for _, r := range rules {
		fam := "ip6"
		if r.NodeIP.Is4() {
			fam = "ip"
		}
		m := "hostports"
		if r.NodeIP.IsLoopback() {
			m = "localhost"
		}
		fmt.Fprintf(&b, "add element %s %s %s { %s . %s . %d : %s . %d }\n", fam, nftTable, m, r.NodeIP, r.Protocol, r.HostPort, r.ContainerIP, r.ContainerPort)
		if remove {
			fmt.Fprintf(&b, "delete element %s %s %s { %s . %s . %d }\n", fam, nftTable, m, r.NodeIP, r.Protocol, r.HostPort)
		}
	}
	return b.String()
}
