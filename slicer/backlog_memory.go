package slicer

import (
	"context"
	"sync"
	"time"

	"danmaku/internal/clock"
)

var _ Backlog = (*MemoryBacklog)(nil)

// MemoryBacklog is the in-process Backlog of embedded mode: the slicer and
// the ingest of one process share it (the ingest through Admit).
type MemoryBacklog struct {
	clock clock.Clock
	mu    sync.Mutex
	m     map[string]memBacklog
}

type memBacklog struct {
	seconds, perGift float64
	expires          time.Time
}

// NewMemoryBacklog returns an empty Backlog reading time from c (nil: real).
func NewMemoryBacklog(c clock.Clock) *MemoryBacklog {
	return &MemoryBacklog{clock: clock.Or(c), m: map[string]memBacklog{}}
}

// Set implements Backlog. A value of 0 is forgotten at once: it reads as
// absent does.
func (b *MemoryBacklog) Set(ctx context.Context, room string, seconds, perGift float64, ttl time.Duration) error {
	if err := checkBacklog(seconds, perGift); err != nil {
		return err
	}
	now := b.clock.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if seconds == 0 || ttl <= 0 {
		delete(b.m, room)
		return nil
	}
	b.m[room] = memBacklog{seconds: seconds, perGift: perGift, expires: now.Add(ttl)}
	return nil
}

// Get implements Backlog.
func (b *MemoryBacklog) Get(ctx context.Context, room string) (float64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, _ := b.liveLocked(room)
	return v.seconds, nil
}

// Admit decides on one new gift of room, as the Redis gift script does:
// refused (ok false) while the backlog is over bound; accepted otherwise,
// adding the published seconds per gift to the backlog until the next
// Set. backlog is the value the decision was made on. It never fails; the
// error is there for the ingest's interface.
func (b *MemoryBacklog) Admit(ctx context.Context, room string, bound float64) (backlog float64, ok bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, live := b.liveLocked(room)
	if !live {
		return 0, true, nil
	}
	if v.seconds > bound {
		return v.seconds, false, nil
	}
	b.m[room] = memBacklog{seconds: v.seconds + v.perGift, perGift: v.perGift, expires: v.expires}
	return v.seconds, true, nil
}

// liveLocked returns room's value unless it is absent or lapsed (then
// forgotten).
func (b *MemoryBacklog) liveLocked(room string) (memBacklog, bool) {
	v, ok := b.m[room]
	if !ok {
		return memBacklog{}, false
	}
	if !b.clock.Now().Before(v.expires) {
		delete(b.m, room)
		return memBacklog{}, false
	}
	return v, true
}
