package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

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

// Orders makes gift calls idempotent by business order id.
type Orders interface {
	// Reserve claims order for ttl. If the order was already accepted it
	// returns its message id; if another call holds it, ErrOrderInFlight.
	Reserve(ctx context.Context, order string, ttl time.Duration) (existingID string, err error)
	// Commit records the message id of a reserved order.
	Commit(ctx context.Context, order, id string, ttl time.Duration) error
	// Release drops a reservation whose append failed, so a retry can succeed.
	Release(ctx context.Context, order string) error
}

// ErrOrderInFlight is returned by Reserve while another call processes the order.
var ErrOrderInFlight = errors.New("ingest: order in flight")

var _ Orders = (*MemoryOrders)(nil)

// MemoryOrders is the in-process Orders. Entries expire lazily.
type MemoryOrders struct {
	clock clock.Clock
	mu    sync.Mutex
	m     map[string]orderState
}

type orderState struct {
	id      string // "" while in flight
	expires time.Time
}

// NewMemoryOrders returns an empty order book.
func NewMemoryOrders(c clock.Clock) *MemoryOrders {
	return &MemoryOrders{clock: clock.Or(c), m: map[string]orderState{}}
}

// Reserve implements Orders.
func (o *MemoryOrders) Reserve(ctx context.Context, order string, ttl time.Duration) (string, error) {
	now := o.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if st, ok := o.m[order]; ok && now.Before(st.expires) {
		if st.id == "" {
			return "", ErrOrderInFlight
		}
		return st.id, nil
	}
	if len(o.m) > 4096 {
		for k, st := range o.m {
			if !now.Before(st.expires) {
				delete(o.m, k)
			}
		}
	}
	o.m[order] = orderState{expires: now.Add(ttl)}
	return "", nil
}

// Commit implements Orders.
func (o *MemoryOrders) Commit(ctx context.Context, order, id string, ttl time.Duration) error {
	o.mu.Lock()
	o.m[order] = orderState{id: id, expires: o.clock.Now().Add(ttl)}
	o.mu.Unlock()
	return nil
}

// Release implements Orders.
func (o *MemoryOrders) Release(ctx context.Context, order string) error {
	o.mu.Lock()
	if st, ok := o.m[order]; ok && st.id == "" {
		delete(o.m, order)
	}
	o.mu.Unlock()
	return nil
}
