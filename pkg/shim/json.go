package shim

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// reader reads JSON as encoding/json reads it, from the start of the
// input to its end: the syntax of RFC 8259 and Unmarshal's nesting limit,
// and strings unescaped as Unmarshal unescapes them. It is written out
// because linking encoding/json costs the shim's start about 40 µs on
// every pod, whatever it decodes (BENCHMARKS.md, "The shim's start");
// FuzzDecodeEntry holds it to Unmarshal.
//
// A value of the wrong type for what the caller reads is Unmarshal's
// kind of error: noted (the first one), skipped, and the reading goes
// on, so that the values after it are still read. A syntax error ends
// the reading.
type reader struct {
	b     []byte
	i     int
	depth int
	// typeErr is the first value read of the wrong type.
	typeErr error
}

// maxDepth is how deep Unmarshal reads objects and arrays.
const maxDepth = 10000

func (r *reader) syntax(what string) error {
	return errors.New("invalid JSON at byte " + strconv.Itoa(r.i) + ": " + what)
}

// wrongType notes a value of the wrong type and skips it.
func (r *reader) wrongType(want string) error {
	if r.typeErr == nil {
		r.typeErr = errors.New("a " + kindAt(r.peek()) + " where " + want + " goes, at byte " + strconv.Itoa(r.i))
	}
	return r.skip()
}

func kindAt(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "list"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	}
	return "number"
}

func (r *reader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

// peek is the next value's first byte, past whitespace; 0 at the end.
func (r *reader) peek() byte {
	r.ws()
	if r.i == len(r.b) {
		return 0
	}
	return r.b[r.i]
}

// null reads a null if one is next.
func (r *reader) null() (bool, error) {
	if r.peek() != 'n' {
		return false, nil
	}
	return true, r.literal("null")
}

func (r *reader) literal(lit string) error {
	if len(r.b)-r.i < len(lit) || string(r.b[r.i:r.i+len(lit)]) != lit {
		return r.syntax("not " + lit)
	}
	r.i += len(lit)
	return nil
}

// end reads what follows the top-level value: whitespace only.
func (r *reader) end() error {
	if r.ws(); r.i != len(r.b) {
		return r.syntax("after the top-level value")
	}
	return nil
}

// object reads an object, calling field with each key, the reader at the
// key's value, which field must read; null is nothing, open says an
// object began (not null); another value is of the wrong type.
func (r *reader) object(field func(key string) error) (open bool, err error) {
	switch r.peek() {
	case '{':
	case 'n':
		return false, r.literal("null")
	default:
		return false, r.wrongType("an object")
	}
	return true, r.members(field)
}

// list reads a list, calling elem with the reader at each element,
// which elem must read; null is nothing; another value is of the wrong
// type.
func (r *reader) list(elem func() error) (open bool, err error) {
	switch r.peek() {
	case '[':
	case 'n':
		return false, r.literal("null")
	default:
		return false, r.wrongType("a list")
	}
	return true, r.elements(elem)
}

// str reads a string into s; null leaves s as it was; another value is
// of the wrong type.
func (r *reader) str(s *string) error {
	switch r.peek() {
	case '"':
		v, err := r.quoted()
		if err == nil {
			*s = v
		}
		return err
	case 'n':
		return r.literal("null")
	}
	return r.wrongType("a string")
}

// skip reads one value, whatever it is.
func (r *reader) skip() error {
	switch c := r.peek(); {
	case c == '{':
		return r.members(func(string) error { return r.skip() })
	case c == '[':
		return r.elements(r.skip)
	case c == '"':
		_, err := r.quoted()
		return err
	case c == 't':
		return r.literal("true")
	case c == 'f':
		return r.literal("false")
	case c == 'n':
		return r.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return r.number()
	case r.i == len(r.b):
		return r.syntax("the input ends where a value goes")
	}
	return r.syntax("not a value")
}

// members reads an object's members, the reader at its '{'.
func (r *reader) members(field func(key string) error) error {
	if err := r.open(); err != nil {
		return err
	}
	if r.peek() == '}' {
		return r.close()
	}
	for {
		if r.peek() != '"' {
			return r.syntax("not a key")
		}
		key, err := r.quoted()
		if err != nil {
			return err
		}
		if r.peek() != ':' {
			return r.syntax("no ':' after a key")
		}
		r.i++
		if err := field(key); err != nil {
			return err
		}
		switch r.peek() {
		case ',':
			r.i++
		case '}':
			return r.close()
		default:
			return r.syntax("no ',' or '}' after a member")
		}
	}
}

// elements reads a list's elements, the reader at its '['.
func (r *reader) elements(elem func() error) error {
	if err := r.open(); err != nil {
		return err
	}
	if r.peek() == ']' {
		return r.close()
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch r.peek() {
		case ',':
			r.i++
		case ']':
			return r.close()
		default:
			return r.syntax("no ',' or ']' after an element")
		}
	}
}

func (r *reader) open() error {
	r.depth++
	if r.depth > maxDepth {
		return r.syntax("nested deeper than " + strconv.Itoa(maxDepth))
	}
	r.i++
	return nil
}

func (r *reader) close() error {
	r.depth--
	r.i++
	return nil
}

// number reads a number (never converted: the shim reads none).
func (r *reader) number() error {
	digits := func() int {
		n := 0
		for r.i < len(r.b) && '0' <= r.b[r.i] && r.b[r.i] <= '9' {
			r.i++
			n++
		}
		return n
	}
	if r.b[r.i] == '-' {
		r.i++
	}
	switch {
	case r.i < len(r.b) && r.b[r.i] == '0':
		r.i++
	case digits() == 0:
		return r.syntax("a number without digits")
	}
	if r.i < len(r.b) && r.b[r.i] == '.' {
		r.i++
		if digits() == 0 {
			return r.syntax("no digits after a decimal point")
		}
	}
	if r.i < len(r.b) && (r.b[r.i] == 'e' || r.b[r.i] == 'E') {
		r.i++
		if r.i < len(r.b) && (r.b[r.i] == '+' || r.b[r.i] == '-') {
			r.i++
		}
		if digits() == 0 {
			return r.syntax("no digits in an exponent")
		}
	}
	return nil
}

// quoted reads a string, the reader at its '"', and returns it
// unescaped as Unmarshal does: a lone or broken surrogate escape, and
// each byte that is not UTF-8, become U+FFFD.
func (r *reader) quoted() (string, error) {
	r.i++
	start := r.i
	plain := true // nothing to unescape or replace
	for {
		if r.i == len(r.b) {
			return "", r.syntax("the input ends in a string")
		}
		c := r.b[r.i]
		switch {
		case c == '"':
			s := r.b[start:r.i]
			r.i++
			if plain {
				return string(s), nil
			}
			return unescape(s), nil
		case c < ' ':
			return "", r.syntax("a control character in a string")
		case c == '\\':
			plain = false
			r.i++
			if r.i == len(r.b) {
				return "", r.syntax("the input ends in a string")
			}
			switch r.b[r.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				r.i++
			case 'u':
				if hex4(r.b[r.i+1:]) < 0 {
					return "", r.syntax("a \\u escape without four hex digits")
				}
				r.i += 5
			default:
				return "", r.syntax("an unknown escape")
			}
		case c < utf8.RuneSelf:
			r.i++
		default:
			rr, size := utf8.DecodeRune(r.b[r.i:])
			plain = plain && (rr != utf8.RuneError || size != 1)
			r.i += size
		}
	}
}

// unescape is the string between valid quotes, its escapes read and
// what is not UTF-8 replaced (encoding/json's unquote).
func unescape(s []byte) string {
	b := make([]byte, 0, len(s)+2*utf8.UTFMax)
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			switch e := s[i+1]; e {
			case 'b':
				b, i = append(b, '\b'), i+2
			case 'f':
				b, i = append(b, '\f'), i+2
			case 'n':
				b, i = append(b, '\n'), i+2
			case 'r':
				b, i = append(b, '\r'), i+2
			case 't':
				b, i = append(b, '\t'), i+2
			case 'u':
				rr := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(rr) {
					var next rune = -1
					if len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
						next = hex4(s[i+2:])
					}
					if dec := utf16.DecodeRune(rr, next); dec != utf8.RuneError {
						b, i = utf8.AppendRune(b, dec), i+6
						continue
					}
					rr = utf8.RuneError
				}
				b = utf8.AppendRune(b, rr)
			default: // '"', '\\', '/'
				b, i = append(b, e), i+2
			}
		case c < utf8.RuneSelf:
			b, i = append(b, c), i+1
		default:
			rr, size := utf8.DecodeRune(s[i:])
			b, i = utf8.AppendRune(b, rr), i+size
		}
	}
	return string(b)
}

// hex4 is the value of four hex digits at the start of b, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// quote is s as a JSON string, as Unmarshal would read it back (each
// byte that is not UTF-8 as U+FFFD), for the shim's own error message.
func quote(s string) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b, i = append(b, '\\', c), i+1
		case c < ' ':
			b, i = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf]), i+1
		case c < utf8.RuneSelf:
			b, i = append(b, c), i+1
		default:
			rr, size := utf8.DecodeRuneInString(s[i:])
			b, i = utf8.AppendRune(b, rr), i+size
		}
	}
	return string(append(b, '"'))
}
