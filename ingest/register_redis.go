package ingest

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/stream"
)

// registrar opens the rooms a process appends to in the registry once per
// every, so that a registry lost with a Redis restart is rebuilt by the
// next appends (as stream.RedisStore does after its own appends).
type registrar struct {
	streams *stream.RedisStore
	every   time.Duration
	clock   clock.Clock
	log     *slog.Logger

	done sync.Map // room → time.Time of this process's last registration
}

// register registers room if it is due. The append it follows is stored
// by then: a failure is logged and retried by the room's next append,
// never returned (the caller would resend a stored batch for nothing).
func (r *registrar) register(ctx context.Context, room string) {
	now := r.clock.Now()
	if v, ok := r.done.Load(room); ok && now.Sub(v.(time.Time)) < r.every {
		return
	}
	if err := r.streams.OpenRoom(ctx, room); err != nil {
		r.log.Warn("ingest: register room", "room", room, "err", err)
		return
	}
	r.done.Store(room, now)
}
