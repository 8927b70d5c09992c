package nfnl

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/xtinfo"
)

// ErrUnsupported means a rule has a part this package does not encode;
// the caller writes the ruleset with iptables-restore instead.
var ErrUnsupported = errors.New("not encodable over netlink")

// rule is one rule's expressions and the compat attributes xt extensions
// check the protocol with.
type rule struct {
	exprs  attrs // the NFTA_LIST_ELEMs of NFTA_RULE_EXPRESSIONS
	proto  uint8
	layout Layout
}

func (r *rule) add(name string, fill func(*attrs)) {
	r.exprs.nest(unix.NFTA_LIST_ELEM, func(e *attrs) {
		e.str(unix.NFTA_EXPR_NAME, name)
		e.nest(unix.NFTA_EXPR_DATA, fill)
	})
}

// Registers: NFT_REG_VERDICT and the first 16-byte data register, the
// only ones iptables uses.
const (
	regVerdict = 0
	reg1       = 1
)

func (r *rule) meta(key uint32) {
	r.add("meta", func(a *attrs) {
		a.u32(unix.NFTA_META_DREG, reg1)
		a.u32(unix.NFTA_META_KEY, key)
	})
}

func (r *rule) cmp(neq bool, v []byte) {
	op := uint32(unix.NFT_CMP_EQ)
	if neq {
		op = unix.NFT_CMP_NEQ
	}
	r.add("cmp", func(a *attrs) {
		a.u32(unix.NFTA_CMP_SREG, reg1)
		a.u32(unix.NFTA_CMP_OP, op)
		a.nest(unix.NFTA_CMP_DATA, func(d *attrs) { d.bytes(unix.NFTA_DATA_VALUE, v) })
	})
}

func (r *rule) payload(base, offset, length uint32) {
	r.add("payload", func(a *attrs) {
		a.u32(unix.NFTA_PAYLOAD_DREG, reg1)
		a.u32(unix.NFTA_PAYLOAD_BASE, base)
		a.u32(unix.NFTA_PAYLOAD_OFFSET, offset)
		a.u32(unix.NFTA_PAYLOAD_LEN, length)
	})
}

func (r *rule) bitwise(mask []byte) {
	r.add("bitwise", func(a *attrs) {
		a.u32(unix.NFTA_BITWISE_SREG, reg1)
		a.u32(unix.NFTA_BITWISE_DREG, reg1)
		a.u32(unix.NFTA_BITWISE_LEN, uint32(len(mask))) // #nosec G115 -- 4 or 16
		a.nest(unix.NFTA_BITWISE_MASK, func(d *attrs) { d.bytes(unix.NFTA_DATA_VALUE, mask) })
		a.nest(unix.NFTA_BITWISE_XOR, func(d *attrs) { d.bytes(unix.NFTA_DATA_VALUE, make([]byte, len(mask))) })
	})
}

func (r *rule) counter() { r.add("counter", func(*attrs) {}) }

func (r *rule) verdict(code int32, chain string) {
	r.add("immediate", func(a *attrs) {
		a.u32(unix.NFTA_IMMEDIATE_DREG, regVerdict)
		a.nest(unix.NFTA_IMMEDIATE_DATA, func(d *attrs) {
			d.nest(unix.NFTA_DATA_VERDICT, func(v *attrs) {
				v.u32(unix.NFTA_VERDICT_CODE, uint32(code)) // #nosec G115 -- verdicts are negative ints on the wire
				if chain != "" {
					v.str(unix.NFTA_VERDICT_CHAIN, chain)
				}
			})
		})
	})
}

// xt adds an x_tables match or target run through nft_compat, as
// iptables-nft does for extensions it has no native translation for.
func (r *rule) xt(kind string, ext xtinfo.Ext) {
	nameAttr, revAttr, infoAttr := uint16(unix.NFTA_MATCH_NAME), uint16(unix.NFTA_MATCH_REV), uint16(unix.NFTA_MATCH_INFO)
	if kind == "target" {
		nameAttr, revAttr, infoAttr = unix.NFTA_TARGET_NAME, unix.NFTA_TARGET_REV, unix.NFTA_TARGET_INFO
	}
	r.add(kind, func(a *attrs) {
		a.str(nameAttr, ext.Name)
		a.u32(revAttr, uint32(ext.Rev))
		a.bytes(infoAttr, ext.Info)
	})
}

// encodeRule translates one rule into expressions in the order and form
// the layout's release writes them: interfaces, protocol, addresses (or
// addresses first), the matches in order, a counter, the target.
func encodeRule(fam iptables.Family, ir iptables.Rule, l Layout) (*rule, error) {
	r := &rule{exprs: attrs{b: make([]byte, 0, 512)}, layout: l}
	switch ir.Proto {
	case iptables.AnyProto:
	case iptables.TCP:
		r.proto = unix.IPPROTO_TCP
	case iptables.UDP:
		r.proto = unix.IPPROTO_UDP
	default:
		return nil, fmt.Errorf("protocol %v: %w", ir.Proto, ErrUnsupported)
	}
	ifaces := func() {
		r.iface(unix.NFT_META_IIFNAME, ir.In)
		r.iface(unix.NFT_META_OIFNAME, ir.Out)
	}
	if !l.addrsFirst {
		ifaces()
		r.protocol(fam)
	}
	srcOff, dstOff, addrLen := uint32(12), uint32(16), 4
	if fam == iptables.IPv6 {
		srcOff, dstOff, addrLen = 8, 24, 16
	}
	for _, x := range []struct {
		off uint32
		a   iptables.Addr
	}{{srcOff, ir.Src}, {dstOff, ir.Dst}} {
		if err := r.addr(x.off, addrLen, x.a); err != nil {
			return nil, err
		}
	}
	if l.addrsFirst {
		ifaces()
		r.protocol(fam)
	}
	for _, m := range ir.Matches {
		if err := r.match(m); err != nil {
			return nil, err
		}
	}
	r.counter()
	if err := r.target(fam, ir.Target); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rule) iface(key uint32, i iptables.Iface) {
	if i.Name == "" {
		return
	}
	r.meta(key)
	r.cmp(i.Not, append([]byte(i.Name), 0))
}

// protocol matches -p: meta l4proto, or IPv4's protocol field.
func (r *rule) protocol(fam iptables.Family) {
	if r.proto == 0 {
		return
	}
	if r.layout.protoPayload && fam == iptables.IPv4 {
		r.payload(unix.NFT_PAYLOAD_NETWORK_HEADER, 9, 1)
	} else {
		r.meta(unix.NFT_META_L4PROTO)
	}
	r.cmp(false, []byte{r.proto})
}

// addr matches a prefix as iptables-nft does: a load of the prefix's whole
// bytes when it ends on a byte, else of the whole address through a mask.
func (r *rule) addr(off uint32, addrLen int, a iptables.Addr) error {
	if !a.Prefix.IsValid() || a.Prefix.Bits() == 0 {
		return nil
	}
	p := a.Prefix.Masked()
	if p.Addr().BitLen() != addrLen*8 {
		return fmt.Errorf("address %s in a %d-byte family: %w", p, addrLen, ErrUnsupported)
	}
	ip := p.Addr().AsSlice()
	if p.Bits()%8 == 0 {
		n := p.Bits() / 8
		r.payload(unix.NFT_PAYLOAD_NETWORK_HEADER, off, uint32(n)) // #nosec G115 -- at most 16
		r.cmp(a.Not, ip[:n])
		return nil
	}
	r.payload(unix.NFT_PAYLOAD_NETWORK_HEADER, off, uint32(addrLen)) // #nosec G115 -- 4 or 16
	r.bitwise(prefixMask(p.Bits(), addrLen))
	r.cmp(a.Not, ip)
	return nil
}

func prefixMask(bits, n int) []byte {
	m := make([]byte, n)
	for i := range m {
		switch {
		case bits >= 8:
			m[i] = 0xff
			bits -= 8
		case bits > 0:
			m[i] = byte(0xff << (8 - bits))
			bits = 0
		}
	}
	return m
}

func (r *rule) match(m iptables.Match) error {
	switch m := m.(type) {
	case iptables.DPort:
		return r.port(m.Proto, true, m.Port, m.Not)
	case iptables.SPort:
		return r.port(m.Proto, false, m.Port, false)
	case iptables.Mark:
		if !r.layout.xtMark {
			r.meta(unix.NFT_META_MARK)
			r.cmp(m.Not, binary.NativeEndian.AppendUint32(nil, m.Value))
			break
		}
		return r.xtMatch(m)
	default:
		return r.xtMatch(m)
	}
	return nil
}

// xtMatch is a match as its x_tables extension, in a compat expression.
func (r *rule) xtMatch(m iptables.Match) error {
	ext, err := xtinfo.Match(m)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	r.xt("match", ext)
	return nil
}

// port matches a TCP or UDP port (the destination's, or the source's):
// natively, the rule's -p having tested the protocol, or with the tcp or
// udp match where the layout says.
func (r *rule) port(p iptables.Proto, dst bool, port uint16, not bool) error {
	want := map[iptables.Proto]uint8{iptables.TCP: unix.IPPROTO_TCP, iptables.UDP: unix.IPPROTO_UDP}[p]
	if want == 0 || want != r.proto {
		return fmt.Errorf("-m %s port match in a rule of protocol %d: %w", p, r.proto, ErrUnsupported)
	}
	if r.layout.xtPorts {
		if dst {
			return r.xtMatch(iptables.DPort{Proto: p, Port: port, Not: not})
		}
		return r.xtMatch(iptables.SPort{Proto: p, Port: port})
	}
	off := uint32(0)
	if dst {
		off = 2
	}
	r.payload(unix.NFT_PAYLOAD_TRANSPORT_HEADER, off, 2)
	r.cmp(not, binary.BigEndian.AppendUint16(nil, port))
	return nil
}

func (r *rule) target(fam iptables.Family, t iptables.Target) error {
	switch t := t.(type) {
	case iptables.Jump:
		if t.Chain == "" {
			return fmt.Errorf("jump without a chain: %w", ErrUnsupported)
		}
		r.verdict(unix.NFT_JUMP, t.Chain)
	case iptables.Return:
		r.verdict(unix.NFT_RETURN, "")
	case iptables.Accept:
		r.verdict(nfAccept, "")
	case iptables.Drop:
		r.verdict(nfDrop, "")
	default:
		ext, err := xtinfo.Target(fam, t)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
		r.xt("target", ext)
	}
	return nil
}
