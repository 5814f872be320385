package ingest_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"danmaku/ingest"
)

func newWordFilter(t testing.TB, src ingest.WordSource, reg prometheus.Registerer) *ingest.WordFilter {
	t.Helper()
	f, err := ingest.NewWordFilter(ingest.WordFilterConfig{Source: src, Registerer: reg, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestWordFilterCheck(t *testing.T) {
	f := newWordFilter(t, ingest.StaticWords{"spam", "Bad Word", "傻瓜", "株", "ＦＯＯ", "  ", "# not a comment here"}, nil)
	for _, tc := range []struct {
		name, in, masked string
	}{
		{"clean", "hello world", "hello world"},
		{"latin", "buy spam now", "buy **** now"},
		{"case-insensitive", "SPAM and Spam", "**** and ****"},
		{"whole latin words only", "spammer class", "spammer class"},
		{"latin next to CJK is a boundary", "好spam好", "好****好"},
		{"phrase", "a bad word here", "a ******** here"},
		{"CJK anywhere", "你是傻瓜吗", "你是**吗"},
		{"full-width text", "ＳＰＡＭ！", "****！"},
		{"full-width pattern", "foo", "***"},
		{"compatibility form masks the whole original character", "㈱会社", "*会社"},
		{"overlapping words", "傻瓜株", "***"},
		{"emoji kept", "🎉spam🎉", "🎉****🎉"},
		{"digits are word characters", "spam2", "spam2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, v := f.Check(tc.in, ingest.WordsMask)
			want := ingest.WordsClean
			if tc.masked != tc.in {
				want = ingest.WordsMasked
			}
			if got != tc.masked || v != want {
				t.Fatalf("Check(%q, mask) = %q, %v; want %q, %v", tc.in, got, v, tc.masked, want)
			}
			got, v = f.Check(tc.in, ingest.WordsReject)
			if want == ingest.WordsMasked {
				want = ingest.WordsRejected
			}
			if v != want || (v == ingest.WordsClean && got != tc.in) {
				t.Fatalf("Check(%q, reject) = %q, %v; want verdict %v", tc.in, got, v, want)
			}
			if _, v2 := f.Check(tc.in, ingest.WordsRefuse); v2 != v {
				t.Fatalf("Check(%q, refuse) = %v, want %v as for reject", tc.in, v2, v)
			}
			if got, v := f.Check(tc.in, ingest.WordsOff); got != tc.in || v != ingest.WordsClean {
				t.Fatalf("Check(%q, off) = %q, %v", tc.in, got, v)
			}
		})
	}
}

func TestWordFilterEmpty(t *testing.T) {
	for _, src := range []ingest.WordSource{nil, ingest.StaticWords{}} {
		f := newWordFilter(t, src, nil)
		if got, v := f.Check("anything", ingest.WordsReject); got != "anything" || v != ingest.WordsClean {
			t.Fatalf("empty list: Check = %q, %v", got, v)
		}
	}
}

func TestWordFilterMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newWordFilter(t, ingest.StaticWords{"spam", "spam", "SPAM", "eggs"}, reg)
	f.Check("spam", ingest.WordsMask)
	f.Check("spam", ingest.WordsReject)
	f.Check("spam", ingest.WordsReject)
	f.Check("ham", ingest.WordsReject)
	want := `
# HELP danmaku_ingest_words_filtered_total Comments holding a listed word, by action (masked, rejected).
# TYPE danmaku_ingest_words_filtered_total counter
danmaku_ingest_words_filtered_total{action="masked"} 1
danmaku_ingest_words_filtered_total{action="rejected"} 2
# HELP danmaku_ingest_words_listed Words in the loaded sensitive-word list.
# TYPE danmaku_ingest_words_listed gauge
danmaku_ingest_words_listed 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "danmaku_ingest_words_filtered_total", "danmaku_ingest_words_listed"); err != nil {
		t.Fatal(err)
	}
}

// TestWordFilterFileReload: a changed file takes effect at the next
// Refresh; a file that vanishes keeps the last list in force.
func TestWordFilterFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "words.txt")
	write := func(s string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		// Set the time explicitly: two writes within the file system's
		// timestamp granularity must still look different.
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Unix(1_700_000_000, 0)
	write("# sensitive words\nspam\n\n", base)
	f := newWordFilter(t, ingest.FileWords{Path: path}, nil)
	if _, v := f.Check("spam eggs", ingest.WordsReject); v != ingest.WordsRejected {
		t.Fatal("first list not in force")
	}
	write("eggs\n", base.Add(time.Second))
	if err := f.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Check("spam eggs", ingest.WordsMask); got != "spam ****" {
		t.Fatalf("after the change: %q", got)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := f.Refresh(context.Background()); err == nil {
		t.Fatal("a missing file reloaded without error")
	}
	if got, _ := f.Check("spam eggs", ingest.WordsMask); got != "spam ****" {
		t.Fatalf("after a failed reload: %q", got)
	}
	if _, err := ingest.NewWordFilter(ingest.WordFilterConfig{Reload: -1}); err == nil {
		t.Fatal("negative Reload accepted")
	}
}

func TestParseWordPolicy(t *testing.T) {
	for in, want := range map[string]ingest.WordPolicy{"": ingest.WordsMask, "mask": ingest.WordsMask, "reject": ingest.WordsReject, "refuse": ingest.WordsRefuse, "off": ingest.WordsOff} {
		if got, err := ingest.ParseWordPolicy(in); err != nil || got != want {
			t.Fatalf("ParseWordPolicy(%q) = %v, %v", in, got, err)
		}
		if in != "" && want.String() != in {
			t.Fatalf("%v.String() = %q", want, want.String())
		}
	}
	if _, err := ingest.ParseWordPolicy("drop"); err == nil {
		t.Fatal("bad policy accepted")
	}
	if e := ingest.RefusedWordError(); e.Status != 422 || e.Code != "sensitive_word" {
		t.Fatalf("refused answer %d %s", e.Status, e.Code)
	}
}

func TestWordFilterConcurrent(t *testing.T) {
	f := newWordFilter(t, ingest.StaticWords{"spam", "傻瓜"}, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 500 {
				in := fmt.Sprintf("%d 傻瓜 %d spam", i, j)
				want := fmt.Sprintf("%d ** %d ****", i, j)
				if got, _ := f.Check(in, ingest.WordsMask); got != want {
					t.Errorf("Check(%q) = %q", in, got)
					return
				}
			}
		})
	}
	wg.Wait()
}

// benchWords is a 10,000-word list of CJK (2-4 characters) and Latin (4-8
// letters) words, and comments of 60 characters mixing both, one in ten
// ending in a listed word: the filter's real workload.
func benchWords() (words, comments []string) {
	r := rand.New(rand.NewPCG(1, 2))
	cjk := func() rune { return rune(0x4E00 + r.IntN(3500)) }
	seen := map[string]bool{}
	for len(words) < 10000 {
		var b strings.Builder
		if r.IntN(2) == 0 {
			for range 2 + r.IntN(3) {
				b.WriteRune(cjk())
			}
		} else {
			for range 4 + r.IntN(5) {
				b.WriteByte(byte('a' + r.IntN(26)))
			}
		}
		if w := b.String(); !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	for i := range 1024 {
		var b []rune
		for len(b) < 60 {
			switch r.IntN(4) {
			case 0:
				b = append(b, []rune("hello ")...)
			case 1:
				b = append(b, rune('A'+r.IntN(26)))
			default:
				b = append(b, cjk())
			}
		}
		b = b[:60]
		if i%10 == 0 {
			w := []rune(" " + words[r.IntN(len(words))])
			b = append(b[:60-len(w)], w...)
		}
		comments = append(comments, string(b))
	}
	return words, comments
}

// BenchmarkWordFilter is the cost of one comment's check (fold + search,
// and the mask for the one in ten that holds a word).
func BenchmarkWordFilter(b *testing.B) {
	words, comments := benchWords()
	f := newWordFilter(b, ingest.StaticWords(words), nil)
	for _, p := range []ingest.WordPolicy{ingest.WordsMask, ingest.WordsReject} {
		b.Run(p.String(), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				f.Check(comments[i%len(comments)], p)
				i++
			}
		})
	}
}
