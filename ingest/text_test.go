package ingest

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"danmaku/internal/stream"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "hello", "hello"},
		{"empty", "", ""},
		{"only spaces", " \t\r\n ", ""},
		{"trimmed", "  hi  ", "hi"},
		{"space run", "a  \t\n  b", "a b"},
		{"ideographic and no-break spaces", "a\u3000\u00a0b", "a b"},
		{"NUL and bell", "a\x00b\x07c", "abc"},
		{"DEL and C1 controls", "a\x7fb\u009fc", "abc"},
		{"NEL is white space", "a\u0085b", "a b"},
		{"escape sequence remnants", "\x1b[31mred", "[31mred"},
		{"zero-width space", "a\u200bb", "ab"},
		{"zero-width joiner and non-joiner", "a\u200d\u200cb", "ab"},
		{"byte order mark", "\ufeffhi", "hi"},
		{"bidi override", "abc\u202edcba\u202c", "abcdcba"},
		{"soft hyphen", "spa\u00adm", "spam"},
		{"zero-width between spaces", "a \u200b b", "a b"},
		{"invisible only", "\u200b\u200d\ufeff", ""},
		{"invalid UTF-8", "a\xffb\xc0", "ab"},
		{"truncated sequence", "ok\xe4\xbd", "ok"},
		{"NFC composes", "e\u0301", "\u00e9"},
		{"NFC Hangul", "\u1100\u1161", "\uac00"},
		{"NFC already", "\u00e9", "\u00e9"},
		{"NFC across a removed zero-width", "e\u200b\u0301", "\u00e9"},
		{"NFC across a removed control", "e\x00\u0301", "\u00e9"},
		{"CJK and emoji kept", " 好听 🎉 ", "好听 🎉"},
		{"emoji ZWJ sequence loses its joiner", "👨\u200d👩", "👨👩"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := normalize(tc.in); got != tc.want {
				t.Fatalf("normalize(%+q) = %+q, want %+q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzNormalize checks what normalize promises for any input: valid UTF-8,
// NFC, no control or format characters, single inner spaces, trimmed, and a
// fixed point.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"hi", "a  b", "e\u0301", "e\u200b\u0301", "\xff", " \u3000 ", "\u202e", "a\x00\u0308"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := normalize(in)
		checkNormalized(t, in, out)
	})
}

func checkNormalized(t *testing.T, in, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("normalize(%+q) = %+q: invalid UTF-8", in, out)
	}
	if !norm.NFC.IsNormalString(out) {
		t.Fatalf("normalize(%+q) = %+q: not NFC", in, out)
	}
	if strings.HasPrefix(out, " ") || strings.HasSuffix(out, " ") || strings.Contains(out, "  ") {
		t.Fatalf("normalize(%+q) = %+q: untrimmed or doubled space", in, out)
	}
	for _, r := range out {
		if r != ' ' && (unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			t.Fatalf("normalize(%+q) = %+q: holds %U", in, out, r)
		}
	}
	if again := normalize(out); again != out {
		t.Fatalf("normalize is not idempotent: %+q -> %+q -> %+q", in, out, again)
	}
}

// A comment body's text is refused, not shown with U+FFFD, when it is not
// UTF-8 (encoding/json would replace the bad bytes before normalize could
// see them), and a body that two readers could read two ways is refused.
func TestBarrageTextStrictBody(t *testing.T) {
	f := newFixture(t, nil)
	f.runBad(t, barragePath(room), f.token(t, room, "u1", "viewer"), []badCase{
		{name: "invalid byte", body: "{\"text\":\"a\xffb\"}", status: 400, code: "bad_utf8"},
		{name: "truncated sequence", body: "{\"text\":\"ok\xe4\xbd\"}", status: 400, code: "bad_utf8"},
		{name: "lone surrogate escape", body: `{"text":"a\ud800"}`, status: 400, code: "bad_utf8"},
		{name: "duplicate text", body: `{"text":"hi","text":"spam"}`, status: 400, code: "bad_json"},
		{name: "text in another case", body: `{"Text":"hi"}`, status: 400, code: "bad_json"},
	})
	if n := len(f.entries(t, room, stream.Live)); n != 0 {
		t.Errorf("refused comments stored %d messages", n)
	}
}
