package shim

import (
	"strings"

	"istio-cni.local/istio-cni/pkg/iptables/release"
)

// walkEntry reads the entry from a document json.Valid accepted, in one
// pass and without reflection. encoding/json's first decode in a fresh
// process costs 0.09-0.11 ms (its code's page faults, its type cache), as
// much as a legacy node's ADD was over 1.1x a bare restore; its validator
// alone costs about a seventh of that (BENCHMARKS.md).
//
// It reads only the plain shapes the plugin's own entry has. ok is false
// for anything else (an escape or a byte outside printable ASCII in a key
// or a value it reads, a repeated key, a null, a type the field does not
// take) and decodeEntry asks json.Unmarshal instead. When ok, the entry
// is meant to be what json.Unmarshal reads: FuzzWalkEntry checks it.
func walkEntry(doc []byte) (entry, bool) {
	var e entry
	w := walker{doc: doc}
	seen := map[string]bool{}
	ok := w.object(func(key string) bool {
		name := field(key, "cniVersion", "pod_socket", "cache_dir", "iptables_backend", "native_nftables", "prevResult")
		switch {
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
	return e, ok
}

// prevResult reads the primary's result: its ips' addresses.
func (w *walker) prevResult(r *prevResult) bool {
	return w.object(func(key string) bool {
		switch {
		case field(key, "ips") == "":
			return w.skip()
		case r.IPs != nil:
			return false
		}
		r.IPs = []prevIP{} // what json.Unmarshal makes of [] too
		return w.array(func() bool {
			var ip prevIP
			had := false
			ok := w.object(func(key string) bool {
				switch {
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
// encoding/json matches, exactly or regardless of case (the walker's keys
// are printable ASCII, where its folding is ASCII's).
func field(key string, fields ...string) string {
	for _, f := range fields {
		if strings.EqualFold(key, f) {
			return f
		}
	}
	return ""
}

// walker steps through a valid JSON document. Validity is json.Valid's
// to check: the walker trusts the grammar and checks only the shapes.
type walker struct {
	doc []byte
	i   int
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

// object calls member for each key, with the walker on its value; member
// consumes the value and returns false to give up.
func (w *walker) object(member func(key string) bool) bool {
	if w.next() != '{' {
		return false
	}
	w.i++
	for w.next() != '}' {
		var key string
		if !w.str(&key) {
			return false
		}
		w.next() // ':'
		w.i++
		if !member(key) {
			return false
		}
		if w.next() == ',' {
			w.i++
		}
	}
	w.i++
	return true
}

// array calls elem for each element, the walker on it.
func (w *walker) array(elem func() bool) bool {
	if w.next() != '[' {
		return false
	}
	w.i++
	for w.next() != ']' {
		if !elem() {
			return false
		}
		if w.next() == ',' {
			w.i++
		}
	}
	w.i++
	return true
}

// str reads a string of printable ASCII without escapes into s: what
// json.Unmarshal reads byte for byte.
func (w *walker) str(s *string) bool {
	if w.next() != '"' {
		return false
	}
	start := w.i + 1
	for j := start; j < len(w.doc); j++ {
		switch c := w.doc[j]; {
		case c == '"':
			w.i = j + 1
			*s = string(w.doc[start:j])
			return true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return false
		}
	}
	return false
}

// boolean reads true or false into b.
func (w *walker) boolean(b *bool) bool {
	for _, lit := range []string{"false", "true"} {
		if w.next() != 0 && len(w.doc)-w.i >= len(lit) && string(w.doc[w.i:w.i+len(lit)]) == lit {
			w.i += len(lit)
			*b = lit == "true"
			return true
		}
	}
	return false
}

// skip steps over any value.
func (w *walker) skip() bool {
	depth := 0
	for {
		switch c := w.next(); c {
		case 0:
			return false
		case '"':
			w.i++
			for w.i < len(w.doc) && w.doc[w.i] != '"' {
				if w.doc[w.i] == '\\' {
					w.i++
				}
				w.i++
			}
			w.i++
		case '{', '[':
			depth++
			w.i++
		case '}', ']':
			depth--
			w.i++
		case ',', ':':
			w.i++
			continue
		default: // a number, true, false or null
			for w.i < len(w.doc) && !strings.ContainsRune(",]} \t\n\r", rune(w.doc[w.i])) {
				w.i++
			}
		}
		if depth == 0 {
			return true
		}
	}
}
