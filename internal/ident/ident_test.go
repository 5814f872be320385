package ident

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"danmaku/sdk/wire"
)

// wantErr checks err against the field it must name ("" = no error), and
// that the message does not echo what it refuses.
func wantErr(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var e *Error
	if !errors.As(err, &e) || e.Field != field || e.Reason == "" {
		t.Fatalf("err = %v, want an *Error on %q", err, field)
	}
	if strings.ContainsFunc(e.Error(), func(r rune) bool { return unicode.IsControl(r) || Invisible(r) || r == utf8.RuneError }) {
		t.Fatalf("message %q holds what it refuses", e.Error())
	}
}

func TestCheckUser(t *testing.T) {
	for _, tc := range []struct{ name, in, field string }{
		{"ASCII", "u-42", ""},
		{"CJK", "用户42", ""},
		{"punctuation and symbols", "a.b@c+d_€", ""},
		{"64 bytes", strings.Repeat("u", 64), ""},
		{"empty", "", "user"},
		{"65 bytes", strings.Repeat("u", 65), "user"},
		{"NUL", "u\x001", "user"},
		{"newline", "u1\n", "user"},
		{"tab", "u\t1", "user"},
		{"space", "u 1", "user"},
		{"no-break space", "u\u00a01", "user"},
		{"ideographic space", "u\u30001", "user"},
		{"line separator", "u\u20281", "user"},
		{"DEL", "u\x7f", "user"},
		{"C1 control", "u\u0085", "user"},
		{"bidi override", "alice\u202e", "user"},
		{"bidi isolate", "\u2066a", "user"},
		{"right-to-left mark", "a\u200f", "user"},
		{"Arabic letter mark", "a\u061c", "user"},
		{"zero-width space", "ad\u200bmin", "user"},
		{"zero-width joiner", "a\u200db", "user"},
		{"word joiner", "a\u2060b", "user"},
		{"byte order mark", "\ufeffa", "user"},
		{"soft hyphen", "a\u00adb", "user"},
		{"U+FFFD", "a\ufffd", "user"},
		{"invalid UTF-8", "a\xff", "user"},
		{"private use", "a\ue000", "user"},
		{"unassigned", "a\U000E0080", "user"},
		{"not NFC", "e\u0301", "user"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, CheckUser(tc.in), tc.field) })
	}
}

func TestCleanNick(t *testing.T) {
	for _, tc := range []struct{ name, in, want, field string }{
		{"plain", "小明", "小明", ""},
		{"empty", "", "", ""},
		{"cut to six characters", "abcdefghij", "abcdef", ""},
		{"cut counts characters, not bytes", "好听好听好听好听", "好听好听好听", ""},
		{"bidi override removed", "ali\u202ece", "alice", ""},
		{"zero-width removed", "ad\u200bmin", "admin", ""},
		{"controls removed", "a\x00b\x1bc", "abc", ""},
		{"newline becomes a space", "a\nb", "a b", ""},
		{"trailing space of the cut dropped", "abcde fgh", "abcde", ""},
		{"NFC", "e\u0301", "\u00e9", ""},
		{"only invisible", "\u200b\u202e", "", ""},
		{"128 bytes", strings.Repeat("n", 128), "nnnnnn", ""},
		{"129 bytes", strings.Repeat("n", 129), "", "nick"},
		{"invalid UTF-8", "a\xffb", "", "nick"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CleanNick(tc.in)
			wantErr(t, err, tc.field)
			if got != tc.want {
				t.Fatalf("CleanNick(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestCheckAvatar(t *testing.T) {
	for _, tc := range []struct{ name, in, field string }{
		{"empty", "", ""},
		{"code", "a7", ""},
		{"32-byte code", strings.Repeat("a", 32), ""},
		{"https URL", "https://img.example/a/7.png?s=64&v=2#x", ""},
		{"percent-encoded URL", "https://img.example/%E5%A4%B4.png", ""},
		{"URL at 256 bytes", "https://img.example/" + strings.Repeat("a", 256-20), ""},
		{"URL at 257 bytes", "https://img.example/" + strings.Repeat("a", 257-20), "avatar"},
		{"2,500 bytes", "https://img.example/" + strings.Repeat("a", 2480), "avatar"},
		{"33-byte code", strings.Repeat("a", 33), "avatar"},
		{"code with a dot", "a.png", "avatar"},
		{"http", "http://img.example/a.png", "avatar"},
		{"javascript", "javascript:alert(1)", "avatar"},
		{"data URL", "data:image/png;base64,AAAA", "avatar"},
		{"no host", "https:///a.png", "avatar"},
		{"user info", "https://bank.example@evil.example/a.png", "avatar"},
		{"quote", `https://img.example/a"onerror=x`, "avatar"},
		{"single quote", "https://img.example/a'b", "avatar"},
		{"angle bracket", "https://img.example/<script>", "avatar"},
		{"space", "https://img.example/a b.png", "avatar"},
		{"backslash", `https://img.example\@evil.example/`, "avatar"},
		{"non-ASCII", "https://img.example/头.png", "avatar"},
		{"bidi override", "https://img.example/\u202egnp.exe", "avatar"},
		{"newline", "https://img.example/a\n.png", "avatar"},
		{"NUL", "a7\x00", "avatar"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, CheckAvatar(tc.in), tc.field) })
	}
}

func TestCheckGiftAndOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		field string
	}{
		{"gift code", CheckGift("rocket_2-x"), ""},
		{"gift empty", CheckGift(""), "gift"},
		{"gift too long", CheckGift(strings.Repeat("g", 33)), "gift"},
		{"gift with space", CheckGift("big rocket"), "gift"},
		{"gift with bidi", CheckGift("rocket\u202e"), "gift"},
		{"gift with NUL", CheckGift("r\x00"), "gift"},
		{"order", CheckOrder("o-123:456/789"), ""},
		{"order 64 bytes", CheckOrder(strings.Repeat("o", 64)), ""},
		{"order empty", CheckOrder(""), "order_id"},
		{"order too long", CheckOrder(strings.Repeat("o", 65)), "order_id"},
		{"order with trailing space", CheckOrder("o-1 "), "order_id"},
		{"order with newline", CheckOrder("o-1\n"), "order_id"},
		{"order non-ASCII", CheckOrder("订单1"), "order_id"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.err, tc.field) })
	}
}

func TestCleanTextPlainIsUnchangedWithoutCopy(t *testing.T) {
	s := "hello world"
	if n := testing.AllocsPerRun(100, func() { _ = CleanText(s) }); n != 0 {
		t.Fatalf("CleanText of plain ASCII allocates %v times", n)
	}
}

// shown reports whether a cleaned string holds only what may be shown.
func shown(t *testing.T, in, out string) {
	t.Helper()
	if !utf8.ValidString(out) || !norm.NFC.IsNormalString(out) {
		t.Fatalf("%q → %q: not valid NFC UTF-8", in, out)
	}
	for _, r := range out {
		if dropped(r) || (unicode.IsSpace(r) && r != ' ') {
			t.Fatalf("%q → %q keeps %U", in, out, r)
		}
	}
	if strings.HasPrefix(out, " ") || strings.HasSuffix(out, " ") || strings.Contains(out, "  ") {
		t.Fatalf("%q → %q: spaces not collapsed and trimmed", in, out)
	}
}

func FuzzCleanText(f *testing.F) {
	for _, s := range []string{"hello", " a  b ", "e\u200b\u0301", "a\xffb", "abc\u202edcba", "\u1100\u1161", "好听 🎉", "\u0300a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := CleanText(s)
		shown(t, s, out)
		if again := CleanText(out); again != out {
			t.Fatalf("not idempotent: %q → %q → %q", s, out, again)
		}
	})
}

func FuzzCleanNick(f *testing.F) {
	for _, s := range []string{"小明", "ad\u200bmin", "abcde fgh", "e\u0301e\u0301e\u0301e\u0301e\u0301e\u0301e\u0301", "a\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := CleanNick(s)
		if err != nil {
			if len(s) <= MaxNickBytes && utf8.ValidString(s) {
				t.Fatalf("%q refused: %v", s, err)
			}
			return
		}
		shown(t, s, out)
		if n := utf8.RuneCountInString(out); n > wire.MaxNickRunes {
			t.Fatalf("%q → %q: %d characters", s, out, n)
		}
		if again, _ := CleanNick(out); again != out {
			t.Fatalf("not idempotent: %q → %q → %q", s, out, again)
		}
	})
}

func FuzzCheckUser(f *testing.F) {
	for _, s := range []string{"u-42", "用户42", "u\x00", "alice\u202e", "e\u0301", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckUser(s) != nil {
			return
		}
		if s == "" || len(s) > MaxUserBytes || !utf8.ValidString(s) || !norm.NFC.IsNormalString(s) {
			t.Fatalf("%q accepted", s)
		}
		for _, r := range s {
			if !unicode.IsPrint(r) || unicode.IsSpace(r) || dropped(r) || r == utf8.RuneError {
				t.Fatalf("%q accepted with %U", s, r)
			}
		}
	})
}

func FuzzCheckAvatar(f *testing.F) {
	for _, s := range []string{"a7", "https://img.example/a.png?x=1&y=2", "https://u@h/", "javascript:x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckAvatar(s) != nil {
			return
		}
		if len(s) > MaxAvatarURLBytes {
			t.Fatalf("%d bytes accepted", len(s))
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '<' || c == '>' || c == '\\' {
				t.Fatalf("%q accepted with byte 0x%02x", s, c)
			}
		}
	})
}
