package loadgen

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"danmaku/sdk/wire"
)

// TestJoinPacer: joins start at the rate, one every 1/rate from the
// pacer's start, whoever asks first; without a rate they all start at once.
func TestJoinPacer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		p := &joinPacer{rate: 20, start: start}
		var mu sync.Mutex
		var at []time.Duration
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				if err := p.wait(t.Context()); err != nil {
					t.Error(err)
				}
				mu.Lock()
				at = append(at, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		want := []time.Duration{0, 50 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond}
		if len(at) != len(want) {
			t.Fatalf("joined at %v", at)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Errorf("join %d at %v, want %v (all: %v)", i, at[i], want[i], at)
			}
		}
		if got := p.span(100); got != 5*time.Second {
			t.Errorf("span of 100 joins at 20/s: %v", got)
		}

		// A cancelled wait returns at once with the context's error.
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := p.wait(ctx); err == nil {
			t.Error("a cancelled wait returned no error")
		}

		unpaced := &joinPacer{start: time.Now()}
		for range 3 {
			if err := unpaced.wait(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d != 200*time.Millisecond || unpaced.span(1000) != 0 {
			t.Errorf("unpaced joins waited: %v", d)
		}
	})
}

// TestBarrageSplit: a delivery is cut at the comment's stream id and its
// slot's end, and the three parts add up to the whole.
func TestBarrageSplit(t *testing.T) {
	g := &Generator{}
	g.segmentMs.Store(1000)
	sched := time.UnixMilli(1_700_000_000_900)   // due at .900
	id := "1700000001020-3"                      // stored at 1.020 s: slot ...001, ending at 2.000 s
	decoded := time.UnixMilli(1_700_000_002_140) // decoded 140 ms after the slot's end
	g.observeBarrageSplit(sched.UnixNano(), id, decoded)
	for _, c := range []struct {
		name string
		h    *Histogram
		want time.Duration
	}{
		{"to store", &g.lat.toStore, 120 * time.Millisecond},
		{"to slot end", &g.lat.toEnd, 980 * time.Millisecond},
		{"after slot end", &g.lat.afterEnd, 140 * time.Millisecond},
	} {
		if c.h.Count() != 1 || c.h.Max() != c.want {
			t.Errorf("%s: %d samples, max %v, want %v", c.name, c.h.Count(), c.h.Max(), c.want)
		}
	}
	// A bad id is not timed (it is not the generator's to judge).
	g.observeBarrageSplit(sched.UnixNano(), "nope", decoded)
	if g.lat.toStore.Count() != 1 {
		t.Error("a bad id was timed")
	}
}

// TestRefreshEvery: a user re-fetches its entry at 80 % of the token's
// life, as the SDK does, or sooner with RefreshEvery; never later, and
// never within a second of the fetch.
func TestRefreshEvery(t *testing.T) {
	fetched := time.Unix(1_000, 0)
	entry := func(life time.Duration) wire.Entry {
		now := fetched.UnixMilli()
		return wire.Entry{Ingest: []string{"http://ingest"}, Token: "t", ServerTimeMs: now, TokenExpiresMs: now + life.Milliseconds()}
	}
	for _, c := range []struct {
		life, every, want time.Duration
	}{
		{10 * time.Minute, 0, 8 * time.Minute},
		{10 * time.Minute, 2 * time.Minute, 2 * time.Minute},
		{time.Minute, 2 * time.Minute, 48 * time.Second}, // the token's 80 % comes first
		{10 * time.Minute, time.Millisecond, time.Second},
	} {
		if got := newSession(entry(c.life), "demo", fetched, c.every).refreshAt.Sub(fetched); got != c.want {
			t.Errorf("token life %v, RefreshEvery %v: re-fetched after %v, want %v", c.life, c.every, got, c.want)
		}
	}
	cfg := Config{GSLB: "http://gslb", Room: "demo", RefreshEvery: -time.Second}
	if err := cfg.applyDefaults(); err == nil {
		t.Error("a negative RefreshEvery was accepted")
	}
}

// TestPendingDecodes: a gift decoded before its POST's answer is read
// waits for it across the periodic matches and is counted once the answer
// is in — not dropped at the first match, as when a thousand viewers got
// it through the edge before the answer; a decode whose answer never comes
// is let go once no answer can come; and decodes beyond the bound are
// counted as untracked, never silently lost.
func TestPendingDecodes(t *testing.T) {
	g, err := New(Config{GSLB: "http://gslb", Room: "demo", Pollers: 2})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	g.giftDecoded(1, "100-0", now)
	g.resolvePending(false)
	if len(g.pending) != 1 || g.pc.giftPairs.Load() != 0 {
		t.Fatalf("before its answer: %d pending, %d pairs; want it kept, uncounted", len(g.pending), g.pc.giftPairs.Load())
	}
	g.giftIDs["100-0"] = &giftSample{sentNs: now.Add(-time.Second).UnixNano()}
	g.resolvePending(false)
	if s := g.giftIDs["100-0"]; len(g.pending) != 0 || g.pc.giftPairs.Load() != 1 || s.perPoller[1] != 1 || s.seenBy != 1 {
		t.Fatalf("after its answer: %d pending, %d pairs, sample %+v; want it counted for poller 1", len(g.pending), g.pc.giftPairs.Load(), s)
	}
	// Another sender's gift and a comment never answered: kept while an
	// answer may come, then let go (the comment counted as unanswered).
	old := now.Add(-g.pendingLife() - time.Second)
	g.addPending(decodeEvent{gift: true, poller: 0, id: "200-0", at: old})
	g.addPending(decodeEvent{seq: 7, id: "300-0", at: old})
	g.addPending(decodeEvent{gift: true, poller: 0, id: "400-0", at: now})
	g.resolvePending(false)
	if len(g.pending) != 1 || g.decodeUnacc.Load() != 1 {
		t.Fatalf("%d pending, %d unanswered; want the fresh one kept and the old comment counted", len(g.pending), g.decodeUnacc.Load())
	}
	g.resolvePending(true)
	if len(g.pending) != 0 {
		t.Fatalf("%d pending after the last match", len(g.pending))
	}
	for range maxPending + 3 {
		g.addPending(decodeEvent{gift: true, id: "500-0", at: now})
	}
	if g.pendingOver.Load() != 3 {
		t.Fatalf("untracked %d, want 3 past the bound", g.pendingOver.Load())
	}
}
