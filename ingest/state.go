package ingest

import (
	"context"

	"danmaku/internal/bucket"
	"danmaku/internal/clock"
)

// RoomLimiter is the per-room token bucket shared by every ingest node. The
// Redis implementation runs the refill-and-take in one Lua call; the memory
// one serves embedded mode, where there is one ingest node.
type RoomLimiter interface {
	// Take takes n tokens from room's bucket of the given capacity and
	// refill rate, and reports whether they were there.
	Take(ctx context.Context, room string, capacity, perSec float64, n int) (bool, error)
}

var _ RoomLimiter = (*MemoryRoomLimiter)(nil)

// MemoryRoomLimiter is the in-process RoomLimiter.
type MemoryRoomLimiter struct {
	clock   clock.Clock
	buckets *bucket.Keyed
}

// NewMemoryRoomLimiter returns a limiter reading time from c (nil: real).
func NewMemoryRoomLimiter(c clock.Clock) *MemoryRoomLimiter {
	return &MemoryRoomLimiter{clock: clock.Or(c), buckets: bucket.NewKeyed(0, 0)}
}

// Take implements RoomLimiter.
func (l *MemoryRoomLimiter) Take(ctx context.Context, room string, capacity, perSec float64, n int) (bool, error) {
	return l.buckets.TakeWith(room, l.clock.Now(), capacity, perSec, float64(n)), nil
}
