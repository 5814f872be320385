package ingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"danmaku/sdk/wire"
)

// defaultOrderTTL is how long a gift log remembers an order id: a business
// server retries a failed call within minutes, and a day covers any
// reconciliation run that replays the day's orders.
const defaultOrderTTL = 24 * time.Hour

// GiftLog appends gifts to their room's Live lane exactly once per order id.
// Gifts are money: whatever fails — a timeout after Redis ran the append, a
// crashed ingest node, the business server retrying — one order id gives one
// stream entry. Implementations are safe for concurrent use.
type GiftLog interface {
	// AppendGift appends m to room's Live lane, with its Order set to
	// orderID, and records orderID → the entry id and the gift's terms, in
	// one atomic step. If orderID was appended to room within the order
	// TTL, it appends nothing: for the same terms (a retry) it returns the
	// first entry's id with duplicate set; for other terms (the order id
	// reused for another gift) it returns an *OrderConflictError
	// (ErrOrderConflict).
	//
	// An error may be ambiguous (the append may have happened), but a
	// retry with the same room and orderID is always safe: it stores the
	// gift at most once and answers the one id. Order ids are the business
	// server's, unique across rooms: an id first used in another room
	// within the order TTL is an *OrderConflictError naming that room
	// (Fields "room"), and nothing is appended.
	//
	// A new order is refused with a *GiftBacklogError (ErrGiftBacklog)
	// while the room's gift backlog is over its bound; a repeat of an
	// appended order never is.
	AppendGift(ctx context.Context, room, orderID string, m wire.Message) (id string, duplicate bool, err error)
}

// ErrOrderConflict is returned (as an *OrderConflictError) by AppendGift
// for an order id the room already holds for another gift: other terms
// (GiftTerms). Nothing is appended. It is the rule payment APIs keep for
// idempotency keys: a key reused with other parameters is an error, not a
// replay — answered as a duplicate, a business server that reused an id by
// mistake would be told that a gift it never stored was accepted (HTTP 409
// order_conflict).
var ErrOrderConflict = errors.New("ingest: the order id was used for another gift")

// GiftTerms are what makes a gift order the order it is: who gives what,
// how much of it. A retry of an order carries the same; its nickname and
// avatar may be newer (they are only shown), and are not compared.
type GiftTerms struct {
	User  string `json:"user"`
	Gift  string `json:"gift"`
	Value int64  `json:"value"`
	// Count is at least 1: a count of 0 is one gift.
	Count uint32 `json:"count"`
}

// termsOf returns m's terms.
func termsOf(m *wire.Message) GiftTerms {
	return GiftTerms{User: m.User, Gift: m.Gift, Value: m.Value, Count: max(m.Count, 1)}
}

// differ names the terms in which t and o differ, in field order.
func (t GiftTerms) differ(o GiftTerms) []string {
	var out []string
	if t.User != o.User {
		out = append(out, "user")
	}
	if t.Gift != o.Gift {
		out = append(out, "gift")
	}
	if t.Value != o.Value {
		out = append(out, "value")
	}
	if t.Count != o.Count {
		out = append(out, "count")
	}
	return out
}

// OrderConflictError is ErrOrderConflict with what differs.
type OrderConflictError struct {
	Room, Order string
	// FirstRoom is set, and Fields is ["room"], when the order id was first
	// used in another room; ID and First are then unknown (that room's
	// records sit in another Redis slot).
	FirstRoom string
	// ID is the entry of the order's first gift.
	ID string
	// Fields names the terms the gift differs from the first one in, in
	// the order user, gift, value, count.
	Fields []string
	// First is the first gift's terms.
	First GiftTerms
}

func (e *OrderConflictError) Error() string {
	if e.FirstRoom != "" {
		return fmt.Sprintf("%v: order %q was first used in room %s, not %s", ErrOrderConflict, e.Order, e.FirstRoom, e.Room)
	}
	return fmt.Sprintf("%v: order %q of room %s is %s's %d×%s of value %d (entry %s); this gift differs in %s",
		ErrOrderConflict, e.Order, e.Room, e.First.User, e.First.Count, e.First.Gift, e.First.Value, e.ID, strings.Join(e.Fields, ", "))
}

// Is makes errors.Is(err, ErrOrderConflict) true.
func (e *OrderConflictError) Is(target error) bool { return target == ErrOrderConflict }

// checkTerms answers a repeat of order orderID of room, first appended as
// entry id with terms first: nil for the same terms, else the conflict.
func checkTerms(room, orderID, id string, first GiftTerms, m *wire.Message) error {
	if fields := termsOf(m).differ(first); len(fields) > 0 {
		return &OrderConflictError{Room: room, Order: orderID, ID: id, Fields: fields, First: first}
	}
	return nil
}

// ErrBadGift is returned by AppendGift for a room id that wire.ValidRoom
// refuses or an empty order id; nothing is appended.
var ErrBadGift = errors.New("ingest: gift needs a valid room and an order id")

// roomConflict answers an order id of room whose first room was first:
// nil when they are the same (or first is unknown), else the conflict.
func roomConflict(room, orderID, first string) error {
	if first == "" || first == room {
		return nil
	}
	return &OrderConflictError{Room: room, Order: orderID, FirstRoom: first, Fields: []string{"room"}}
}

// checkGift validates AppendGift's arguments.
func checkGift(room, orderID string) error {
	if !wire.ValidRoom(room) || orderID == "" {
		return fmt.Errorf("%w (room %q, order %q)", ErrBadGift, room, orderID)
	}
	return nil
}

// defaultGiftBacklogBound is the gift backlog, in seconds of the room's
// gift budget, past which new gifts are refused: half a minute of gifts
// waiting is already late for a viewer, and the business server can hold a
// paid order that long and retry.
const defaultGiftBacklogBound = 30.0

// ErrGiftBacklog is returned (as a *GiftBacklogError) by AppendGift for a
// new order while the room's gift backlog — published by the room's
// slicer leader — is over its bound: nothing is appended, and the caller
// retries the same order id after RetryAfter (HTTP 429 gift_backlog). A
// repeat of an order already appended is never refused: it gets its
// original answer.
var ErrGiftBacklog = errors.New("ingest: the room's gift backlog is over its bound")

// GiftBacklogError is ErrGiftBacklog with what the refusal was based on.
type GiftBacklogError struct {
	Room string
	// Backlog and Bound are in seconds of the room's gift budget.
	Backlog, Bound float64
	// RetryAfter is when the backlog is expected back under the bound: the
	// excess, since a backlog drains by about a second a second; at least
	// a second.
	RetryAfter time.Duration
}

func (e *GiftBacklogError) Error() string {
	return fmt.Sprintf("%v: room %s has %.1f s of gifts waiting (bound %.1f s); retry after %v", ErrGiftBacklog, e.Room, e.Backlog, e.Bound, e.RetryAfter)
}

// Is makes errors.Is(err, ErrGiftBacklog) true.
func (e *GiftBacklogError) Is(target error) bool { return target == ErrGiftBacklog }

// backlogRefusal is the error for a new order of room with the given
// backlog and bound.
func backlogRefusal(room string, backlog, bound float64) error {
	excess := time.Duration(math.Ceil(backlog-bound)) * time.Second
	return &GiftBacklogError{Room: room, Backlog: backlog, Bound: bound, RetryAfter: max(excess, time.Second)}
}

// GiftBacklog decides on a new gift of a room against the room's gift
// backlog as its slicer leader publishes it: slicer.MemoryBacklog, shared
// with the slicer in embedded mode. Admit refuses (ok false) while the
// backlog is over bound, and otherwise counts the gift into the backlog
// until the leader publishes again, so that a burst within one slot cannot
// outrun the bound. backlog is the value the decision was made on; an
// unpublished or lapsed backlog is 0.
type GiftBacklog interface {
	Admit(ctx context.Context, room string, bound float64) (backlog float64, ok bool, err error)
}

// backlogBound is a gift log's per-room bound: the function its config
// gave, or a later SetBacklogBound's. Safe for concurrent use.
type backlogBound struct {
	f atomic.Pointer[func(room string) float64]
}

func (b *backlogBound) set(f func(room string) float64) {
	if f == nil {
		b.f.Store(nil)
		return
	}
	b.f.Store(&f)
}

// of returns room's bound: the function's answer, or, without a function
// or for an answer that is not positive, defaultGiftBacklogBound.
func (b *backlogBound) of(room string) float64 {
	if p := b.f.Load(); p != nil {
		if v := (*p)(room); v > 0 {
			return v
		}
	}
	return defaultGiftBacklogBound
}
