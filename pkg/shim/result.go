package shim

import (
	"strconv"
	"unicode/utf8"
)

// errorResult is a CNI error result: json.Encoder's encoding of its
// fields, HTML left unescaped, as the shim printed it with encoding/json
// (TestErrorResultIsEncodingJSONs holds it to that).
func errorResult(cniVersion string, code int, msg string) string {
	b := []byte(`{"cniVersion":`)
	b = appendJSONString(b, cniVersion)
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"msg":`...)
	b = appendJSONString(b, msg)
	return string(append(b, "}\n"...))
}

// appendJSONString appends s quoted as encoding/json quotes a string with
// HTML escaping off: control bytes, quote and backslash escaped, an
// invalid UTF-8 byte as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\\' || c == '"':
				b = append(b, '\\', c)
			case c == '\b':
				b = append(b, `\b`...)
			case c == '\f':
				b = append(b, `\f`...)
			case c == '\n':
				b = append(b, `\n`...)
			case c == '\r':
				b = append(b, `\r`...)
			case c == '\t':
				b = append(b, `\t`...)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
