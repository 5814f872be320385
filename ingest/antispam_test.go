package ingest_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"danmaku/ingest"
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
