package ingest

import (
	"context"
	"sync"
	"time"

	"danmaku/internal/bucket"
	"danmaku/internal/clock"
	"danmaku/internal/stream"
)

var _ RoomGate = (*MemoryRoomGate)(nil)

// MemoryRoomGate is the in-process RoomGate of embedded mode, over the
// stream store the slicer reads (one ingest node, so its buckets are the
// whole truth).
type MemoryRoomGate struct {
	streams stream.Store
	clock   clock.Clock
	buckets *bucket.Keyed

	mu      sync.Mutex
	batches map[string]batchRecord // room + "\x00" + batch id → its result
	swept   time.Time
}

type batchRecord struct {
	granted int
	at      time.Time
}

// NewMemoryRoomGate returns a gate appending to streams, timed by c (nil:
// real clock).
func NewMemoryRoomGate(streams stream.Store, c clock.Clock) *MemoryRoomGate {
	return &MemoryRoomGate{streams: streams, clock: clock.Or(c), buckets: bucket.NewKeyed(0, 0), batches: map[string]batchRecord{}}
}

// Flush implements RoomGate. The gate's lock makes the bucket, the append
// and the batch record one step.
func (g *MemoryRoomGate) Flush(ctx context.Context, room string, b Batch) (FlushResult, error) {
	if err := checkBatch(room, b); err != nil {
		return FlushResult{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock.Now()
	key := room + "\x00" + b.ID
	if r, ok := g.batches[key]; ok && now.Sub(r.at) < defaultBatchTTL {
		return FlushResult{Granted: r.granted, Replayed: true}, nil
	}
	granted := g.buckets.TakeUpTo(room, now, b.Capacity, b.PerSec, b.Admitted, len(b.Msgs)-b.Admitted)
	if n := b.Admitted + granted; n > 0 {
		if _, err := g.streams.Append(ctx, stream.Key{Room: room, Lane: stream.Barrage}, b.Msgs[:n]); err != nil {
			return FlushResult{}, err
		}
	}
	g.batches[key] = batchRecord{granted, now}
	if now.Sub(g.swept) >= time.Minute {
		g.swept = now
		for k, r := range g.batches {
			if now.Sub(r.at) >= defaultBatchTTL {
				delete(g.batches, k)
			}
		}
		g.buckets.Sweep(now)
	}
	return FlushResult{Granted: granted}, nil
}
