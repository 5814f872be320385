package ingest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"danmaku/internal/clock"
)

var _ GlobalLimiter = (*MemoryGlobalLimiter)(nil)

// MemoryGlobalLimiter is the in-process GlobalLimiter: embedded mode, where
// one ingest node is the whole event, and tests.
type MemoryGlobalLimiter struct {
	clock clock.Clock

	mu      sync.Mutex
	buckets map[string]*globalBucket
}

type globalBucket struct {
	tokens float64
	last   time.Time
}

// NewMemoryGlobalLimiter returns a limiter reading time from c (nil: real).
func NewMemoryGlobalLimiter(c clock.Clock) *MemoryGlobalLimiter {
	return &MemoryGlobalLimiter{clock: clock.Or(c), buckets: map[string]*globalBucket{}}
}

// Take implements GlobalLimiter. A bucket never used is full.
func (l *MemoryGlobalLimiter) Take(_ context.Context, event string, burst, perSec float64, n int) (int, error) {
	if !validGlobalTake(burst, perSec, n) {
		return 0, fmt.Errorf("ingest: global bucket %s: burst %v, rate %v, n %d: must be finite and >= 0", event, burst, perSec, n)
	}
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[event]
	if b == nil {
		b = &globalBucket{tokens: burst, last: now}
		l.buckets[event] = b
	} else if d := now.Sub(b.last); d > 0 {
		// As bucket.Bucket: time only moves forward.
		b.tokens += d.Seconds() * perSec
		b.last = now
	}
	b.tokens = min(b.tokens, burst)
	got := min(n, int(b.tokens))
	b.tokens -= float64(got)
	return got, nil
}
