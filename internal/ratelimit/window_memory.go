package ratelimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"danmaku/internal/clock"
)

var _ Window = (*MemoryWindow)(nil)

// MemoryWindow is a Window in this process: an exact log of admission
// times per key. Safe for concurrent use.
type MemoryWindow struct {
	clk    clock.Clock
	seed   maphash.Seed
	shards [windowShards]windowShard
}

const windowShards = 32

type windowShard struct {
	mu sync.Mutex
	m  map[string]*windowLog
}

// windowLog holds the admission times of one key, oldest first, and how
// long its window was at the last take (for Sweep).
type windowLog struct {
	at     []time.Time
	window time.Duration
}

// NewMemoryWindow returns an empty MemoryWindow on c (nil: the real clock).
func NewMemoryWindow(c clock.Clock) *MemoryWindow {
	w := &MemoryWindow{clk: clock.Or(c), seed: maphash.MakeSeed()}
	for i := range w.shards {
		w.shards[i].m = map[string]*windowLog{}
	}
	return w
}

// Take implements Window.
func (w *MemoryWindow) Take(_ context.Context, key string, limit int64, window time.Duration) (WindowResult, error) {
	now := w.clk.Now()
	s := &w.shards[maphash.String(w.seed, key)%windowShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.m[key]
	if l == nil {
		l = &windowLog{}
		s.m[key] = l
	}
	l.window = window
	l.expire(now)
	if int64(len(l.at)) >= limit {
		return WindowResult{Count: int64(len(l.at)), RetryIn: l.at[0].Add(window).Sub(now)}, nil
	}
	l.at = append(l.at, now)
	return WindowResult{Allowed: true, Count: int64(len(l.at))}, nil
}

// expire drops the times that left the window ending at now; a time
// exactly one window old has left it, as in the Redis script.
func (l *windowLog) expire(now time.Time) {
	cut := now.Add(-l.window)
	i := 0
	for i < len(l.at) && !l.at[i].After(cut) {
		i++
	}
	if i > 0 {
		l.at = append(l.at[:0], l.at[i:]...)
	}
}

// Sweep forgets the keys whose windows are empty, bounding memory to the
// keys active within one window.
func (w *MemoryWindow) Sweep() {
	now := w.clk.Now()
	for i := range w.shards {
		s := &w.shards[i]
		s.mu.Lock()
		for k, l := range s.m {
			l.expire(now)
			if len(l.at) == 0 {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
}
