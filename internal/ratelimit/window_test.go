package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/ratelimit"
	"danmaku/internal/redisx/redistest"
)

// windowBackend is one Window under test; pass lets time go by (a fake
// clock for memory, sleeping for Redis, whose clock the script reads).
type windowBackend struct {
	name string
	open func(t *testing.T) (w ratelimit.Window, pass func(time.Duration))
}

func windowBackends() []windowBackend {
	out := []windowBackend{{"memory", func(t *testing.T) (ratelimit.Window, func(time.Duration)) {
		c := clock.NewFake(time.Unix(1_700_000_000, 0))
		return ratelimit.NewMemoryWindow(c), c.Advance
	}}}
	for _, k := range redistest.Kinds() {
		out = append(out, windowBackend{k.Name, func(t *testing.T) (ratelimit.Window, func(time.Duration)) {
			return ratelimit.NewRedisWindow(k.Client(t)), time.Sleep
		}})
	}
	return out
}

func take(t *testing.T, w ratelimit.Window, key string, limit int64, win time.Duration) ratelimit.WindowResult {
	t.Helper()
	r, err := w.Take(context.Background(), key, limit, win)
	if err != nil {
		t.Fatalf("Take(%s): %v", key, err)
	}
	return r
}

// TestWindowConformance holds every Window to the same sliding log.
func TestWindowConformance(t *testing.T) {
	for _, b := range windowBackends() {
		t.Run(b.name, func(t *testing.T) {
			w, pass := b.open(t)
			t.Run("admits the limit, then refuses with the wait", func(t *testing.T) {
				for i := range int64(3) {
					if r := take(t, w, "a", 3, 300*time.Millisecond); !r.Allowed || r.Count != i+1 {
						t.Fatalf("take %d: %+v", i, r)
					}
				}
				r := take(t, w, "a", 3, 300*time.Millisecond)
				if r.Allowed || r.Count != 3 || r.RetryIn <= 0 || r.RetryIn > 300*time.Millisecond {
					t.Fatalf("over the limit: %+v", r)
				}
				if r := take(t, w, "b", 3, 300*time.Millisecond); !r.Allowed {
					t.Fatalf("another key is limited: %+v", r)
				}
			})
			t.Run("slides", func(t *testing.T) {
				take(t, w, "s", 2, 400*time.Millisecond)
				pass(250 * time.Millisecond)
				take(t, w, "s", 2, 400*time.Millisecond)
				if r := take(t, w, "s", 2, 400*time.Millisecond); r.Allowed {
					t.Fatal("admitted over the limit")
				}
				pass(200 * time.Millisecond) // the first left the window; the second not
				if r := take(t, w, "s", 2, 400*time.Millisecond); !r.Allowed || r.Count != 2 {
					t.Fatalf("after the first left: %+v", r)
				}
				if r := take(t, w, "s", 2, 400*time.Millisecond); r.Allowed {
					t.Fatal("admitted over the limit after sliding")
				}
			})
			t.Run("exact under concurrency", func(t *testing.T) {
				var mu sync.Mutex
				admitted := 0
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for range 25 {
							if take(t, w, "c", 50, time.Minute).Allowed {
								mu.Lock()
								admitted++
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				if admitted != 50 {
					t.Fatalf("admitted %d of 200, want exactly 50", admitted)
				}
			})
		})
	}
}
