package hostport

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/ovsflow/ovs-cni/pkg/flows"
)

// Node-local host ports over netlink: no nft binary is needed on the node.
// The map elements of an ADD or a DEL go to the kernel as one netlink batch
// (an `nft -f` exec cost milliseconds of wall and CPU time per call,
// BenchmarkNodeLocal); the tables, maps and chains (nft.go shows them as
// nft text) are declared in the same kind of batch by nftDeclare when they
// are missing.

// Maps of ours: mapHostports (node addresses, one per family) and
// mapLocalhost (IPv4 loopback addresses, table ip only).
const (
	mapHostports = "hostports"
	mapLocalhost = "localhost"
)

// nftHostports names the map of one family. Only the table (name, family)
// and the set name reach the kernel: google/nftables encodes an element from
// its raw key and data bytes, so the key and data types need not be known,
// and no GetSetByName round trip is needed.
func nftHostports(v4 bool) *nftables.Set { return nftMap(v4, mapHostports) }

// nftMap names map name of one family (see nftHostports).
func nftMap(v4 bool, name string) *nftables.Set {
	fam := nftables.TableFamilyIPv6
	if v4 {
		fam = nftables.TableFamilyIPv4
	}
	return &nftables.Set{
		Table: &nftables.Table{Name: nftTable, Family: fam},
		Name:  name,
		IsMap: true,
	}
}

// nftMapOf is the map that holds the element of r: mapLocalhost for a
// loopback address, else its family's mapHostports.
func nftMapOf(r flows.Rule) *nftables.Set {
	if r.NodeIP.IsLoopback() {
		return nftMap(true, mapLocalhost)
	}
	return nftHostports(r.NodeIP.Is4())
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
// families if mixed), with the semantics of an `nft -f` of "add element"
// lines: with remove, each element is added then deleted, so that the
// delete succeeds when it is already gone. Each element is its own message,
// in rule order, so that rules repeating a key behave as they do in nft -f. With declare, the
// tables, maps and chains of the families concerned (both with rebuild,
// whose maps are also flushed first) go in the same batch (nftDeclare).
func sendElements(rules []flows.Rule, remove, declare, rebuild bool, opts ...nftables.ConnOption) error {
	c, err := nftables.New(opts...)
	if err != nil {
		return err
	}
	if declare || rebuild {
		for _, v4 := range []bool{true, false} { // ip, then ip6, as the tests' nft text has them
			if rebuild || slices.ContainsFunc(rules, func(r flows.Rule) bool { return r.NodeIP.Is4() == v4 }) {
				for _, m := range nftDeclare(c, v4) {
					if rebuild {
						c.FlushSet(m)
					}
				}
			}
		}
	}
	for _, r := range rules {
		s := nftMapOf(r)
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
// does not exist (ENOENT: first use on the node, or after a flush): they are
// then declared in the batch.
func tablesMissing(err error) bool {
	return errors.Is(err, unix.ENOENT)
}

// nftDeclare adds to c, for one family, the declarations of nft.go: the
// table, its maps, and its chains each with its rules (flushed and added
// again, so that they are never doubled), as nft -f does with "add"
// (idempotent) commands; it returns the maps. Each rule is the netlink form
// nft --debug=netlink shows for its nft text. The DNAT rule
//
//	dnat ip to ip daddr . meta l4proto . th dport map @hostports
//
// loads the concatenated key into consecutive 32-bit registers from
// NFT_REG_1 on, looks it up, and the data (address . port) comes back from
// NFT_REG_1 for the NAT expression.
func nftDeclare(c *nftables.Conn, v4 bool) []*nftables.Set {
	fam, addrType := nftables.TableFamilyIPv6, nftables.TypeIP6Addr
	if v4 {
		fam, addrType = nftables.TableFamilyIPv4, nftables.TypeIPAddr
	}
	t := c.AddTable(&nftables.Table{Name: nftTable, Family: fam})
	names := []string{mapHostports}
	if v4 {
		names = append(names, mapLocalhost)
	}
	var sets []*nftables.Set
	for _, name := range names {
		set := &nftables.Set{Table: t, Name: name, IsMap: true, Concatenation: true,
			KeyType:  nftables.MustConcatSetType(addrType, nftables.TypeInetProto, nftables.TypeInetService),
			DataType: nftables.MustConcatSetType(addrType, nftables.TypeInetService)}
		_ = c.AddSet(set, nil) // fails only on a malformed set, which this is not
		sets = append(sets, set)
	}
	chain := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio int32, rules ...[]expr.Any) {
		accept := nftables.ChainPolicyAccept
		ch := c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook,
			Priority: nftables.ChainPriorityRef(nftables.ChainPriority(prio)), Policy: &accept})
		c.FlushChain(ch)
		for _, r := range rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
		}
	}
	var dnats [][]expr.Any
	for _, s := range sets {
		dnats = append(dnats, dnatByMap(v4, s.Name))
	}
	chain("output", nftables.ChainTypeNAT, nftables.ChainHookOutput, -100, dnats...)
	if v4 {
		chain("postrouting", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, 100, masqLocalnet())
		chain("localnet_in", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, -300,
			dropLocalnet(expr.MetaKeyIIF, ipv4Daddr), dropLocalnet(expr.MetaKeyIIF, ipv4Saddr))
		chain("localnet_out", nftables.ChainTypeFilter, nftables.ChainHookPostrouting, 300,
			dropLocalnet(expr.MetaKeyOIF, ipv4Saddr))
	}
	return sets
}

// dnatByMap is the rule of chain output for map name:
//
//	dnat ip to ip daddr . meta l4proto . th dport map @name
func dnatByMap(v4 bool, name string) []expr.Any {
	nfproto, daddrOff, addrLen := uint32(unix.NFPROTO_IPV6), uint32(24), uint32(16)
	if v4 {
		nfproto, daddrOff, addrLen = uint32(unix.NFPROTO_IPV4), ipv4Daddr, 4
	}
	// 32-bit registers: NFT_REG32_00 (8) is the first word of NFT_REG_1.
	const reg1, reg32 = 1, 8
	protoReg := reg32 + addrLen/4
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: daddrOff, Len: addrLen},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: protoReg},
		&expr.Payload{DestRegister: protoReg + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: name},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: nfproto, RegAddrMin: reg1, RegProtoMin: reg32 + addrLen/4},
	}
}

// Offsets of the IPv4 header's addresses; loopbackIfindex is lo's, the
// same in every network namespace (LOOPBACK_IFINDEX).
const (
	ipv4Saddr       = 12
	ipv4Daddr       = 16
	loopbackIfindex = 1
)

// notLo matches a packet whose interface (iif or oif) is not lo:
//
//	iif != "lo"
func notLo(key expr.MetaKey) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, loopbackIfindex)},
	}
}

// inLocalnet matches a packet whose address at offset off is in
// 127.0.0.0/8 (nft loads the prefix's one byte):
//
//	ip daddr 127.0.0.0/8
func inLocalnet(off uint32) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127}},
	}
}

// dropLocalnet is a rule of the guard chains:
//
//	iif != "lo" ip daddr 127.0.0.0/8 drop
func dropLocalnet(iface expr.MetaKey, off uint32) []expr.Any {
	return slices.Concat(notLo(iface), inLocalnet(off), []expr.Any{&expr.Verdict{Kind: expr.VerdictDrop}})
}

// masqLocalnet is the rule of chain postrouting: a connection of the
// node's own from a loopback address that chain output translated leaves
// with the address of its outgoing interface:
//
//	ip saddr 127.0.0.0/8 oif != "lo" ct status dnat masquerade
func masqLocalnet() []expr.Any {
	return slices.Concat(inLocalnet(ipv4Saddr), notLo(expr.MetaKeyOIF), []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, ipsDstNAT), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Masq{},
	})
}

// ipsDstNAT is IPS_DST_NAT, conntrack's status bit of a connection whose
// destination was translated (nft's "ct status dnat").
const ipsDstNAT = 1 << 5
