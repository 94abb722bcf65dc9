package openflow

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// compileInstructions renders the text after "actions=" as ovs-ofctl does for
// OpenFlow 1.4: one apply_actions instruction with every action but
// goto_table, then goto_table (which must come last). "drop" is no
// instruction at all.
func compileInstructions(s string) ([]byte, error) {
	if s == "drop" {
		return nil, nil
	}
	items, err := splitTop(s)
	if err != nil {
		return nil, err
	}
	var (
		acts []byte
		out  []byte
	)
	for i, it := range items {
		if t, ok := strings.CutPrefix(it, "goto_table:"); ok {
			if i != len(items)-1 {
				return nil, unsupported("goto_table before other actions")
			}
			n, err := parseNum(t, 8)
			if err != nil {
				return nil, fmt.Errorf("goto_table: %w", err)
			}
			out = binary.BigEndian.AppendUint16(nil, ofpitGotoTable)
			out = append(binary.BigEndian.AppendUint16(out, 8), uint8(n), 0, 0, 0)
			continue
		}
		a, err := compileAction(it, false)
		if err != nil {
			return nil, err
		}
		acts = append(acts, a...)
	}
	if len(acts) > 0 {
		apply := binary.BigEndian.AppendUint16(nil, ofpitApply)
		apply = binary.BigEndian.AppendUint16(apply, uint16(8+len(acts)))
		out = append(append(append(apply, 0, 0, 0, 0), acts...), out...)
	}
	return out, nil
}

// compileAction renders one action; inCT restricts it to what ct(exec(...))
// may hold (OVS itself checks that they write ct_mark or ct_label).
func compileAction(s string, inCT bool) ([]byte, error) {
	name, arg, _ := strings.Cut(s, ":")
	switch {
	case name == "move":
		return compileMove(arg)
	case name == "load":
		return compileLoad(arg)
	case name == "set_field":
		return compileSetField(arg)
	case inCT:
		return nil, unsupported("action %q inside ct(exec(...))", s)
	case s == "NORMAL":
		return output(ofppNormal), nil
	case name == "output" && strings.HasSuffix(arg, "]"):
		hdr, ofs, nbits, err := parseSubfield(arg)
		if err != nil {
			return nil, err
		}
		b := nxAction(nxastOutputReg, 24)
		b = binary.BigEndian.AppendUint16(b, ofs<<6|(nbits-1))
		b = binary.BigEndian.AppendUint32(b, hdr)
		b = binary.BigEndian.AppendUint16(b, 0xffff) // max_len, as ovs-ofctl sets it
		return append(b, 0, 0, 0, 0, 0, 0), nil
	case name == "output":
		n, err := parsePortNum(arg)
		if err != nil {
			return nil, fmt.Errorf("output: %w", err)
		}
		return output(n), nil
	case strings.HasPrefix(s, "resubmit(,") && strings.HasSuffix(s, ")"):
		n, err := parseNum(s[len("resubmit(,"):len(s)-1], 8)
		if err != nil {
			return nil, fmt.Errorf("resubmit: %w", err)
		}
		if n == ofpttAll {
			return nil, unsupported("resubmit to table 255")
		}
		b := nxAction(nxastResubmitTbl, 16)
		b = binary.BigEndian.AppendUint16(b, ofp10InPort)
		return append(b, uint8(n), 0, 0, 0), nil
	case strings.HasPrefix(s, "ct(") && strings.HasSuffix(s, ")"):
		return compileCT(s[3 : len(s)-1])
	}
	return nil, unsupported("action %q", s)
}

// output renders OFPAT_OUTPUT with max_len 0, as ovs-ofctl does for ports
// other than CONTROLLER.
func output(port uint32) []byte {
	b := binary.BigEndian.AppendUint16(nil, ofpatOutput)
	b = binary.BigEndian.AppendUint16(b, 16)
	b = binary.BigEndian.AppendUint32(b, port)
	return append(b, 0, 0, 0, 0, 0, 0, 0, 0)
}

// nxAction starts a Nicira extension action of length n (a multiple of 8).
func nxAction(subtype, n uint16) []byte {
	b := make([]byte, 0, n)
	b = binary.BigEndian.AppendUint16(b, ofpatExperimentr)
	b = binary.BigEndian.AppendUint16(b, n)
	b = binary.BigEndian.AppendUint32(b, nxVendor)
	return binary.BigEndian.AppendUint16(b, subtype)
}

// compileMove renders "SRC[..]->DST[..]" as NXAST_REG_MOVE.
func compileMove(arg string) ([]byte, error) {
	src, dst, ok := strings.Cut(arg, "->")
	if !ok {
		return nil, unsupported("move %q", arg)
	}
	sh, sofs, sbits, err := parseSubfield(src)
	if err != nil {
		return nil, err
	}
	dh, dofs, dbits, err := parseSubfield(dst)
	if err != nil {
		return nil, err
	}
	if sbits != dbits {
		return nil, fmt.Errorf("move %q: source is %d bits wide, destination %d", arg, sbits, dbits)
	}
	b := nxAction(nxastRegMove, 24)
	b = binary.BigEndian.AppendUint16(b, sbits)
	b = binary.BigEndian.AppendUint16(b, sofs)
	b = binary.BigEndian.AppendUint16(b, dofs)
	b = binary.BigEndian.AppendUint32(b, sh)
	return binary.BigEndian.AppendUint32(b, dh), nil
}

// compileLoad renders "VALUE->DST[..]" as NXAST_REG_LOAD, which is what
// ovs-ofctl sends for load: (and what makes OVS print it back as load:).
func compileLoad(arg string) ([]byte, error) {
	v, dst, ok := strings.Cut(arg, "->")
	if !ok {
		return nil, unsupported("load %q", arg)
	}
	hdr, ofs, nbits, err := parseSubfield(dst)
	if err != nil {
		return nil, err
	}
	if nbits > 64 {
		return nil, unsupported("load into %d bits", nbits)
	}
	n, err := parseNum(v, 64)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if nbits < 64 && n>>nbits != 0 {
		return nil, fmt.Errorf("load: value %s does not fit into %d bits", v, nbits)
	}
	b := nxAction(nxastRegLoad, 24)
	b = binary.BigEndian.AppendUint16(b, ofs<<6|(nbits-1))
	b = binary.BigEndian.AppendUint32(b, hdr)
	return binary.BigEndian.AppendUint64(b, n), nil
}

// compileSetField renders "MAC->eth_dst" or "MAC->eth_src" as OFPAT_SET_FIELD.
func compileSetField(arg string) ([]byte, error) {
	v, dst, _ := strings.Cut(arg, "->")
	field := map[string]uint8{"eth_dst": 3, "eth_src": 4}[dst] // OXM_OF_ETH_*
	if field == 0 {
		return nil, unsupported("set_field to %q", dst)
	}
	mac, err := parseMAC(v)
	if err != nil {
		return nil, fmt.Errorf("set_field: %w", err)
	}
	b := binary.BigEndian.AppendUint16(nil, ofpatSetField)
	b = binary.BigEndian.AppendUint16(b, 16)
	return pad8(append(b, oxm(classBasic, field, mac, nil)...)), nil
}

// parseSubfield reads "NXM_..[]", "NXM_..[N]" or "NXM_..[A..B]" and returns
// the field's NXM header, the offset and the number of bits.
func parseSubfield(s string) (hdr uint32, ofs, nbits uint16, err error) {
	name, rng, ok := strings.Cut(s, "[")
	f, known := nxmFields[name]
	if !ok || !known || !strings.HasSuffix(rng, "]") {
		return 0, 0, 0, unsupported("field %q", s)
	}
	width := uint64(f.bytes * 8)
	lo, hi := uint64(0), width-1
	if rng = rng[:len(rng)-1]; rng != "" {
		a, b, isRange := strings.Cut(rng, "..")
		if !isRange {
			b = a
		}
		if lo, err = parseNum(a, 8); err == nil {
			hi, err = parseNum(b, 8)
		}
		if err != nil || lo > hi || hi >= width {
			return 0, 0, 0, fmt.Errorf("malformed bit range %q", s)
		}
	}
	hdr = uint32(f.class)<<16 | uint32(f.field)<<9 | uint32(f.bytes)
	return hdr, uint16(lo), uint16(hi - lo + 1), nil
}

// compileCT renders the arguments of ct(...) as NXAST_CT with its nested
// nat and exec actions, in the order written (as ovs-ofctl nests them).
func compileCT(s string) ([]byte, error) {
	args, err := splitTop(s)
	if err != nil {
		return nil, err
	}
	var (
		flags  uint16
		zone   uint64
		table  uint64 = nxCTRecircNone
		nested []byte
		seen   = map[string]bool{}
	)
	for _, a := range args {
		k, v, _ := strings.Cut(a, "=")
		if strings.HasPrefix(a, "nat(") || strings.HasPrefix(a, "exec(") {
			k, _, _ = strings.Cut(a, "(")
		}
		if seen[k] {
			return nil, unsupported("ct argument %q given twice", k)
		}
		seen[k] = true
		switch {
		case a == "commit":
			flags |= nxCTCommit
		case k == "zone" && (v == "" || v[0] < '0' || v[0] > '9'):
			return nil, unsupported("ct zone from a field %q", v)
		case k == "zone":
			if zone, err = parseNum(v, 16); err != nil {
				return nil, fmt.Errorf("ct zone: %w", err)
			}
		case k == "table":
			if table, err = parseNum(v, 8); err != nil {
				return nil, fmt.Errorf("ct table: %w", err)
			}
		case a == "nat" || strings.HasPrefix(a, "nat(") && strings.HasSuffix(a, ")"):
			nat, err := compileNAT(strings.TrimSuffix(strings.TrimPrefix(a, "nat("), ")"))
			if err != nil {
				return nil, err
			}
			nested = append(nested, nat...)
		case strings.HasPrefix(a, "exec(") && strings.HasSuffix(a, ")"):
			acts, err := splitTop(a[5 : len(a)-1])
			if err != nil {
				return nil, err
			}
			for _, e := range acts {
				b, err := compileAction(e, true)
				if err != nil {
					return nil, err
				}
				nested = append(nested, b...)
			}
		default:
			return nil, unsupported("ct argument %q", a)
		}
	}
	b := nxAction(nxastCT, uint16(24+len(nested)))
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint32(b, 0) // zone_src: immediate zone
	b = binary.BigEndian.AppendUint16(b, uint16(zone))
	b = append(b, uint8(table), 0, 0, 0, 0, 0) // recirc_table, pad, alg 0
	return append(b, nested...), nil
}

// compileNAT renders "" (nat), "src=A", "dst=A", "src=A:P" or "dst=A:P" (A an
// IPv4 address or a bracketed IPv6 address) as NXAST_NAT. Like ovs-ofctl it
// leaves out a zero address or port.
func compileNAT(s string) ([]byte, error) {
	var (
		flags, present uint16
		params         []byte
	)
	if s == "nat" {
		s = ""
	}
	if s != "" {
		dir, addr, _ := strings.Cut(s, "=")
		switch dir {
		case "src":
			flags = nxNATSrc
		case "dst":
			flags = nxNATDst
		default:
			return nil, unsupported("nat(%s)", s)
		}
		if addr == "" || strings.ContainsAny(addr, "-,") {
			return nil, unsupported("nat(%s)", s)
		}
		var (
			ip   netip.Addr
			port uint64
			err  error
		)
		if strings.HasPrefix(addr, "[") {
			host, p, _ := strings.Cut(addr[1:], "]")
			if ip, err = netip.ParseAddr(host); err == nil && !ip.Is6() {
				err = fmt.Errorf("not IPv6")
			}
			if err == nil && p != "" {
				port, err = parsePort(p)
			}
		} else {
			host, p, hasPort := strings.Cut(addr, ":")
			if ip, err = netip.ParseAddr(host); err == nil && !ip.Is4() {
				err = fmt.Errorf("not IPv4")
			}
			if err == nil && hasPort {
				port, err = parsePort(":" + p)
			}
		}
		if err != nil || ip.Zone() != "" {
			return nil, fmt.Errorf("malformed nat address %q", addr)
		}
		switch {
		case ip.Is4() && !ip.IsUnspecified():
			present |= nxNATIPv4Min
		case ip.Is6() && !ip.IsUnspecified():
			present |= nxNATIPv6Min
		}
		if present != 0 {
			params = ip.AsSlice()
		}
		if port != 0 {
			present |= nxNATProtoMin
			params = binary.BigEndian.AppendUint16(params, uint16(port))
		}
	}
	b := nxAction(nxastNAT, 0)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint16(b, present)
	b = pad8(append(b, params...))
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b, nil
}

// parsePort reads ":PORT".
func parsePort(s string) (uint64, error) {
	p, ok := strings.CutPrefix(s, ":")
	if !ok {
		return 0, fmt.Errorf("malformed port %q", s)
	}
	return parseNum(p, 16)
}

// splitTop splits s at the commas outside parentheses.
func splitTop(s string) ([]string, error) {
	var (
		out   []string
		depth int
		start int
	)
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			if depth--; depth < 0 {
				return nil, unsupported("unbalanced parentheses in %q", s)
			}
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, unsupported("unbalanced parentheses in %q", s)
	}
	out = append(out, s[start:])
	for _, it := range out {
		if it == "" {
			return nil, unsupported("empty item in %q", s)
		}
	}
	return out, nil
}
