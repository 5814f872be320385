package jsonx

import (
	"encoding/json"
	"testing"
)

// FuzzAppendString: AppendString writes what json.Marshal writes, for any
// string.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "用户", "<&>", "\"\\", "\u2028\u2029", "\x00\x1f\x7f", "\xff\xfe", "a\u00e9b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got[1:], want)
		}
		ss := []string{s, "b"}
		want, _ = json.Marshal(ss)
		if got := AppendStrings(nil, ss); string(got) != string(want) {
			t.Fatalf("AppendStrings(%q) = %s, want %s", ss, got, want)
		}
	})
}

func TestAppendStringsNil(t *testing.T) {
	if got := string(AppendStrings(nil, nil)); got != "null" {
		t.Fatalf("AppendStrings(nil) = %s", got)
	}
	if got := string(AppendStrings(nil, []string{})); got != "[]" {
		t.Fatalf("AppendStrings([]) = %s", got)
	}
}
