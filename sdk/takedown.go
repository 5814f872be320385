package sdk

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"danmaku/sdk/wire"
)

// KindTakedown is the kind of a takedown notice: a Message the SDK puts on
// the Messages channel (and Replay passes to its callback) when a moderator
// took down a message this client already delivered. It is SDK-local, never
// on the wire. The notice's ID is the target's id and its Value the target's
// kind; TakedownOf reads both. The UI removes the target if it still shows
// it; RenderQueue.Push does the queue's part (see RenderQueue.Remove).
//
// The notice travels on the Messages channel, in order with the messages,
// rather than on a channel or callback of its own: a notice is only sent
// after its target was delivered, and a separate channel would let an app
// that reads both see the notice first and show the target after it, for
// good. A message taken down before it was delivered is never delivered
// (nor any later copy of it, from a segment, the edge or a replay), and no
// notice is sent for it.
const KindTakedown Kind = 0x80

// TakenDown names a message a moderator took down: its id and kind.
type TakenDown = wire.TakenDown

// TakedownOf reports whether m is a takedown notice (KindTakedown) and, if
// so, names the message to remove.
func TakedownOf(m Message) (TakenDown, bool) {
	if m.Kind != KindTakedown {
		return TakenDown{}, false
	}
	return TakenDown{ID: m.ID, Kind: Kind(m.Value)}, true
}

// takedownNotice is the notice for t.
func takedownNotice(t TakenDown) Message {
	return Message{ID: t.ID, Kind: KindTakedown, Value: int64(t.Kind)}
}

// Takedown defaults.
const (
	// A show with 10,000 takedowns is far beyond any moderation team; the
	// oldest are forgotten first, as delivered ids are.
	defaultTakedownIDs = 10_000
	// takedownForever is the age bound of the taken-down set: none. A
	// takedown must outlive every copy of its message, and copies come late
	// (a replay, a client far behind).
	takedownForever = time.Duration(math.MaxInt64)
	// takedownListRefetch is when the client asks for the list a second
	// time after its first join: past the list's max-age of 1 s plus the
	// time the leader takes to rewrite it, so a takedown made just before
	// the join that a cached copy did not hold yet is known too (its
	// segment is before the client's first one).
	takedownListRefetch = 3 * time.Second
	// takedownListEvery bounds how often the list is asked for again when a
	// manifest or segment says there is more than the client holds.
	takedownListEvery = time.Second
	// takedownListBackoffMax bounds the back-off between failed reads of
	// the list (doubling from takedownListEvery): a CDN that refuses it
	// (403 from an origin that hides missing keys) must not cost a request
	// a second per viewer.
	takedownListBackoffMax = 30 * time.Second
)

// decodeTakedownList decodes room's takedowns.json (wire.DecodeTakedownList)
// and checks it is room's.
func decodeTakedownList(b []byte, room string) (*wire.TakedownList, error) {
	l, err := wire.DecodeTakedownList(b)
	if err != nil {
		return nil, fmt.Errorf("sdk: takedown list: %w", err)
	}
	if l.Room != room {
		return nil, fmt.Errorf("sdk: takedown list: %w", errMismatch)
	}
	return l, nil
}

// fetchTakedownList gets room's list from the CDN at base (ending in "/"). A
// room with no takedowns has no list: 404 is the empty list.
func fetchTakedownList(ctx context.Context, hc *http.Client, base, room string) (*wire.TakedownList, error) {
	status, body, err := get(ctx, hc, base+wire.TakedownListKey(room), wire.MaxTakedownListBytes)
	switch {
	case err != nil:
		return nil, err
	case status == http.StatusNotFound:
		return &wire.TakedownList{V: 1, Room: room}, nil
	case status != http.StatusOK:
		return nil, fmt.Errorf("sdk: takedown list: status %d", status)
	}
	return decodeTakedownList(body, room)
}

// takedownLoop keeps the client's taken-down set complete for what came
// before it joined: it reads the room's list once the client has joined,
// again takedownListRefetch later, and whenever a manifest says the room
// has more takedowns than the last list held (wantList). What happens
// after the join arrives in edge frames and segments (their td).
func (c *Client) takedownLoop(ctx context.Context, first chan<- struct{}) {
	fetch := func() bool {
		s := c.sess.Load()
		c.stats.takedownLists.Add(1)
		l, err := fetchTakedownList(ctx, c.cfg.HTTPClient, s.entry.CDN, c.cfg.Room)
		if err != nil {
			if ctx.Err() == nil {
				c.stats.takedownListErrors.Add(1)
				c.log.Warn("sdk: takedown list unavailable", "room", c.cfg.Room, "err", err)
			}
			return false
		}
		if l.N > c.tdListN.Load() {
			c.tdListN.Store(l.N)
		}
		_, err = c.merge.takedown(ctx, l.IDs, c.serverNow().UnixMilli())
		return err == nil
	}
	// pending: a fetch is scheduled at next (the second list, or a retry
	// after a failure, backoff after the last).
	var backoff time.Duration
	retry := func() time.Time {
		backoff = min(max(2*backoff, takedownListEvery), takedownListBackoffMax)
		return c.clk.Now().Add(backoff)
	}
	pending, next := true, c.clk.Now().Add(takedownListRefetch)
	if !fetch() {
		next = retry()
	}
	close(first)
	for ctx.Err() == nil {
		if pending {
			// A manifest's ask does not wait for the schedule.
			if c.waitLocalOr(ctx, next, c.wantList) != nil {
				return
			}
			if fetch() {
				pending, backoff = false, 0
			} else {
				next = retry()
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wantList:
		}
		if !fetch() {
			pending, next = true, retry()
			continue
		}
		// At most one list a takedownListEvery.
		_ = c.sleep(ctx, takedownListEvery)
	}
}

// waitLocalOr is waitLocal that also returns when ch delivers.
func (c *Client) waitLocalOr(ctx context.Context, t time.Time, ch <-chan struct{}) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		d := t.Sub(c.clk.Now())
		if d <= 0 {
			return nil
		}
		if c.tick > 0 {
			d = min(d, c.tick)
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
			return nil
		case <-timer.C:
		}
	}
}

// noteManifestTakedowns asks for the list when the manifest says the room
// has more takedowns than the last list held.
func (c *Client) noteManifestTakedowns(n uint64) {
	if n <= c.tdListN.Load() {
		return
	}
	select {
	case c.wantList <- struct{}{}:
	default:
	}
}
