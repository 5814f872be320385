// Package ident is the one place that decides what an identity field may
// hold: the user ids, nicknames and avatars that business tickets (gslb) and
// the gift API (ingest) bring in, and the gift codes and order ids of gifts.
// Whatever passes here is copied into tokens, room streams and every segment
// a CDN serves to millions of viewers, so the rules are strict and the same
// for every entrance.
//
// Rules, and whether a value that breaks them is refused or rewritten:
//
//   - User id (CheckUser) — refused, never rewritten: ids are keys (rate
//     limits, de-duplication, audit), and a rewritten id could collide with
//     another user's. 1-64 bytes of valid UTF-8 in NFC; every character
//     printable (Unicode letters, marks, numbers, punctuation, symbols); no
//     white space, no control characters, no format characters (bidi
//     overrides and isolates, zero-width characters, the byte order mark),
//     no private-use or unassigned code points, no U+FFFD (the trace of a
//     broken encoder).
//   - Nickname (CleanNick) — rewritten: it is only shown, and refusing a
//     ticket for a stray zero-width joiner would lock a real user out of the
//     room. At most MaxNickBytes bytes of valid UTF-8 as given (refused
//     otherwise: the bound keeps the work per request small, and is loose
//     enough for 32 characters of any script); then cleaned like comment
//     text (CleanText: control and format characters removed, white space
//     collapsed, NFC) and cut to wire.MaxNickRunes code points, the length
//     the wire format carries. May be empty.
//   - Avatar (CheckAvatar) — refused: it is a reference the client
//     resolves, and a rewritten reference points somewhere else. Either a
//     code of 1-32 of A-Z a-z 0-9 _ - that the app maps to an image, or an
//     https URL of at most 256 bytes made of URL characters only (RFC 3986
//     less the single quote; anything else percent-encoded), with a host and
//     no user info. May be
//     empty. The bound matters: the avatar is copied into every message the
//     user sends.
//   - Gift code (CheckGift) — refused: 1-32 of A-Z a-z 0-9 _ -.
//   - Order id (CheckOrder) — refused: it is the gift's idempotency key. 1-64
//     bytes of printable ASCII without the space (0x21-0x7E), so that two
//     spellings of one order ("o-1" and "o-1 ") cannot look alike.
//
// Every function is safe for concurrent use; errors are *Error, naming the
// field and the rule broken, never echoing the value (it may hold control
// characters).
package ident

import (
	"fmt"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"danmaku/sdk/wire"
)

// Limits.
const (
	// MaxUserBytes is the longest user id.
	MaxUserBytes = 64
	// MaxNickBytes is the longest nickname accepted before it is cleaned
	// and cut: 32 characters of any script.
	MaxNickBytes = 128
	// MaxCodeBytes is the longest avatar code and gift code.
	MaxCodeBytes = 32
	// MaxAvatarURLBytes is the longest avatar URL.
	MaxAvatarURLBytes = 256
	// MaxOrderBytes is the longest order id.
	MaxOrderBytes = 64
)

// Error says which field breaks which rule. Field is the name this package
// knows the field by ("user", "nick", "avatar", "gift", "order_id"); callers
// that expose it under another name (a ticket's "sub") set their own.
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

func fail(field, format string, args ...any) *Error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Invisible reports whether r is one of the characters that change how text
// around them is shown without being shown themselves: bidi embeddings,
// overrides and isolates (U+202A-U+202E, U+2066-U+2069), the directional
// marks U+200E, U+200F and U+061C, and the zero-width characters U+200B-U+200D,
// U+2060 and U+FEFF. They let a name pass for another ("alice\u202e" shown
// reversed, "ad\u200bmin" looking like "admin"). All are Unicode format
// characters (Cf) today; the list keeps them refused should a Unicode update
// move one.
func Invisible(r rune) bool {
	switch {
	case r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069,
		r == 0x200E, r == 0x200F, r == 0x061C,
		r >= 0x200B && r <= 0x200D, r == 0x2060, r == 0xFEFF:
		return true
	}
	return false
}

// dropped reports whether CleanText removes r: control characters, format
// characters (zero-width, bidi controls, soft hyphen, ...) and Invisible.
func dropped(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || Invisible(r)
}

// CleanText returns s as shown text is stored: control and format characters
// removed (Invisible among them), runs of white space collapsed to one space,
// trimmed, NFC. Invalid UTF-8 bytes are dropped; callers that can tell the
// sender refuse them instead (JSON bodies are refused with bad_utf8 before
// they get here). NFC comes last: removing a character between a letter and
// its combining mark ("e\u200b\u0301") would otherwise leave a decomposed
// variant. Comment text and nicknames go through it, so a spammer's invisible
// variants cannot defeat duplicate suppression or word filters.
func CleanText(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "")
	}
	if isPlain(s) {
		return s // the common case: short ASCII without anything to do
	}
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case dropped(r):
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

// isPlain reports whether CleanText would return s unchanged because it is
// printable ASCII with single inner spaces and no space at either end.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return false
		}
		if c == ' ' && (i == 0 || i == len(s)-1 || s[i+1] == ' ') {
			return false
		}
	}
	return true
}

// CheckUser refuses a user id that breaks the user id rules (package doc).
func CheckUser(id string) error {
	const field = "user"
	switch {
	case id == "":
		return fail(field, "required")
	case len(id) > MaxUserBytes:
		return fail(field, "at most %d bytes (got %d)", MaxUserBytes, len(id))
	case !utf8.ValidString(id):
		return fail(field, "not valid UTF-8")
	}
	for i, r := range id {
		switch {
		case unicode.IsSpace(r):
			return fail(field, "holds white space (%U at byte %d)", r, i)
		case unicode.IsControl(r):
			return fail(field, "holds a control character (%U at byte %d)", r, i)
		case Invisible(r), unicode.Is(unicode.Cf, r):
			return fail(field, "holds an invisible format character (%U at byte %d: bidi control, zero-width or similar)", r, i)
		case r == utf8.RuneError:
			return fail(field, "holds U+FFFD (at byte %d), the mark of a broken encoding", i)
		case !unicode.IsPrint(r):
			return fail(field, "holds a character that is not printable (%U at byte %d: private-use or unassigned)", r, i)
		}
	}
	if !norm.NFC.IsNormalString(id) {
		return fail(field, "not in Unicode NFC; ids are compared byte for byte, so compose them (NFC) before signing")
	}
	return nil
}

// CleanNick returns nick cleaned and cut (package doc), or an error for a
// nickname too long or not UTF-8 as given. The result may be empty.
func CleanNick(nick string) (string, error) {
	const field = "nick"
	switch {
	case len(nick) > MaxNickBytes:
		return "", fail(field, "at most %d bytes (got %d)", MaxNickBytes, len(nick))
	case !utf8.ValidString(nick):
		return "", fail(field, "not valid UTF-8")
	}
	s := wire.TruncateRunes(CleanText(nick), wire.MaxNickRunes)
	// The cut may end on the space between two words. NFC again because a
	// cut is a new string; on an NFC string it is a cheap no-op.
	return norm.NFC.String(strings.TrimRight(s, " ")), nil
}

// CheckAvatar refuses an avatar that is neither a short code nor a bounded
// https URL (package doc). The empty avatar passes: it is optional.
func CheckAvatar(av string) error {
	const field = "avatar"
	if av == "" || isCode(av) {
		return nil
	}
	if !strings.HasPrefix(av, "https://") {
		return fail(field, "must be a code of 1-%d of A-Z a-z 0-9 _ - or an https URL of at most %d bytes", MaxCodeBytes, MaxAvatarURLBytes)
	}
	if len(av) > MaxAvatarURLBytes {
		return fail(field, "URL is longer than %d bytes (got %d)", MaxAvatarURLBytes, len(av))
	}
	for i := 0; i < len(av); i++ {
		if !urlByte(av[i]) {
			return fail(field, "URL holds a character URLs do not carry unescaped (byte %d); percent-encode it", i)
		}
	}
	u, err := url.Parse(av)
	switch {
	case err != nil:
		return fail(field, "URL does not parse")
	case u.Hostname() == "":
		return fail(field, "URL has no host")
	case u.User != nil:
		return fail(field, "URL carries user info (user@host), which can disguise the host")
	}
	return nil
}

// CheckGift refuses a gift code that is not 1-32 of A-Z a-z 0-9 _ -.
func CheckGift(code string) error {
	if !isCode(code) {
		return fail("gift", "required, 1-%d of A-Z a-z 0-9 _ -", MaxCodeBytes)
	}
	return nil
}

// CheckOrder refuses an order id that is not 1-64 bytes of 0x21-0x7E.
func CheckOrder(id string) error {
	const field = "order_id"
	switch {
	case id == "":
		return fail(field, "required")
	case len(id) > MaxOrderBytes:
		return fail(field, "at most %d bytes (got %d)", MaxOrderBytes, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fail(field, "printable ASCII without spaces only (byte %d is 0x%02x)", i, c)
		}
	}
	return nil
}

// isCode reports whether s is 1-MaxCodeBytes of A-Z a-z 0-9 _ -.
func isCode(s string) bool {
	if s == "" || len(s) > MaxCodeBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// urlByte reports whether c may appear in an avatar URL as it is: RFC 3986's
// unreserved and reserved characters and '%', less the single quote (legal,
// but then a careless client writing the URL into an HTML attribute could be
// broken out of; %27 says the same). Double quotes, angle brackets,
// backslashes, spaces and non-ASCII bytes are not URL characters at all.
func urlByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~:/?#[]@!$&()*+,;=%", c) >= 0
}
