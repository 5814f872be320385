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

// windowBackend is one Window under test; pass lets time go by on its fake
// clock (Redis's windows are timed by it too: NewRedisWindowOn). Redis
// still expires a set on its own clock one window after the last
// admission, so the windows below are tens of seconds: longer than any
// pause of a loaded machine between two takes.
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
			c := clock.NewFake(time.Unix(1_700_000_000, 0))
			return ratelimit.NewRedisWindowOn(k.Client(t), c), c.Advance
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
					if r := take(t, w, "a", 3, 30*time.Second); !r.Allowed || r.Count != i+1 {
						t.Fatalf("take %d: %+v", i, r)
					}
				}
				r := take(t, w, "a", 3, 30*time.Second)
				if r.Allowed || r.Count != 3 || r.RetryIn <= 0 || r.RetryIn > 30*time.Second {
					t.Fatalf("over the limit: %+v", r)
				}
				if r := take(t, w, "b", 3, 30*time.Second); !r.Allowed {
					t.Fatalf("another key is limited: %+v", r)
				}
			})
			t.Run("slides", func(t *testing.T) {
				take(t, w, "s", 2, 40*time.Second)
				pass(25 * time.Second)
				take(t, w, "s", 2, 40*time.Second)
				if r := take(t, w, "s", 2, 40*time.Second); r.Allowed {
					t.Fatal("admitted over the limit")
				}
				pass(20 * time.Second) // the first left the window; the second not
				if r := take(t, w, "s", 2, 40*time.Second); !r.Allowed || r.Count != 2 {
					t.Fatalf("after the first left: %+v", r)
				}
				if r := take(t, w, "s", 2, 40*time.Second); r.Allowed {
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
