package ingest

import (
	"context"
	"sync"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

var _ FastLane = (*MemoryFastLane)(nil)

// MemoryFastLane is the in-process FastLane of embedded mode, over the
// stream store the slicer reads (one ingest node, so its counters are the
// whole truth). Its clock must be the stream store's, so that the second
// it counts in is the second the entry is stamped in.
type MemoryFastLane struct {
	streams stream.Store
	clock   clock.Clock

	mu    sync.Mutex
	rooms map[string]fastSecond
	swept int64 // unix second of the last sweep
}

// fastSecond is one room's count in one second.
type fastSecond struct {
	sec int64
	n   int
}

// NewMemoryFastLane returns a fast lane appending to streams, timed by c
// (nil: real clock).
func NewMemoryFastLane(streams stream.Store, c clock.Clock) *MemoryFastLane {
	return &MemoryFastLane{streams: streams, clock: clock.Or(c), rooms: map[string]fastSecond{}}
}

// Show implements FastLane. The lock makes the count and the append one
// step, so no second shows more than capPerSec of a room.
func (f *MemoryFastLane) Show(ctx context.Context, room string, lane stream.Lane, m wire.Message, capPerSec int) (Shown, error) {
	if err := checkShow(room, lane, capPerSec); err != nil {
		return Shown{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	sec := now.Unix()
	c := f.rooms[room]
	if c.sec != sec {
		// Another second (a clock stepping back included): a fresh count.
		c = fastSecond{sec: sec}
	}
	if c.n >= capPerSec {
		return Shown{RetryAfter: untilNextSecond(now)}, nil
	}
	out, err := f.streams.Append(ctx, stream.Key{Room: room, Lane: lane}, []wire.Message{m})
	if err != nil {
		return Shown{}, err
	}
	c.n++
	f.rooms[room] = c
	if sec-f.swept >= int64(time.Minute/time.Second) {
		// Counters of past seconds are dead weight: forget them, so rooms
		// that fell silent cost nothing.
		f.swept = sec
		for r, s := range f.rooms {
			if s.sec < sec {
				delete(f.rooms, r)
			}
		}
	}
	return Shown{ID: out[0].ID}, nil
}
