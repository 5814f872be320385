package ingest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"danmaku/ingest"
	"danmaku/internal/audit"
	"danmaku/internal/clock"
)

func newDuplicates(t testing.TB, cfg ingest.DuplicatesConfig) *ingest.Duplicates {
	t.Helper()
	d, err := ingest.NewDuplicates(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDuplicatesWindow(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := newDuplicates(t, ingest.DuplicatesConfig{Window: 10 * time.Second, Registerer: reg})
	t0 := time.Unix(1_700_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		room, text string
		at         time.Duration
		dup        bool
	}{
		{"r1", "666", 0, false},
		{"r1", "666", time.Second, true},
		{"r1", "６６６", 2 * time.Second, true}, // full-width: the same text folded
		{"r1", "Hello", 2 * time.Second, false},
		{"r1", "HELLO", 3 * time.Second, true}, // case folded
		{"r2", "666", 3 * time.Second, false},  // rooms are apart
		{"r1", "666", 9999 * time.Millisecond, true},
		{"r1", "666", 10 * time.Second, false}, // the window counts from the first, copies do not extend it
		{"r1", "666", 15 * time.Second, true},
		{"r1", "666", 40 * time.Second, false}, // long after: both generations gone
	}
	for i, s := range steps {
		if got := d.Seen(s.room, s.text, at(s.at)); got != s.dup {
			t.Fatalf("step %d: Seen(%s, %q, +%v) = %v, want %v", i, s.room, s.text, s.at, got, s.dup)
		}
	}
	want := `
# HELP danmaku_ingest_duplicates_dropped_total Comments dropped as a copy of a text shown in the same room within the duplicate window.
# TYPE danmaku_ingest_duplicates_dropped_total counter
danmaku_ingest_duplicates_dropped_total 5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// TestDuplicatesRoomWindow: a room's own window (its event's
// duplicate_window_ms) applies to that room alone and changes at run time.
func TestDuplicatesRoomWindow(t *testing.T) {
	d := newDuplicates(t, ingest.DuplicatesConfig{Window: 10 * time.Second})
	t0 := time.Unix(1_700_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		room, text string
		at, window time.Duration
		dup        bool
	}{
		{"short", "666", 0, 2 * time.Second, false},
		{"long", "666", 0, 0, false},
		{"short", "666", time.Second, 2 * time.Second, true},
		{"short", "666", 2 * time.Second, 2 * time.Second, false}, // its 2 s are over
		{"long", "666", 5 * time.Second, 0, true},                 // the node's 10 s are not
		{"short", "777", 10 * time.Second, 30 * time.Second, false},
		{"short", "777", 35 * time.Second, 30 * time.Second, true}, // the longer window now holds
		{"short", "777", 41 * time.Second, 30 * time.Second, false},
	}
	for i, s := range steps {
		if got := d.SeenWithin(s.room, s.text, at(s.at), s.window); got != s.dup {
			t.Fatalf("step %d: SeenWithin(%s, %q, +%v, %v) = %v, want %v", i, s.room, s.text, s.at, s.window, got, s.dup)
		}
	}
	// A room with a 30 s window is not swept after the node's two windows.
	d.Sweep(at(41*time.Second + 25*time.Second))
	if d.Rooms() != 1 {
		t.Fatalf("rooms after sweep = %d, want the long-window room kept", d.Rooms())
	}
}

// TestDuplicatesBounded: a flood of distinct texts forgets the oldest
// rather than growing, and a room forgotten by Sweep starts afresh.
func TestDuplicatesBounded(t *testing.T) {
	d := newDuplicates(t, ingest.DuplicatesConfig{Window: 10 * time.Second, PerRoom: 160})
	now := time.Unix(1_700_000_000, 0)
	if d.Seen("r", "first", now) {
		t.Fatal("first text is a duplicate")
	}
	// Far more distinct texts than remembered: "first" is pushed out of
	// both generations of its shard.
	for i := range 10_000 {
		d.Seen("r", fmt.Sprintf("text %d", i), now)
	}
	if d.Seen("r", "first", now) {
		t.Fatal("the bound kept the oldest text")
	}
	if !d.Seen("r", "text 9999", now) {
		t.Fatal("the newest text was forgotten")
	}
	d.Sweep(now.Add(19 * time.Second))
	if d.Rooms() != 1 {
		t.Fatalf("room swept before two windows: %d rooms", d.Rooms())
	}
	d.Sweep(now.Add(20 * time.Second))
	if d.Rooms() != 0 {
		t.Fatalf("idle room kept: %d rooms", d.Rooms())
	}
	if _, err := ingest.NewDuplicates(ingest.DuplicatesConfig{Window: -1}); err == nil {
		t.Fatal("negative window accepted")
	}
}

// TestDuplicatesConcurrent: of many goroutines sending the same text at
// once, exactly one passes.
func TestDuplicatesConcurrent(t *testing.T) {
	d := newDuplicates(t, ingest.DuplicatesConfig{})
	now := time.Unix(1_700_000_000, 0)
	for round := range 20 {
		text := strings.Repeat("x", round+1)
		var passed atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 10 {
					if !d.Seen("room", text, now) {
						passed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if passed.Load() != 1 {
			t.Fatalf("round %d: %d copies passed, want 1", round, passed.Load())
		}
	}
}

// BenchmarkDuplicates is one comment's duplicate check in a busy room:
// mostly distinct texts (the check that remembers), one in four a copy.
func BenchmarkDuplicates(b *testing.B) {
	_, comments := benchWords()
	texts := make([]string, 1<<16)
	for i := range texts {
		texts[i] = comments[i%len(comments)]
		if i%4 != 0 {
			texts[i] = fmt.Sprint(i, texts[i]) // distinct
		}
	}
	d := newDuplicates(b, ingest.DuplicatesConfig{})
	now := time.Unix(1_700_000_000, 0)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			d.Seen("room", texts[i%len(texts)], now.Add(time.Duration(i)*time.Microsecond))
			i++
		}
	})
}

// TestAntiSpamOrder: the checks run in order, each stopping the comment
// with its reason, and only the checks that ran are charged.
func TestAntiSpamOrder(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	bans := ingest.NewMemoryBanStore()
	_ = bans.Put(ctx, ingest.Ban{User: "troll", At: clk.Now()})
	list, err := ingest.NewBanList(ingest.BanListConfig{Store: bans, Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := list.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	global := &scriptedLimiter{inner: ingest.NewMemoryGlobalLimiter(clk)}
	a := &ingest.AntiSpam{
		Bans:   list,
		Global: newGate(t, ingest.GlobalGateConfig{Limiter: global, Batch: 1, Clock: clk}),
		Words:  newWordFilter(t, ingest.StaticWords{"spam"}, nil),
		Dups:   newDuplicates(t, ingest.DuplicatesConfig{Clock: clk}),
	}
	check := func(user, text string, p ingest.WordPolicy, rate float64) ingest.SpamVerdict {
		return a.Check(ingest.SpamCheck{Room: "r", Event: "ev", User: user, GlobalPerSec: rate, Text: text, Policy: p, Now: clk.Now()})
	}
	const rate = 3 // burst 3, no refill while the clock stands still
	steps := []struct {
		name, user, text string
		policy           ingest.WordPolicy
		rate             float64
		reason, stored   string
		decision         audit.Decision
		refuse           bool
	}{
		{"banned, before the global limit", "troll", "hi", ingest.WordsMask, rate, ingest.ReasonBanned, "", audit.Dropped, false},
		{"clean", "u1", "hello", ingest.WordsMask, rate, "", "hello", audit.Stored, false},
		{"masked", "u2", "buy spam", ingest.WordsMask, rate, "", "buy ****", audit.Masked, false},
		{"rejected silently", "u3", "spam!", ingest.WordsReject, 0, ingest.ReasonSensitiveWord, "", audit.Dropped, false},
		{"refused with a code", "u3", "spam?", ingest.WordsRefuse, 0, ingest.ReasonSensitiveWord, "", audit.Rejected, true},
		{"a masked copy is a duplicate", "u4", "BUY SPAM", ingest.WordsMask, 0, ingest.ReasonDuplicate, "", audit.Dropped, false},
		{"a copy", "u5", "hello", ingest.WordsMask, 0, ingest.ReasonDuplicate, "", audit.Dropped, false},
		{"global burst used up", "u6", "new text", ingest.WordsMask, rate, "", "new text", audit.Stored, false},
		{"over the global limit", "u7", "another", ingest.WordsMask, rate, ingest.ReasonGlobalLimit, "", audit.Dropped, false},
	}
	for _, s := range steps {
		v := check(s.user, s.text, s.policy, s.rate)
		if v.Reason != s.reason || v.Passed() != (s.reason == "") || (v.Passed() && v.Text != s.stored) || v.Decision() != s.decision || (v.Refuse != nil) != s.refuse {
			t.Fatalf("%s: %+v; want reason %q, text %q, decision %s, refuse %v", s.name, v, s.reason, s.stored, s.decision, s.refuse)
		}
	}
	if v := check("u8", "another", ingest.WordsMask, 0); !v.Passed() {
		t.Fatalf("a text over the global limit was remembered as a duplicate: %+v", v)
	}
	if n := global.calls.Load(); n != 4 {
		t.Fatalf("global limiter asked %d times, want 4 (the banned comment and unlimited ones take no token)", n)
	}
	// Every check off: everything passes unchanged.
	var none ingest.AntiSpam
	if v := none.Check(ingest.SpamCheck{Room: "r", User: "troll", Text: "spam"}); !v.Passed() || v.Text != "spam" {
		t.Fatalf("no checks: %+v", v)
	}
}
