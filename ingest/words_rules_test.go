package ingest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"danmaku/ingest"
	"danmaku/internal/rules"
)

func TestCheckWordList(t *testing.T) {
	for _, c := range []struct {
		name, list string
		want       string // "" accepted, else a part of the message
	}{
		{"words and comments", "# show 1\nspam\n\n  scam  \r\n中文\n", ""},
		{"empty", "", ""},
		{"not UTF-8", "ok\nbad \xff\n", "line 2: not valid UTF-8"},
		{"control character", "ok\nok\nbell\x07\n", "line 3: a control character (U+0007)"},
		{"word too long", "ok\n" + strings.Repeat("x", ingest.MaxWordBytes+1), "line 2: a word of at most 256 bytes"},
		{"too many words", strings.Repeat("w\n", ingest.MaxWords+1), "at most 100000 words"},
		{"too large", strings.Repeat("x", rules.MaxDocument+1), "at most 1048576 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := ingest.CheckWordList([]byte(c.list))
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			bd, ok := errors.AsType[*rules.BadDocument](err)
			if !ok || !strings.Contains(bd.Message, c.want) {
				t.Fatalf("CheckWordList = %v, want a BadDocument saying %q", err, c.want)
			}
		})
	}
}

// FuzzCheckWordList: whatever CheckWordList accepts, ParseWordList reads
// into at most MaxWords words, each UTF-8, without a control character
// and at most MaxWordBytes long.
func FuzzCheckWordList(f *testing.F) {
	for _, s := range []string{"spam\n", "# c\n\nword\r\n", "a\x00b", "\xff", "ＳＰＡＭ\n㈱\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if ingest.CheckWordList(b) != nil {
			return
		}
		words := ingest.ParseWordList(b)
		if len(words) > ingest.MaxWords {
			t.Fatalf("%d words accepted", len(words))
		}
		for _, w := range words {
			if !utf8.ValidString(w) || strings.ContainsFunc(w, unicode.IsControl) || len(w) > ingest.MaxWordBytes {
				t.Fatalf("accepted word %q", w)
			}
		}
	})
}

// TestStoreWords: the filter follows the store's head, and a version that
// CheckWordList refuses (written by other means than the API) leaves the
// list in force.
func TestStoreWords(t *testing.T) {
	ctx := context.Background()
	store := rules.NewMemoryStore()
	f := newWordFilter(t, ingest.NewStoreWords(store), nil)
	if v, _ := f.Loaded(); v != "0" {
		t.Fatalf("version %q before any push, want 0", v)
	}
	if _, verdict := f.Check("spam", ingest.WordsMask); verdict != ingest.WordsClean {
		t.Fatal("a word listed before any push")
	}
	if _, err := store.Push(ctx, rules.KindWords, []byte("spam\n"), rules.Meta{}); err != nil {
		t.Fatal(err)
	}
	_, changed := f.Loaded()
	if err := f.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	<-changed // closed by the new list: what watchers wait on
	if v, _ := f.Loaded(); v != "1" {
		t.Fatalf("version %q, want 1", v)
	}
	if _, err := store.Push(ctx, rules.KindWords, []byte("ok\n\x00\n"), rules.Meta{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Refresh(ctx); !errors.As(err, new(*rules.BadDocument)) {
		t.Fatalf("Refresh of a bad version: %v, want the BadDocument", err)
	}
	if v, _ := f.Loaded(); v != "1" {
		t.Fatalf("version %q after a bad one, want 1 still", v)
	}
	if out, verdict := f.Check("no spam", ingest.WordsMask); verdict != ingest.WordsMasked || out != "no ****" {
		t.Fatalf("Check = %q %v: the list in force is not version 1's", out, verdict)
	}
}
