package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	// Aho-Corasick: github.com/coregx/ahocorasick, chosen over
	// cloudflare/ahocorasick (answers which patterns matched but not where,
	// so it cannot mask), BobuSumisu/aho-corasick (unchanged since 2020,
	// a heap-allocated *Match per hit) and petar-dambovaliev/aho-corasick
	// (allocates on every search, 0.9 s and 280 MB to build 10,000 words).
	// coregx is maintained (releases through 2026), MIT, has no
	// dependencies, compiles the trie into one flat DFA table and searches
	// without allocating. Measured on 60-character mixed CJK/Latin comments
	// against 10,000 words (BenchmarkWordFilter): a search costs about
	// 0.5 µs where the others took 1.3-1.6 µs; building the list takes
	// about 0.2 s and keeps about 25 MB.
	"github.com/coregx/ahocorasick"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/text/unicode/norm"

	"danmaku/internal/httpx"
	"danmaku/internal/reload"
	"danmaku/internal/rules"
)

// WordPolicy is what a listed word does to a comment. The caller passes it
// per comment, so a room's own setting (an event field, later) can choose
// it without the filter knowing about events.
type WordPolicy uint8

// Word policies. The zero value masks: a listed word never reaches
// viewers, and the rest of the comment still does.
const (
	// WordsMask replaces every character of a listed word with '*'.
	WordsMask WordPolicy = iota
	// WordsReject drops a comment holding a listed word silently: the
	// client is answered as for a stored comment, like every other barrage
	// drop — an error answer would only tell a spammer which words are
	// listed, and make honest clients retry the same text.
	WordsReject
	// WordsOff lets every comment through unchanged.
	WordsOff
	// WordsRefuse drops a comment holding a listed word and answers it
	// with RefusedWordError (422 sensitive_word), for rooms whose clients
	// tell the user why a comment did not appear. Check treats it as
	// WordsReject; only the answer differs.
	WordsRefuse
)

// RefusedWordError is the answer to a comment dropped under WordsRefuse.
// It is not retryable: the same text meets the same list.
func RefusedWordError() *httpx.Error {
	return httpx.Errorf(http.StatusUnprocessableEntity, "sensitive_word", "the comment holds a word this room does not allow; it was not sent")
}

// String names the policy as configuration spells it.
func (p WordPolicy) String() string {
	switch p {
	case WordsMask:
		return "mask"
	case WordsReject:
		return "reject"
	case WordsOff:
		return "off"
	case WordsRefuse:
		return "refuse"
	}
	return "WordPolicy(" + strconv.Itoa(int(p)) + ")"
}

// ParseWordPolicy reads "mask", "reject", "refuse" or "off" ("" is mask).
func ParseWordPolicy(s string) (WordPolicy, error) {
	switch s {
	case "", "mask":
		return WordsMask, nil
	case "reject":
		return WordsReject, nil
	case "off":
		return WordsOff, nil
	case "refuse":
		return WordsRefuse, nil
	}
	return 0, fmt.Errorf("ingest: word policy %q: want mask, reject, refuse or off", s)
}

// WordVerdict is what the filter did to one comment.
type WordVerdict uint8

// Verdicts.
const (
	// WordsClean: no listed word; the text is unchanged.
	WordsClean WordVerdict = iota
	// WordsMasked: listed words were replaced with '*'; store the returned
	// text.
	WordsMasked
	// WordsRejected: the comment holds a listed word and the policy is
	// WordsReject (drop it silently) or WordsRefuse (answer
	// RefusedWordError).
	WordsRejected
)

// WordSource is where the word list comes from. Load returns the list when
// it differs from the version the caller has (since; "" before the first
// load), so that checking every second costs a stat or a small read, and
// the automaton is rebuilt only when the list changed.
type WordSource interface {
	Load(ctx context.Context, since string) (words []string, version string, changed bool, err error)
}

// FileWords reads the word list from a file: one word or phrase per line,
// blank lines and lines starting with '#' ignored. The file is re-read
// when its size or modification time changes, so an operator (or the
// deployment's configuration management, which pushes the same file to
// every ingest node) edits it in place or renames a new one over it, and
// every node filters with it within its reload interval. A missing file is
// an error: a node must not silently run without the list it was given.
type FileWords struct {
	Path string
}

// Load implements WordSource.
func (f FileWords) Load(_ context.Context, since string) ([]string, string, bool, error) {
	fi, err := os.Stat(f.Path)
	if err != nil {
		return nil, "", false, fmt.Errorf("ingest: word list: %w", err)
	}
	version := strconv.FormatInt(fi.Size(), 10) + "-" + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
	if version == since {
		return nil, since, false, nil
	}
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, "", false, fmt.Errorf("ingest: word list: %w", err)
	}
	if err := CheckWordList(b); err != nil {
		return nil, "", false, fmt.Errorf("ingest: word list %s: %w", f.Path, err)
	}
	return ParseWordList(b), version, true, nil
}

// Bounds of a word list (CheckWordList).
const (
	// MaxWords bounds a list: 10,000 words build in about 0.2 s, and
	// every node builds the list it loads.
	MaxWords = 100_000
	// MaxWordBytes bounds one word or phrase.
	MaxWordBytes = 256
	// CodeBadWords is the code of a word list CheckWordList refuses.
	CodeBadWords = "bad_words"
)

// CheckWordList refuses a word list that ParseWordList would read into
// something other than what its author meant, whole, naming the line: not
// UTF-8, a control character (a word with one in it matches nothing a
// normalised comment holds), a word longer than MaxWordBytes, more than
// MaxWords words, or a body over rules.MaxDocument. Every node checks the
// list it loads again, so a list written into the store by other means
// never replaces the one in force. An empty list is a list: it filters
// nothing.
func CheckWordList(b []byte) error {
	if len(b) > rules.MaxDocument {
		return &rules.BadDocument{Code: httpx.CodeTooLarge, Message: fmt.Sprintf("a word list holds at most %d bytes (got %d)", rules.MaxDocument, len(b))}
	}
	words := 0
	for i, line := range bytes.Split(b, []byte("\n")) {
		n := i + 1
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if !utf8.Valid(line) {
			return &rules.BadDocument{Code: CodeBadWords, Message: fmt.Sprintf("line %d: not valid UTF-8", n)}
		}
		if i := bytes.IndexFunc(line, unicode.IsControl); i >= 0 {
			return &rules.BadDocument{Code: CodeBadWords, Message: fmt.Sprintf("line %d: a control character (U+%04X) at byte %d", n, []rune(string(line[i:]))[0], i)}
		}
		if len(line) > MaxWordBytes {
			return &rules.BadDocument{Code: CodeBadWords, Message: fmt.Sprintf("line %d: a word of at most %d bytes (got %d)", n, MaxWordBytes, len(line))}
		}
		if words++; words > MaxWords {
			return &rules.BadDocument{Code: CodeBadWords, Message: fmt.Sprintf("line %d: at most %d words", n, MaxWords)}
		}
	}
	return nil
}

// StoreWords is the word list in force in a rules.Store (rules.KindWords):
// the fleet's one list, pushed with `danmaku words push`. Every Load reads
// the version's number; the list only when it moved. Nothing pushed yet is
// an empty list.
type StoreWords struct{ f *rules.Follower }

// NewStoreWords follows the word lists of store.
func NewStoreWords(store rules.Store) *StoreWords {
	return &StoreWords{f: rules.NewFollower(store, rules.KindWords)}
}

// Load implements WordSource. A version CheckWordList refuses is an error:
// the list in force stays.
func (s *StoreWords) Load(ctx context.Context, since string) ([]string, string, bool, error) {
	v, body, err := s.f.Load(ctx)
	if err != nil {
		return nil, "", false, fmt.Errorf("ingest: word list: %w", err)
	}
	version := strconv.FormatInt(v, 10)
	if version == since {
		return nil, since, false, nil
	}
	if err := CheckWordList(body); err != nil {
		return nil, "", false, fmt.Errorf("ingest: word list version %s: %w", version, err)
	}
	return ParseWordList(body), version, true, nil
}

// ParseWordList splits a word list file into its words: one a line,
// trimmed; blank lines and '#' comments skipped.
func ParseWordList(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out
}

// StaticWords is a fixed list (embedded mode, tests).
type StaticWords []string

// Load implements WordSource: the list never changes after the first load.
func (s StaticWords) Load(_ context.Context, since string) ([]string, string, bool, error) {
	if since == "static" {
		return nil, since, false, nil
	}
	return s, "static", true, nil
}

// defaultWordReload is how often the source is checked: every node uses a
// changed list within a second — the poll, the read and the build of the
// automaton (about 0.2 s for 10,000 words) — as the rate-limit rules do.
const defaultWordReload = 250 * time.Millisecond

// WordFilterConfig configures a WordFilter.
type WordFilterConfig struct {
	// Source supplies the list. Nil: an empty list (every comment clean),
	// for deployments that filter nothing.
	Source WordSource
	// Reload is how often Run checks Source. Zero: 250 ms.
	Reload time.Duration
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// WordFilter finds listed words in comments: case-insensitively, after
// NFKC (so full-width "ＳＰＡＭ" and "spam" are one word, as are
// compatibility forms such as "㈱" and "(株)"), with Latin words matched
// whole (a listed "ass" does not touch "class"; CJK has no word
// boundaries, so CJK words match anywhere). The list is an immutable
// snapshot swapped atomically on reload, so Check takes no lock. Safe for
// concurrent use.
type WordFilter struct {
	src   WordSource
	every time.Duration
	log   *slog.Logger

	set     atomic.Pointer[wordSet]
	version string // last loaded version; only Refresh touches it
	mu      sync.Mutex

	filtered *prometheus.CounterVec
	size     prometheus.Gauge
	errs     prometheus.Counter
}

// wordSet is one loaded list.
type wordSet struct {
	version string                 // the source's version; "" before the first load
	changed chan struct{}          // closed when a newer list replaces this one
	ac      *ahocorasick.Automaton // nil: empty list
	// edge[i] says which ends of pattern i are Latin letters or digits,
	// where a match must meet a word boundary: bit 0 start, bit 1 end.
	edge []uint8
}

// NewWordFilter returns a filter; call Refresh or Run to load the list.
// Until then (and for a nil Source) every comment is clean.
func NewWordFilter(cfg WordFilterConfig) (*WordFilter, error) {
	if cfg.Reload < 0 {
		return nil, errors.New("ingest: words: negative Reload")
	}
	if cfg.Reload == 0 {
		cfg.Reload = defaultWordReload
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	f := &WordFilter{src: cfg.Source, every: cfg.Reload, log: cfg.Logger}
	f.set.Store(&wordSet{changed: make(chan struct{})})
	f.filtered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_words_filtered_total",
		Help: "Comments holding a listed word, by action (masked, rejected).",
	}, []string{"action"})
	f.size = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "danmaku_ingest_words_listed",
		Help: "Words in the loaded sensitive-word list.",
	})
	f.errs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_ingest_words_reload_errors_total",
		Help: "Failed reloads of the word list (the last list stays in force).",
	})
	for _, c := range []prometheus.Collector{f.filtered, f.size, f.errs} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("ingest: words metrics: %w", err)
		}
	}
	return f, nil
}

// Refresh loads the list once if it changed. A failed load keeps the last
// list.
func (f *WordFilter) Refresh(ctx context.Context) error {
	if f.src == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	words, version, changed, err := f.src.Load(ctx, f.version)
	if err != nil {
		f.errs.Inc()
		return err
	}
	if !changed {
		return nil
	}
	set, n, err := buildWordSet(words)
	if err != nil {
		f.errs.Inc()
		return err
	}
	set.version, set.changed = version, make(chan struct{})
	old := f.set.Swap(set)
	close(old.changed)
	f.version = version
	f.size.Set(float64(n))
	f.log.Info("ingest: word list loaded", "words", n, "version", version)
	return nil
}

// Loaded returns the version of the list in force ("" before the first
// load) and a channel closed when another list replaces it: a test or a
// watcher waits on it instead of polling.
func (f *WordFilter) Loaded() (version string, changed <-chan struct{}) {
	s := f.set.Load()
	return s.version, s.changed
}

// Run reloads every interval until ctx is done.
func (f *WordFilter) Run(ctx context.Context) error {
	return reload.Every(ctx, f.every, f.log, "ingest: word list", f.Refresh)
}

func buildWordSet(words []string) (*wordSet, int, error) {
	seen := make(map[string]bool, len(words))
	var pats []string
	var edge []uint8
	var b foldBuf
	for _, w := range words {
		b.fold(w)
		p := strings.TrimSpace(string(b.hay))
		if p == "" || seen[p] {
			continue
		}
		seen[p] = true
		pats = append(pats, p)
		var e uint8
		if r, _ := utf8.DecodeRuneInString(p); isWordByte(r) {
			e |= 1
		}
		if r, _ := utf8.DecodeLastRuneInString(p); isWordByte(r) {
			e |= 2
		}
		edge = append(edge, e)
	}
	if len(pats) == 0 {
		return &wordSet{}, 0, nil
	}
	ac, err := ahocorasick.NewBuilder().AddStrings(pats).Build()
	if err != nil {
		return nil, 0, fmt.Errorf("ingest: word list: %w", err)
	}
	return &wordSet{ac: ac, edge: edge}, len(pats), nil
}

// isWordByte reports whether r is an ASCII letter or digit: the characters
// of Latin words, whose matches must start and end at a word boundary.
func isWordByte(r rune) bool {
	return r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
}

// Check applies the list to text under policy p and returns the text to
// store (masked or unchanged) and the verdict. text is a comment as the
// ingest stores it (normalize). A masked text keeps its length in
// characters: each masked character becomes one '*'.
func (f *WordFilter) Check(text string, p WordPolicy) (string, WordVerdict) {
	set := f.set.Load()
	if p == WordsOff || set.ac == nil {
		return text, WordsClean
	}
	b := foldPool.Get().(*foldBuf)
	defer foldPool.Put(b)
	b.fold(text)
	// FindAllOverlapping walks the DFA once and allocates only when there
	// are matches; Find and IsMatch run a start-byte prefilter that costs
	// 6x more on short CJK text, where nearly every byte can start a word.
	matches := set.ac.FindAllOverlapping(b.hay)
	if len(matches) == 0 {
		return text, WordsClean
	}
	masked := false
	for _, m := range matches {
		if !b.boundaryOK(m.Start, m.End, set.edge[m.PatternID]) {
			continue
		}
		if p == WordsReject || p == WordsRefuse {
			f.filtered.WithLabelValues("rejected").Inc()
			return "", WordsRejected
		}
		b.markMasked(m.Start, m.End, len(text))
		masked = true
	}
	if !masked {
		return text, WordsClean
	}
	f.filtered.WithLabelValues("masked").Inc()
	return b.maskedText(text), WordsMasked
}

// foldBuf holds a comment folded for matching and the way back: hay is
// NFKC, lower-cased text. When folding kept every character's byte length
// (identity: nearly every comment), hay's byte offsets are the original's;
// otherwise from[i]/to[i] bound the bytes of the original text that hay
// byte i came from (a whole normalisation segment, so a match inside
// "㈱" → "(株)" masks the one original character).
type foldBuf struct {
	hay      []byte
	identity bool
	from, to []int32
	mask     []bool // per original byte: masked
	it       norm.Iter
}

var foldPool = sync.Pool{New: func() any { return new(foldBuf) }}

// inert reports whether r is its own NFKC form whatever surrounds it
// (nothing decomposes it or composes with it) and has no case: the scripts
// most comments are written in, checked by range instead of by the
// normalisation tables. A combining mark that would compose with such a
// character is not inert itself, so its presence sends the comment down
// the full check.
func inert(r rune) bool {
	switch {
	case r >= 0x4E00 && r <= 0x9FFF, // CJK unified ideographs
		r >= 0x3400 && r <= 0x4DBF, // extension A
		r >= 0x3041 && r <= 0x3096, // hiragana
		r >= 0x30A1 && r <= 0x30FA, // katakana
		r >= 0xAC00 && r <= 0xD7A3: // Hangul syllables
		return true
	}
	return false
}

// fold fills b from s. The fast path copies s, lower-casing in place; a
// comment with a character outside ASCII and the inert ranges is checked
// against the NFKC tables, and only one that is not already NFKC, or whose
// lower case changes a character's length, takes the slow path.
func (b *foldBuf) fold(s string) {
	b.hay = append(b.hay[:0], s...)
	b.identity = true
	check := false
	for i := 0; i < len(b.hay); {
		c := b.hay[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				b.hay[i] = c + 'a' - 'A'
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b.hay[i:])
		if !inert(r) {
			check = true
			if l := unicode.ToLower(r); l != r {
				if utf8.RuneLen(l) != n {
					b.foldSlow(s)
					return
				}
				utf8.EncodeRune(b.hay[i:], l)
			}
		}
		i += n
	}
	if check && norm.NFKC.QuickSpanString(s) != len(s) {
		b.foldSlow(s)
	}
}

// foldSlow normalises s with NFKC and records where each byte came from.
func (b *foldBuf) foldSlow(s string) {
	b.hay, b.from, b.to, b.identity = b.hay[:0], b.from[:0], b.to[:0], false
	// The iterator hands out a decomposition piece by piece ("㈱" gives
	// "(", "株", ")") and moves its position only after the last piece, so
	// the bytes of a group are assigned their original range once it is
	// known.
	it := &b.it
	it.InitString(norm.NFKC, s)
	group, groupStart := 0, 0
	for !it.Done() {
		seg := it.Next()
		for len(seg) > 0 {
			r, n := utf8.DecodeRune(seg)
			seg = seg[n:]
			b.hay = utf8.AppendRune(b.hay, unicode.ToLower(r))
		}
		if end := it.Pos(); end > groupStart {
			for range len(b.hay) - group {
				b.from = append(b.from, int32(groupStart))
				b.to = append(b.to, int32(end))
			}
			group, groupStart = len(b.hay), end
		}
	}
	for range len(b.hay) - group {
		b.from = append(b.from, int32(groupStart))
		b.to = append(b.to, int32(len(s)))
	}
}

// boundaryOK reports whether hay[start:end] may count as a match: a Latin
// word's Latin ends must not continue a Latin word in the text.
func (b *foldBuf) boundaryOK(start, end int, edge uint8) bool {
	if edge&1 != 0 && start > 0 && isWordByte(rune(b.hay[start-1])) {
		return false
	}
	if edge&2 != 0 && end < len(b.hay) && isWordByte(rune(b.hay[end])) {
		return false
	}
	return true
}

// markMasked marks the original bytes hay[start:end] came from.
func (b *foldBuf) markMasked(start, end, n int) {
	if len(b.mask) != n {
		b.mask = slices.Grow(b.mask[:0], n)[:n]
		clear(b.mask)
	}
	if !b.identity {
		start, end = int(b.from[start]), int(b.to[end-1])
	}
	for i := start; i < end; i++ {
		b.mask[i] = true
	}
}

// maskedText returns text with every marked character replaced by '*',
// and clears the marks.
func (b *foldBuf) maskedText(text string) string {
	var out strings.Builder
	out.Grow(len(text))
	for i, r := range text {
		if b.mask[i] {
			out.WriteByte('*')
		} else {
			out.WriteRune(r)
		}
	}
	b.mask = b.mask[:0]
	return out.String()
}
