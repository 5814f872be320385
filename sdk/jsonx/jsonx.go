// Package jsonx is the project's JSON beyond encoding/json, in two parts.
// Decode and CheckJSON (strict.go) read JSON strictly — exact, known and
// unrepeated member names, valid UTF-8, one value — so that no two readers
// of a text see different values: the one strict decoder that the HTTP
// binding (internal/httpx), the files parsed at load and the claims and
// frames read outside a body all call. AppendString and AppendStrings
// write JSON strings exactly as encoding/json does, without its
// reflection, for the few answers on hot paths (the entry's token and
// answer, once per viewer joining) that are built by hand. Everything here
// is safe for concurrent use.
package jsonx

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// AppendStrings appends ss as json.Marshal writes a []string: null when
// nil.
func AppendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// AppendString appends s as json.Marshal writes a string. A string
// encoding/json writes as is (Verbatim), a nickname in any script
// included, is copied; any other, rare, is left to encoding/json
// (its HTML escapes, control characters, U+2028 and U+2029, invalid UTF-8).
func AppendString(b []byte, s string) []byte {
	if !Verbatim(s) {
		// Cloned so that s does not escape: callers' values may stay on
		// their stacks.
		m, _ := json.Marshal(strings.Clone(s)) // a string always marshals
		return append(b, m...)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Verbatim reports whether json.Marshal writes s unchanged between its
// quotes: valid UTF-8 without control characters, " \ < > &, U+2028 or
// U+2029 (DEL too is left to encoding/json, which happens to keep it).
func Verbatim(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			return false
		}
		i += size
	}
	return true
}
