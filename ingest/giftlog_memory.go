package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/internal/wire"
)

var _ GiftLog = (*MemoryGiftLog)(nil)

// MemoryGiftLogConfig configures a MemoryGiftLog.
type MemoryGiftLogConfig struct {
	// Streams is the in-memory store gifts are appended to, the one the
	// slicer and edge read. Required.
	Streams *stream.MemoryStore
	// OrderTTL is how long an order id stays deduplicated. Zero: 24 h.
	OrderTTL time.Duration
	// Clock times OrderTTL. Nil: the real clock.
	Clock clock.Clock
}

// MemoryGiftLog is the GiftLog of embedded mode, where one process holds
// the streams: the append and the order record happen under one mutex, so
// no other call sees one without the other.
type MemoryGiftLog struct {
	streams *stream.MemoryStore
	ttl     time.Duration
	clock   clock.Clock

	mu     sync.Mutex
	orders map[giftOrder]giftRecord
	// expiry lists orders in the order they were recorded. The TTL is one
	// for all, so that is the order they expire in, and forgetting them
	// costs O(1) per gift instead of a scan of the map.
	expiry []giftExpiry
}

type giftOrder struct{ room, order string }

type giftRecord struct {
	id      string
	expires time.Time
}

type giftExpiry struct {
	order   giftOrder
	expires time.Time
}

// NewMemoryGiftLog checks cfg, applies its defaults and returns an empty
// gift log.
func NewMemoryGiftLog(cfg MemoryGiftLogConfig) (*MemoryGiftLog, error) {
	if cfg.Streams == nil {
		return nil, errors.New("ingest: memory gift log: Streams is required")
	}
	if cfg.OrderTTL < 0 {
		return nil, fmt.Errorf("ingest: memory gift log: OrderTTL %v is negative", cfg.OrderTTL)
	}
	if cfg.OrderTTL == 0 {
		cfg.OrderTTL = defaultOrderTTL
	}
	return &MemoryGiftLog{
		streams: cfg.Streams,
		ttl:     cfg.OrderTTL,
		clock:   clock.Or(cfg.Clock),
		orders:  map[giftOrder]giftRecord{},
	}, nil
}

// AppendGift implements GiftLog.
func (l *MemoryGiftLog) AppendGift(ctx context.Context, room, orderID string, m wire.Message) (string, bool, error) {
	if err := checkGift(room, orderID); err != nil {
		return "", false, err
	}
	key := giftOrder{room, orderID}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	l.forgetLocked(now)
	if r, ok := l.orders[key]; ok && now.Before(r.expires) {
		return r.id, true, nil
	}
	m.Order = orderID
	out, err := l.streams.Append(ctx, stream.Key{Room: room, Lane: stream.Live}, []wire.Message{m})
	if err != nil {
		return "", false, fmt.Errorf("ingest: append gift %s/%s: %w", room, orderID, err)
	}
	id := out[0].ID
	expires := now.Add(l.ttl)
	l.orders[key] = giftRecord{id: id, expires: expires}
	l.expiry = append(l.expiry, giftExpiry{key, expires})
	return id, false, nil
}

// forgetLocked drops the records that expired by now.
func (l *MemoryGiftLog) forgetLocked(now time.Time) {
	n := 0
	for ; n < len(l.expiry) && !now.Before(l.expiry[n].expires); n++ {
		e := l.expiry[n]
		// The order may have been appended again since; that record has
		// its own, later entry in expiry.
		if r, ok := l.orders[e.order]; ok && !now.Before(r.expires) {
			delete(l.orders, e.order)
		}
	}
	if n > 0 {
		clear(l.expiry[:n]) // let the strings go
		l.expiry = l.expiry[n:]
	}
}
