package ingest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
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
	// Backlog is where the slicer of this process publishes each room's
	// gift backlog (the slicer.MemoryBacklog given to slicer.Config.Backlog
	// too). Nil: no backlog is known and no gift is refused.
	Backlog GiftBacklog
	// BacklogBound is room's backlog bound in seconds of its gift budget
	// (the event's gift_backlog_s): a new order is refused while the
	// backlog is over it. Nil, or an answer that is not positive: 30 s.
	BacklogBound func(room string) float64
}

// MemoryGiftLog is the GiftLog of embedded mode, where one process holds
// the streams: the append and the order record happen under one mutex, so
// no other call sees one without the other.
type MemoryGiftLog struct {
	streams *stream.MemoryStore
	ttl     time.Duration
	clock   clock.Clock
	backlog GiftBacklog
	bound   backlogBound

	mu     sync.Mutex
	orders map[giftOrder]giftRecord
	// rooms holds the room each order id was first used in, so that the
	// id in another room is a conflict (GiftLog.AppendGift).
	rooms map[string]giftRoom
	// expiry lists orders in the order they were recorded. The TTL is one
	// for all, so that is the order they expire in, and forgetting them
	// costs O(1) per gift instead of a scan of the map.
	expiry []giftExpiry
}

type giftOrder struct{ room, order string }

type giftRecord struct {
	id      string
	terms   GiftTerms
	expires time.Time
}

type giftRoom struct {
	room    string
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
	l := &MemoryGiftLog{
		streams: cfg.Streams,
		ttl:     cfg.OrderTTL,
		clock:   clock.Or(cfg.Clock),
		backlog: cfg.Backlog,
		orders:  map[giftOrder]giftRecord{},
		rooms:   map[string]giftRoom{},
	}
	l.bound.set(cfg.BacklogBound)
	return l, nil
}

// SetBacklogBound replaces MemoryGiftLogConfig.BacklogBound, for a gift log
// built before what knows the rooms' settings (the event directory). Safe
// to call while gifts are appended.
func (l *MemoryGiftLog) SetBacklogBound(f func(room string) float64) { l.bound.set(f) }

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
	if r, ok := l.rooms[orderID]; ok && now.Before(r.expires) {
		if err := roomConflict(room, orderID, r.room); err != nil {
			return "", false, err
		}
	}
	if r, ok := l.orders[key]; ok && now.Before(r.expires) {
		if err := checkTerms(room, orderID, r.id, r.terms, &m); err != nil {
			return "", false, err
		}
		return r.id, true, nil
	}
	if l.backlog != nil {
		// Admitted, the gift counts into the backlog even if the append
		// below fails: an overcount that lasts until the leader's next
		// publication, never a gift let past the bound.
		bound := l.bound.of(room)
		backlog, ok, err := l.backlog.Admit(ctx, room, bound)
		if err != nil {
			return "", false, fmt.Errorf("ingest: append gift %s/%s: gift backlog: %w", room, orderID, err)
		}
		if !ok {
			return "", false, backlogRefusal(room, backlog, bound)
		}
	}
	m.Order = orderID
	out, err := l.streams.Append(ctx, stream.Key{Room: room, Lane: stream.Live}, []wire.Message{m})
	if err != nil {
		return "", false, fmt.Errorf("ingest: append gift %s/%s: %w", room, orderID, err)
	}
	id := out[0].ID
	expires := now.Add(l.ttl)
	l.orders[key] = giftRecord{id: id, terms: termsOf(&m), expires: expires}
	l.rooms[orderID] = giftRoom{room: room, expires: expires}
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
		if r, ok := l.rooms[e.order.order]; ok && !now.Before(r.expires) {
			delete(l.rooms, e.order.order)
		}
	}
	if n > 0 {
		clear(l.expiry[:n]) // let the strings go
		l.expiry = l.expiry[n:]
	}
}
