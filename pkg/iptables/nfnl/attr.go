package nfnl

import (
	"encoding/binary"
)

// attrs builds a netlink attribute stream. Numbers inside nf_tables
// attributes are big-endian; netlink's own headers are host-endian.
type attrs struct{ b []byte }

const nlaHdrLen = 4

func align4(n int) int { return (n + 3) &^ 3 }

func (a *attrs) bytes(typ uint16, v []byte) {
	var h [nlaHdrLen]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(nlaHdrLen+len(v))) // #nosec G115 -- attributes here are at most a few hundred bytes
	binary.NativeEndian.PutUint16(h[2:], typ)
	a.b = append(a.b, h[:]...)
	a.b = append(a.b, v...)
	for len(a.b)%4 != 0 {
		a.b = append(a.b, 0)
	}
}

func (a *attrs) str(typ uint16, s string) { a.bytes(typ, append([]byte(s), 0)) }

func (a *attrs) u32(typ uint16, v uint32) { a.bytes(typ, binary.BigEndian.AppendUint32(nil, v)) }

// nest adds a nested attribute filled by fill.
func (a *attrs) nest(typ uint16, fill func(*attrs)) {
	var in attrs
	fill(&in)
	a.bytes(typ|nlaFNested, in.b)
}

const nlaFNested = 0x8000

// attr is one decoded attribute.
type attr struct {
	typ   uint16 // without the nested and byte-order flags
	value []byte
}

// parseAttrs splits an attribute stream; a malformed tail is dropped.
func parseAttrs(b []byte) []attr {
	var out []attr
	for len(b) >= nlaHdrLen {
		l := int(binary.NativeEndian.Uint16(b[0:]))
		if l < nlaHdrLen || l > len(b) {
			break
		}
		out = append(out, attr{typ: binary.NativeEndian.Uint16(b[2:]) & 0x3fff, value: b[nlaHdrLen:l]})
		b = b[min(align4(l), len(b)):]
	}
	return out
}
