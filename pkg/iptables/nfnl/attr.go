package nfnl

import (
	"encoding/binary"
)

// attrs builds a netlink attribute stream. Numbers inside nf_tables
// attributes are big-endian; netlink's own headers are host-endian.
type attrs struct{ b []byte }

const nlaHdrLen = 4

func align4(n int) int { return (n + 3) &^ 3 }

// An ADD encodes every rule it writes while the pod waits: attributes
// are appended in place, nests included, with no buffer of their own.

// head appends an attribute header whose length is patched by end.
func (a *attrs) head(typ uint16) int {
	at := len(a.b)
	a.b = binary.NativeEndian.AppendUint16(a.b, 0)
	a.b = binary.NativeEndian.AppendUint16(a.b, typ)
	return at
}

// end sets the length of the attribute begun at at and pads it to 4 bytes.
func (a *attrs) end(at int) {
	binary.NativeEndian.PutUint16(a.b[at:], uint16(len(a.b)-at)) // #nosec G115 -- attributes here are at most a few hundred bytes
	a.b = append(a.b, pad[:align4(len(a.b))-len(a.b)]...)
}

var pad [3]byte

func (a *attrs) bytes(typ uint16, v []byte) {
	at := a.head(typ)
	a.b = append(a.b, v...)
	a.end(at)
}

func (a *attrs) str(typ uint16, s string) {
	at := a.head(typ)
	a.b = append(append(a.b, s...), 0)
	a.end(at)
}

func (a *attrs) u32(typ uint16, v uint32) {
	at := a.head(typ)
	a.b = binary.BigEndian.AppendUint32(a.b, v)
	a.end(at)
}

func (a *attrs) u64(typ uint16, v uint64) {
	at := a.head(typ)
	a.b = binary.BigEndian.AppendUint64(a.b, v)
	a.end(at)
}

// nest adds a nested attribute filled by fill.
func (a *attrs) nest(typ uint16, fill func(*attrs)) {
	at := a.head(typ | nlaFNested)
	fill(a)
	a.end(at)
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
