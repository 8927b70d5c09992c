package nfnl

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"istio-cni.local/istio-cni/pkg/iptables"
	"istio-cni.local/istio-cni/pkg/iptables/nftables"
)

// anonSet is one anonymous set of ports a rule looks up: nft makes one
// for `tcp dport != { 53, 15008 }`, and the transaction adds it (NEWSET,
// then NEWSETELEM) just before the rule, which names it by id.
type anonSet struct {
	id   uint32
	port nftables.Port
}

// typeInetService is nft's datatype of a TCP or UDP port (TYPE_INET_SERVICE).
const typeInetService = 13

// anonSetName is the name nft gives an anonymous set: the kernel
// replaces %d with the first free number of the table.
const anonSetName = "__set%d"

// Set flags nft gives a rule's anonymous set: constant, anonymous.
const anonSetFlags = unix.NFT_SET_ANONYMOUS | unix.NFT_SET_CONSTANT

// setAttrs are a NEWSET's attributes for an anonymous set of ports, as
// nft sends them; the userdata tells nft how to print the set (the key's
// byte order, and that it holds what `tcp dport` loads).
func (s anonSet) setAttrs(a *attrs, table string) {
	a.str(unix.NFTA_SET_TABLE, table)
	a.str(unix.NFTA_SET_NAME, anonSetName)
	a.u32(unix.NFTA_SET_FLAGS, anonSetFlags)
	a.u32(unix.NFTA_SET_KEY_TYPE, typeInetService)
	a.u32(unix.NFTA_SET_KEY_LEN, 2)
	a.u32(unix.NFTA_SET_ID, s.id)
	a.nest(unix.NFTA_SET_DESC, func(d *attrs) {
		d.u32(unix.NFTA_SET_DESC_SIZE, uint32(len(s.port.Ports))) // #nosec G115 -- a few ports
	})
	a.bytes(unix.NFTA_SET_USERDATA, s.userdata())
}

// nftables' userdata TLVs (libnftnl's NFTNL_UDATA_SET_* and nft's
// payload typeof): a one-byte type, a one-byte length, the value.
const (
	udataSetKeyByteorder = 0
	udataSetKeyTypeof    = 3
	udataTypeofExpr      = 0
	udataTypeofData      = 1
	udataPayloadDesc     = 0
	udataPayloadType     = 1

	nftByteorderBigEndian = 2
	nftExprPayload        = 7 // nft's EXPR_PAYLOAD
	nftProtoDescUDP       = 6 // nft's PROTO_DESC_UDP
	nftProtoDescTCP       = 8 // nft's PROTO_DESC_TCP
	nftPortSport          = 1 // TCPHDR_SPORT, UDPHDR_SPORT
	nftPortDport          = 2
)

func (s anonSet) userdata() []byte {
	tlv := func(b []byte, typ byte, v []byte) []byte {
		return append(append(b, typ, byte(len(v))), v...) // #nosec G115 -- at most 20 bytes
	}
	u32 := func(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
	desc, field := uint32(nftProtoDescTCP), uint32(nftPortDport)
	if s.port.Proto == iptables.UDP {
		desc = nftProtoDescUDP
	}
	if s.port.Src {
		field = nftPortSport
	}
	payload := tlv(tlv(nil, udataPayloadDesc, u32(desc)), udataPayloadType, u32(field))
	typeof := tlv(tlv(nil, udataTypeofExpr, u32(nftExprPayload)), udataTypeofData, payload)
	return tlv(tlv(nil, udataSetKeyByteorder, u32(nftByteorderBigEndian)), udataSetKeyTypeof, typeof)
}

// elemAttrs are a NEWSETELEM's attributes: the set's ports, in order,
// the nth's attribute numbered n as libnftnl numbers them (the kernel
// reads any).
func (s anonSet) elemAttrs(a *attrs, table string) {
	a.str(unix.NFTA_SET_ELEM_LIST_TABLE, table)
	a.str(unix.NFTA_SET_ELEM_LIST_SET, anonSetName)
	a.u32(unix.NFTA_SET_ELEM_LIST_SET_ID, s.id)
	a.nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(l *attrs) {
		for i, p := range s.port.Ports {
			l.nest(uint16(i+1), func(e *attrs) { // #nosec G115 -- a few ports
				e.nest(unix.NFTA_SET_ELEM_KEY, func(k *attrs) {
					k.bytes(unix.NFTA_DATA_VALUE, binary.BigEndian.AppendUint16(nil, p))
				})
			})
		}
	})
}
