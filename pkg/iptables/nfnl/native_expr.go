package nfnl

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// Attributes and values of linux/netfilter/nf_tables.h (and nftables'
// userdata) that golang.org/x/sys/unix does not list.
const (
	nftaTProxyFamily  = 1
	nftaTProxyRegPort = 3
	nftaBitwiseOp     = 6
	nftaBitwiseData   = 7

	// Conntrack states as ct state tests them (NF_CT_STATE_*_BIT).
	nftCtStateInvalid     = 1
	nftCtStateEstablished = 2
	nftCtStateRelated     = 4
)

// nativeRule encodes one rule of the model as nft 1.0.6 does for its text
// in an inet table, expression for expression. nft adds what a match
// depends on once per rule: meta nfproto before the first ip or ip6
// match, meta l4proto before a port match unless the rule already tested
// the protocol. A port match with several ports looks the port up in an
// anonymous set, which the transaction adds just before the rule.
type nativeRule struct {
	rule          // the expressions, with expr.go's helpers
	nfproto uint8 // the family a match required so far, 0: none
	l4proto uint8 // the transport protocol tested so far, 0: none
	sets    []anonSet
	nextSet func() uint32 // the transaction's next set id
}

func encodeNative(r nftables.Rule, nextSet func() uint32) (*nativeRule, error) {
	n := &nativeRule{rule: rule{exprs: attrs{b: make([]byte, 0, 512)}}, nextSet: nextSet}
	for _, e := range r.Exprs {
		if err := n.expr(e); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (n *nativeRule) expr(e nftables.Expr) error {
	switch e := e.(type) {
	case nftables.L4Proto:
		p, err := l4proto(e.Proto)
		if err != nil {
			return err
		}
		n.metaLoad(unix.NFT_META_L4PROTO)
		n.cmp(false, []byte{p})
		n.l4proto = p
	case nftables.Port:
		return n.port(e)
	case nftables.Addr:
		return n.addr(e)
	case nftables.Iface:
		key := uint32(unix.NFT_META_IIFNAME)
		if e.Out {
			key = unix.NFT_META_OIFNAME
		}
		// nft compares the whole IFNAMSIZ buffer: the name, zero-padded.
		name := make([]byte, unix.IFNAMSIZ)
		if copy(name, e.Name) >= unix.IFNAMSIZ {
			return fmt.Errorf("interface name %q is longer than %d bytes", e.Name, unix.IFNAMSIZ-1)
		}
		n.metaLoad(key)
		n.cmp(false, name)
	case nftables.Owner:
		key := uint32(unix.NFT_META_SKUID)
		if e.Kind == iptables.GID {
			key = unix.NFT_META_SKGID
		}
		n.metaLoad(key)
		n.cmp(e.Not, binary.NativeEndian.AppendUint32(nil, e.ID))
	case nftables.CtState:
		bits := uint32(nftCtStateInvalid)
		if e.Established {
			bits = nftCtStateEstablished | nftCtStateRelated
		}
		// A set of flags matches when any is set: (state & bits) != 0.
		n.ctLoad(unix.NFT_CT_STATE)
		n.bitwise(binary.NativeEndian.AppendUint32(nil, bits))
		n.cmp(true, make([]byte, 4))
	case nftables.Mark:
		n.metaLoad(unix.NFT_META_MARK)
		n.cmp(e.Not, binary.NativeEndian.AppendUint32(nil, e.Value))
	case nftables.CtMark:
		n.ctLoad(unix.NFT_CT_MARK)
		n.cmp(false, binary.NativeEndian.AppendUint32(nil, e.Value))
	default:
		return n.statement(e)
	}
	return nil
}

// statement encodes the expressions that act: counter, verdicts, NAT and
// marks. A value a statement sets is loaded into register 1 first.
func (n *nativeRule) statement(e nftables.Expr) error {
	switch e := e.(type) {
	case nftables.Counter:
		n.counter()
	case nftables.Return:
		n.verdict(unix.NFT_RETURN, "")
	case nftables.Accept:
		n.verdict(nfAccept, "")
	case nftables.Drop:
		n.verdict(nfDrop, "")
	case nftables.Jump:
		if e.Chain == "" {
			return fmt.Errorf("jump without a chain")
		}
		n.verdict(unix.NFT_JUMP, e.Chain)
	case nftables.Redirect:
		n.immediate(binary.BigEndian.AppendUint16(nil, e.Port))
		n.add("redir", func(a *attrs) {
			a.u32(unix.NFTA_REDIR_REG_PROTO_MIN, reg1)
			a.u32(unix.NFTA_REDIR_FLAGS, unix.NF_NAT_RANGE_PROTO_SPECIFIED)
		})
	case nftables.TProxy:
		fam := uint32(unix.NFPROTO_IPV4)
		if e.V6 {
			fam = unix.NFPROTO_IPV6
		}
		n.immediate(binary.BigEndian.AppendUint16(nil, e.Port))
		n.add("tproxy", func(a *attrs) {
			a.u32(nftaTProxyFamily, fam)
			a.u32(nftaTProxyRegPort, reg1)
		})
	case nftables.SetMark:
		n.immediate(binary.NativeEndian.AppendUint32(nil, e.Value))
		n.metaSet(unix.NFT_META_MARK)
	case nftables.SaveMark:
		n.metaLoad(unix.NFT_META_MARK)
		n.ctSet(unix.NFT_CT_MARK)
	case nftables.RestoreMark:
		n.ctLoad(unix.NFT_CT_MARK)
		n.metaSet(unix.NFT_META_MARK)
	case nftables.SetZone:
		n.immediate(binary.NativeEndian.AppendUint16(nil, e.Zone))
		n.ctSet(unix.NFT_CT_ZONE)
	default:
		return fmt.Errorf("expression %T: %w", e, ErrUnsupported)
	}
	return nil
}

func l4proto(p iptables.Proto) (uint8, error) {
	switch p {
	case iptables.TCP:
		return unix.IPPROTO_TCP, nil
	case iptables.UDP:
		return unix.IPPROTO_UDP, nil
	}
	return 0, fmt.Errorf("transport protocol %d: %w", p, ErrUnsupported)
}

// port matches a TCP or UDP port, one (cmp) or several (an anonymous
// set), after meta l4proto unless the rule tested the protocol.
func (n *nativeRule) port(e nftables.Port) error {
	p, err := l4proto(e.Proto)
	if err != nil {
		return err
	}
	switch n.l4proto {
	case 0:
		n.metaLoad(unix.NFT_META_L4PROTO)
		n.cmp(false, []byte{p})
		n.l4proto = p
	case p:
	default:
		// As nft: "conflicting protocols specified".
		return fmt.Errorf("a %s port after a match of protocol %d", e.Proto, n.l4proto)
	}
	off := uint32(2)
	if e.Src {
		off = 0
	}
	n.payload(unix.NFT_PAYLOAD_TRANSPORT_HEADER, off, 2)
	switch len(e.Ports) {
	case 0:
		return fmt.Errorf("a %s port match without ports", e.Proto)
	case 1:
		n.cmp(e.Not, binary.BigEndian.AppendUint16(nil, e.Ports[0]))
		return nil
	}
	s := anonSet{id: n.nextSet(), port: e}
	n.sets = append(n.sets, s)
	n.add("lookup", func(a *attrs) {
		a.u32(unix.NFTA_LOOKUP_SREG, reg1)
		a.str(unix.NFTA_LOOKUP_SET, anonSetName)
		a.u32(unix.NFTA_LOOKUP_SET_ID, s.id)
		if e.Not {
			a.u32(unix.NFTA_LOOKUP_FLAGS, unix.NFT_LOOKUP_F_INV)
		}
	})
	return nil
}

// addr matches an IPv4 or IPv6 prefix after meta nfproto, as nft does: a
// prefix that ends on a byte loads only its bytes; any other (/0
// included) loads the whole address through a mask.
func (n *nativeRule) addr(e nftables.Addr) error {
	if !e.Prefix.IsValid() {
		return fmt.Errorf("an address match without a prefix")
	}
	p := e.Prefix.Masked()
	fam, src, dst := uint8(unix.NFPROTO_IPV4), uint32(12), uint32(16)
	if p.Addr().Is6() {
		fam, src, dst = unix.NFPROTO_IPV6, 8, 24
	}
	switch n.nfproto {
	case 0:
		n.metaLoad(unix.NFT_META_NFPROTO)
		n.cmp(false, []byte{fam})
		n.nfproto = fam
	case fam:
	default:
		return fmt.Errorf("%s after a match of the other IP family", p)
	}
	off := dst
	if e.Src {
		off = src
	}
	ip := p.Addr().AsSlice()
	if bits := p.Bits(); bits > 0 && bits%8 == 0 {
		n.payload(unix.NFT_PAYLOAD_NETWORK_HEADER, off, uint32(bits/8)) // #nosec G115 -- at most 16
		n.cmp(e.Not, ip[:bits/8])
		return nil
	}
	n.payload(unix.NFT_PAYLOAD_NETWORK_HEADER, off, uint32(len(ip))) // #nosec G115 -- 4 or 16
	n.bitwise(prefixMask(p.Bits(), len(ip)))
	n.cmp(e.Not, ip)
	return nil
}

// metaLoad loads a meta key into register 1; nft sends the key first
// (expr.go's meta, iptables-nft's order, sends the register first).
func (n *nativeRule) metaLoad(key uint32) {
	n.add("meta", func(a *attrs) {
		a.u32(unix.NFTA_META_KEY, key)
		a.u32(unix.NFTA_META_DREG, reg1)
	})
}

func (n *nativeRule) metaSet(key uint32) {
	n.add("meta", func(a *attrs) {
		a.u32(unix.NFTA_META_KEY, key)
		a.u32(unix.NFTA_META_SREG, reg1)
	})
}

func (n *nativeRule) ctLoad(key uint32) {
	n.add("ct", func(a *attrs) {
		a.u32(unix.NFTA_CT_KEY, key)
		a.u32(unix.NFTA_CT_DREG, reg1)
	})
}

func (n *nativeRule) ctSet(key uint32) {
	n.add("ct", func(a *attrs) {
		a.u32(unix.NFTA_CT_KEY, key)
		a.u32(unix.NFTA_CT_SREG, reg1)
	})
}

// immediate loads a value into register 1.
func (n *nativeRule) immediate(v []byte) {
	n.add("immediate", func(a *attrs) {
		a.u32(unix.NFTA_IMMEDIATE_DREG, reg1)
		a.nest(unix.NFTA_IMMEDIATE_DATA, func(d *attrs) { d.bytes(unix.NFTA_DATA_VALUE, v) })
	})
}
