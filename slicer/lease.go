package slicer

import (
	"context"
	"sync"
	"time"

	"danmaku/internal/clock"
)

// Lease elects one leader per room. The Redis implementation is a key set
// with NX and a TTL, renewed by its holder; the memory one serves embedded
// mode and tests.
type Lease interface {
	// Acquire takes room's lease for holder if it is free or already
	// holder's, for ttl, and reports whether holder now holds it.
	Acquire(ctx context.Context, room, holder string, ttl time.Duration) (bool, error)
	// Release gives the lease up if holder holds it.
	Release(ctx context.Context, room, holder string) error
}

var _ Lease = (*MemoryLease)(nil)

// MemoryLease is the in-process Lease.
type MemoryLease struct {
	clock clock.Clock
	mu    sync.Mutex
	m     map[string]memLease
}

type memLease struct {
	holder  string
	expires time.Time
}

// NewMemoryLease returns a lease table reading time from c (nil: real).
func NewMemoryLease(c clock.Clock) *MemoryLease {
	return &MemoryLease{clock: clock.Or(c), m: map[string]memLease{}}
}

// Acquire implements Lease.
func (l *MemoryLease) Acquire(ctx context.Context, room, holder string, ttl time.Duration) (bool, error) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	cur, ok := l.m[room]
	if ok && cur.holder != holder && now.Before(cur.expires) {
		return false, nil
	}
	l.m[room] = memLease{holder: holder, expires: now.Add(ttl)}
	return true, nil
}

// Release implements Lease.
func (l *MemoryLease) Release(ctx context.Context, room, holder string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[room].holder == holder {
		delete(l.m, room)
	}
	return nil
}
