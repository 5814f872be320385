package ingest

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalize returns text as it is stored: NFC, control and format characters
// (zero-width joiners, bidi overrides) removed, runs of white space collapsed
// to one space, trimmed. Format characters go because they let a spammer
// defeat duplicate suppression and word filters with invisible variants.
// NFC comes last: removing a character between a letter and its combining
// mark ("e\u200b\u0301") would otherwise leave a decomposed variant.
func normalize(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r):
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return norm.NFC.String(b.String())
}
