package hostport

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

// The hot path of node-local host ports: the map elements of an ADD or a DEL
// go to the kernel as one netlink batch instead of an `nft -f` exec, which
// cost milliseconds of wall and CPU time per call (BenchmarkNodeLocal). The
// tables, maps and chains stay declared by nftScript (nft.go); this file only
// adds and deletes elements.

// nftHostports names the map of one family. Only the table (name, family)
// and the set name reach the kernel: google/nftables encodes an element from
// its raw key and data bytes, so the key and data types need not be known,
// and no GetSetByName round trip is needed.
func nftHostports(v4 bool) *nftables.Set {
	fam := nftables.TableFamilyIPv6
	if v4 {
		fam = nftables.TableFamilyIPv4
	}
	return &nftables.Set{
		Table: &nftables.Table{Name: nftTable, Family: fam},
		Name:  "hostports",
		IsMap: true,
	}
}

// nftKey is the element key of r, ipv4_addr (or ipv6_addr) . inet_proto .
// inet_service, as the kernel stores a concatenation: each component in
// network byte order, padded with zeros to a multiple of 4 bytes.
func nftKey(r flows.Rule) []byte {
	b := appendAddr(nil, r.NodeIP)
	b = append(b, byte(r.Protocol), 0, 0, 0)
	return appendPort(b, r.HostPort)
}

// nftData is the element data of r, ipv4_addr (or ipv6_addr) . inet_service,
// padded like nftKey.
func nftData(r flows.Rule) []byte {
	return appendPort(appendAddr(nil, r.ContainerIP), r.ContainerPort)
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if a.Is4() {
		v := a.As4()
		return append(b, v[:]...)
	}
	v := a.As16()
	return append(b, v[:]...)
}

func appendPort(b []byte, p uint16) []byte {
	return append(binary.BigEndian.AppendUint16(b, p), 0, 0)
}

// sendElements applies the elements of rules in one netlink batch (both
// families if mixed), with the semantics of nftElements: with remove, each
// element is added then deleted, so that the delete succeeds when it is
// already gone. Each element is its own message, in nftElements's order, so
// that rules repeating a key behave as they do in nft -f.
func sendElements(rules []flows.Rule, remove bool, opts ...nftables.ConnOption) error {
	c, err := nftables.New(opts...)
	if err != nil {
		return err
	}
	sets := [2]*nftables.Set{nftHostports(false), nftHostports(true)}
	for _, r := range rules {
		s := sets[0]
		if r.NodeIP.Is4() {
			s = sets[1]
		}
		key := nftKey(r)
		if err := c.SetAddElements(s, []nftables.SetElement{{Key: key, Val: nftData(r)}}); err != nil {
			return err
		}
		if remove {
			if err := c.SetDeleteElements(s, []nftables.SetElement{{Key: key}}); err != nil {
				return err
			}
		}
	}
	return c.Flush()
}

// tablesMissing reports whether a batch failed because a table or map of ours
// does not exist (ENOENT: first use on the node, or after a flush), or because
// the kernel has no nf_tables at all; the nft script is then the way on.
func tablesMissing(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPROTONOSUPPORT)
}
