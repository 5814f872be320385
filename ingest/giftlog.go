package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"danmaku/internal/wire"
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
	// orderID, and records orderID → the entry id, in one atomic step. If
	// orderID was appended to room within the order TTL, it appends
	// nothing and returns the first entry's id with duplicate set.
	//
	// An error may be ambiguous (the append may have happened), but a
	// retry with the same room and orderID is always safe: it stores the
	// gift at most once and answers the one id. Order ids are per room:
	// the same id in another room is another order.
	AppendGift(ctx context.Context, room, orderID string, m wire.Message) (id string, duplicate bool, err error)
}

// ErrBadGift is returned by AppendGift for a room id that wire.ValidRoom
// refuses or an empty order id; nothing is appended.
var ErrBadGift = errors.New("ingest: gift needs a valid room and an order id")

// checkGift validates AppendGift's arguments.
func checkGift(room, orderID string) error {
	if !wire.ValidRoom(room) || orderID == "" {
		return fmt.Errorf("%w (room %q, order %q)", ErrBadGift, room, orderID)
	}
	return nil
}
