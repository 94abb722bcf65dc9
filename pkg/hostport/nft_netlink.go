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
	sets := [2]*nftables.Set{nftHostports(false), nftHostports(true)}
	if declare || rebuild {
		for _, v4 := range []bool{true, false} { // ip, then ip6, as the tests' nft text has them
			i := 0
			if v4 {
				i = 1
			}
			if rebuild || slices.ContainsFunc(rules, func(r flows.Rule) bool { return r.NodeIP.Is4() == v4 }) {
				sets[i] = nftDeclare(c, v4)
				if rebuild {
					c.FlushSet(sets[i])
				}
			}
		}
	}
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
// does not exist (ENOENT: first use on the node, or after a flush): they are
// then declared in the batch.
func tablesMissing(err error) bool {
	return errors.Is(err, unix.ENOENT)
}

// nftDeclare adds to c, for one family, the declarations of nft.go: the table,
// the map, the output chain hooked at nat/output with its single rule
// (flushed and added again, so that it is never doubled), as nft -f does
// with "add" (idempotent) commands. The rule is the netlink form of
//
//	dnat ip to ip daddr . meta l4proto . th dport map @hostports
//
// as nft --debug=netlink shows it: the concatenated key is loaded into
// consecutive 32-bit registers from NFT_REG_1 on, looked up, and the data
// (address . port) comes back from NFT_REG_1 for the NAT expression.
func nftDeclare(c *nftables.Conn, v4 bool) *nftables.Set {
	fam, addrType, nfproto := nftables.TableFamilyIPv6, nftables.TypeIP6Addr, uint32(unix.NFPROTO_IPV6)
	daddrOff, addrLen := uint32(24), uint32(16)
	if v4 {
		fam, addrType, nfproto = nftables.TableFamilyIPv4, nftables.TypeIPAddr, uint32(unix.NFPROTO_IPV4)
		daddrOff, addrLen = 16, 4
	}
	t := c.AddTable(&nftables.Table{Name: nftTable, Family: fam})
	set := &nftables.Set{Table: t, Name: "hostports", IsMap: true, Concatenation: true,
		KeyType:  nftables.MustConcatSetType(addrType, nftables.TypeInetProto, nftables.TypeInetService),
		DataType: nftables.MustConcatSetType(addrType, nftables.TypeInetService)}
	_ = c.AddSet(set, nil) // fails only on a malformed set, which this is not
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(-100), Policy: &accept})
	c.FlushChain(ch)
	// 32-bit registers: NFT_REG32_00 (8) is the first word of NFT_REG_1.
	const reg1, reg32 = 1, 8
	protoReg := reg32 + addrLen/4
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: daddrOff, Len: addrLen},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: protoReg},
		&expr.Payload{DestRegister: protoReg + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Lookup{SourceRegister: reg1, DestRegister: reg1, IsDestRegSet: true, SetName: set.Name},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: nfproto, RegAddrMin: reg1, RegProtoMin: reg32 + addrLen/4},
	}})
	return set
}
