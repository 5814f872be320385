package loadgen

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
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
