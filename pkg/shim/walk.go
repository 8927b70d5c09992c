package shim

import (
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// walkEntry reads the entry from the runtime's stdin in one pass, without
// reflection, checking the JSON grammar as it goes. The shim links no
// encoding/json: its start and first decode in a fresh process cost a
// pod start more than a legacy node's ADD was over 1.1x a bare restore
// (BENCHMARKS.md).
//
// It reads only the plain shapes the plugin's own entry has. ok is false
// for anything else (a document json.Valid refuses; an escape or a byte
// outside printable ASCII in a key of the entry, its prevResult or an
// ips element, since such a key may name a field once decoded and folded,
// or in a value it reads; a repeated key; a null or a type a field it
// reads does not take; nesting deeper than maxDepth), and the shim hands
// the ADD to the full plugin, which reads it with encoding/json. When ok, the document is valid JSON and
// the entry is what json.Unmarshal reads: FuzzWalkEntry checks both.
func walkEntry(doc []byte) (entry, bool) {
	var e entry
	w := walker{doc: doc}
	seen := map[string]bool{}
	ok := w.object(func(key string, plain bool) bool {
		name := field(key, "cniVersion", "pod_socket", "cache_dir", "iptables_backend", "native_nftables", "prevResult")
		switch {
		case !plain:
			return false // it may name a field, as json.Unmarshal decodes and folds it
		case name == "":
			return w.skip()
		case seen[name]:
			return false // json.Unmarshal's merge of the two is its to read
		}
		seen[name] = true
		switch name {
		case "cniVersion":
			return w.str(&e.CNIVersion)
		case "pod_socket":
			return w.str(&e.PodSocket)
		case "cache_dir":
			return w.str(&e.CacheDir)
		case "iptables_backend":
			var s string
			ok := w.str(&s)
			e.IptablesBackend = release.Backend(s)
			return ok
		case "native_nftables":
			return w.boolean(&e.NativeNftables)
		default:
			e.PrevResult = &prevResult{}
			return w.prevResult(e.PrevResult)
		}
	})
	return e, ok && w.end()
}

// walkVersion reads the document's cniVersion for an error result, as
// json.Unmarshal reads it on past fields of the wrong type, for what the
// walker reads: the last plain string under a plain key that names it. A
// version escaped or under an escaped key is not read (libcni does not
// check an error's version); ok is false for a document that is not a
// valid JSON object, or nests deeper than maxDepth.
func walkVersion(doc []byte) (v string, ok bool) {
	w := walker{doc: doc}
	ok = w.object(func(key string, plain bool) bool {
		var s string
		if plain && field(key, "cniVersion") != "" && w.str(&s) {
			v = s
			return true
		}
		return w.skip()
	})
	return v, ok && w.end()
}

// prevResult reads the primary's result: its ips' addresses.
func (w *walker) prevResult(r *prevResult) bool {
	return w.object(func(key string, plain bool) bool {
		switch {
		case !plain:
			return false
		case field(key, "ips") == "":
			return w.skip()
		case r.IPs != nil:
			return false
		}
		r.IPs = []prevIP{} // what json.Unmarshal makes of [] too
		return w.array(func() bool {
			var ip prevIP
			had := false
			ok := w.object(func(key string, plain bool) bool {
				switch {
				case !plain:
					return false
				case field(key, "address") == "":
					return w.skip()
				case had:
					return false
				}
				had = true
				return w.str(&ip.Address)
			})
			r.IPs = append(r.IPs, ip)
			return ok
		})
	})
}

// field is the one of fields key names, "" if none: matched as
// encoding/json matches, exactly or regardless of case (for a plain key,
// printable ASCII, its folding is ASCII's).
func field(key string, fields ...string) string {
	for _, f := range fields {
		if strings.EqualFold(key, f) {
			return f
		}
	}
	return ""
}

// maxDepth bounds the nesting the walker follows (encoding/json's is
// 10000); an entry with its primary's result nests four deep.
const maxDepth = 64

// walker steps through a JSON document (RFC 8259, as json.Valid takes
// it), giving up at the first byte the grammar does not allow.
type walker struct {
	doc   []byte
	i     int
	depth int
}

func (w *walker) space() {
	for w.i < len(w.doc) && (w.doc[w.i] == ' ' || w.doc[w.i] == '\t' || w.doc[w.i] == '\n' || w.doc[w.i] == '\r') {
		w.i++
	}
}

// next is the first byte of the next token, 0 at the end.
func (w *walker) next() byte {
	w.space()
	if w.i == len(w.doc) {
		return 0
	}
	return w.doc[w.i]
}

// end says whether only space is left.
func (w *walker) end() bool { return w.next() == 0 && w.i == len(w.doc) }

// object calls member for each key, with the walker on its value; member
// consumes the value and returns false to give up. plain says the key is
// printable ASCII without escapes, and so key is what json.Unmarshal
// reads; a key that is not plain is "".
func (w *walker) object(member func(key string, plain bool) bool) bool {
	if !w.enter('{') {
		return false
	}
	if w.next() == '}' {
		return w.leave()
	}
	for {
		start, end, plain, ok := w.string()
		if !ok {
			return false
		}
		key := ""
		if plain {
			key = string(w.doc[start:end])
		}
		if w.next() != ':' {
			return false
		}
		w.i++
		if !member(key, plain) {
			return false
		}
		switch w.next() {
		case ',':
			w.i++
		case '}':
			return w.leave()
		default:
			return false
		}
	}
}

// array calls elem for each element, the walker on it.
func (w *walker) array(elem func() bool) bool {
	if !w.enter('[') {
		return false
	}
	if w.next() == ']' {
		return w.leave()
	}
	for {
		if !elem() {
			return false
		}
		switch w.next() {
		case ',':
			w.i++
		case ']':
			return w.leave()
		default:
			return false
		}
	}
}

// enter steps into an object or array opened by c.
func (w *walker) enter(c byte) bool {
	if w.next() != c || w.depth == maxDepth {
		return false
	}
	w.i++
	w.depth++
	return true
}

// leave steps out of the object or array whose closing byte is next.
func (w *walker) leave() bool {
	w.i++
	w.depth--
	return true
}

// string steps over a string, checking its escapes: its content is
// doc[start:end]; plain says it is printable ASCII without escapes, what
// json.Unmarshal reads byte for byte. Other bytes from 0x20 up pass, as
// json.Valid passes them.
func (w *walker) string() (start, end int, plain, ok bool) {
	if w.next() != '"' {
		return 0, 0, false, false
	}
	start, plain = w.i+1, true
	for j := start; j < len(w.doc); j++ {
		switch c := w.doc[j]; {
		case c == '"':
			w.i = j + 1
			return start, j, plain, true
		case c == '\\':
			plain = false
			if j+1 == len(w.doc) {
				return 0, 0, false, false
			}
			j++
			switch w.doc[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if j+4 >= len(w.doc) || !hex4(w.doc[j+1:j+5]) {
					return 0, 0, false, false
				}
				j += 4
			default:
				return 0, 0, false, false
			}
		case c < 0x20:
			return 0, 0, false, false
		case c > 0x7e:
			plain = false
		}
	}
	return 0, 0, false, false
}

func hex4(b []byte) bool {
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return true
}

// str reads a plain string into s.
func (w *walker) str(s *string) bool {
	i := w.i
	start, end, plain, ok := w.string()
	if !ok || !plain {
		w.i = i
		return false
	}
	*s = string(w.doc[start:end])
	return true
}

// boolean reads true or false into b.
func (w *walker) boolean(b *bool) bool {
	switch {
	case w.literal("true"):
		*b = true
	case w.literal("false"):
		*b = false
	default:
		return false
	}
	return true
}

// literal steps over lit (true, false or null) when it is next.
func (w *walker) literal(lit string) bool {
	if w.next() == 0 || len(w.doc)-w.i < len(lit) || string(w.doc[w.i:w.i+len(lit)]) != lit {
		return false
	}
	w.i += len(lit)
	return true
}

// skip steps over any value, checking it.
func (w *walker) skip() bool {
	switch c := w.next(); {
	case c == '{':
		return w.object(func(string, bool) bool { return w.skip() })
	case c == '[':
		return w.array(w.skip)
	case c == '"':
		_, _, _, ok := w.string()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return w.number()
	}
	return w.literal("true") || w.literal("false") || w.literal("null")
}

// number steps over a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (w *walker) number() bool {
	d, i := w.doc, w.i
	digits := func() bool {
		j := i
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
		return i > j
	}
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	w.i = i
	return true
}
