package gslb

import (
	"fmt"
	"testing"
	"time"

	"danmaku/internal/clock"
)

// TestLastEntriesHoldOneTokenLife pins what the entry's cache of last
// answers holds: the users who entered within the last token life, not
// every user that ever entered. Without the rotation a 10-minute soak's
// token refresh raised each gslb's heap by the users new to it (about
// 0.9 KiB each, measured with heap profiles), and a show's churn of
// distinct users filled it to LastEntries with tokens no answer could
// reuse.
func TestLastEntriesHoldOneTokenLife(t *testing.T) {
	const keep = 5 * time.Minute // half the default token life
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	l := newLastEntries(defaultLastEntries, keep, clk)
	e := &lastEntry{token: "t"}
	const perWave = 1000
	for wave := range 20 {
		for i := range perWave {
			l.put(fmt.Sprintf("u%d-%d", wave, i), "r", e)
		}
		// Two generations at most: this wave's and the one before.
		if n := l.len(); n > 2*perWave {
			t.Fatalf("wave %d: %d answers held after %d distinct users; want at most %d (the last token life's)", wave, n, (wave+1)*perWave, 2*perWave)
		}
		clk.Advance(keep)
	}
	// Nothing is dropped while it can be reused: an answer put just
	// before a rotation is still there keep later.
	clk.Advance(keep - time.Second)
	l.put("late", "r", e)
	clk.Advance(time.Second)
	l.put("next", "r", e) // rotates
	clk.Advance(keep - time.Nanosecond)
	if l.get("late", "r") == nil {
		t.Fatal("an answer put keep ago (its token still has half its life) was dropped")
	}
	// Idle for a token life: every shard drops both generations at its
	// next access, and a user's answer put again is held once.
	clk.Advance(4 * keep)
	for i := range 100 {
		l.put("same", "r", e)
		if i%10 == 0 {
			clk.Advance(keep)
		}
	}
	if l.get("late", "r") != nil || l.get("next", "r") != nil {
		t.Fatal("answers two token lives old are still held")
	}
	if got := l.shard(lastKey("same", "r")); len(got.cur)+len(got.prev) != 1 {
		t.Fatalf("a user put 100 times across rotations is held %d times; want 1", len(got.cur)+len(got.prev))
	}
}

// TestLastEntriesBounded: a burst of distinct users within one token life
// is still bounded by LastEntries.
func TestLastEntriesBounded(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	l := newLastEntries(320, time.Minute, clk)
	e := &lastEntry{}
	for i := range 10_000 {
		l.put(fmt.Sprint("u", i), "r", e)
		if i == 5000 {
			clk.Advance(time.Minute) // a rotation mid-burst: prev is evicted first
		}
	}
	if n := l.len(); n > 320 {
		t.Fatalf("%d answers held; want at most 320", n)
	}
}
