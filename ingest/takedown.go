package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"danmaku/internal/audit"
	"danmaku/internal/httpx"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// A takedown removes a published message from viewers' screens: the segments
// that hold it stay immutable, and the takedown travels the room's live lane
// (a live-lane entry carrying wire.Message.TakenDown) to the edge, which
// pushes it to connected viewers in a frame's td, and to the slicer, which
// names it in the next segment's td, leaves the message out of any segment
// not yet written, and publishes the room's list (wire.TakedownListKey).
// The store below is the moderators' record of who took what down, when and
// why; the live lane and the list are what viewers act on.

// Takedown is one moderator's takedown of one message of a room.
type Takedown struct {
	// ID and Kind name the message (its lane's id).
	ID   string    `json:"id"`
	Kind wire.Kind `json:"k"`
	// By is who took it down: the host's or admin's user id, or
	// "operator" for an operator key.
	By string `json:"by"`
	// Reason is the moderator's note, normalised (may be empty).
	Reason string `json:"reason"`
	// AtMs is when it was taken down, unix ms.
	AtMs int64 `json:"at_ms"`
}

// Of returns the wire name of the message taken down.
func (t *Takedown) Of() wire.TakenDown { return wire.TakenDown{ID: t.ID, Kind: t.Kind} }

// Bounds of takedowns.
const (
	// MaxTakedownsPerRoom bounds a room's takedowns (the store and the
	// published list): far beyond what moderators do in an event, small
	// enough that the list object stays a few hundred KB.
	MaxTakedownsPerRoom = 10_000
	// maxTakedownReasonRunes bounds a takedown's reason.
	maxTakedownReasonRunes = 200
	// maxTakedownByBytes bounds who took it down (a user id).
	maxTakedownByBytes = 256
	// takedownRetention is how long a room's takedowns are kept after its
	// event ends (or after the last takedown, for a room no event
	// names), as lotteries are: for audit and replays.
	takedownRetention = defaultLotteryRetention
	// maxTakedownBody bounds a takedown request.
	maxTakedownBody = 4 << 10
)

// Errors of takedowns.
var (
	// ErrBadTakedown is returned (wrapped) for a takedown that is not
	// valid: nothing is stored or published.
	ErrBadTakedown = errors.New("ingest: bad takedown")
	// ErrTakedownsFull is returned (wrapped) by TakedownStore.Add for a
	// room that holds MaxTakedownsPerRoom takedowns already.
	ErrTakedownsFull = errors.New("ingest: room's takedown list is full")
)

// TakedownStore keeps each room's takedowns, shared by every ingest node,
// bounded per room and expiring with the room's event. Implementations are
// safe for concurrent use.
type TakedownStore interface {
	// Add records t in room unless the room holds (t.ID, t.Kind) already:
	// then it returns the first record and created false. A room holding
	// max takedowns refuses a new one with ErrTakedownsFull. The room's
	// records expire at expire (or later, when an earlier Add asked).
	Add(ctx context.Context, room string, t Takedown, max int, expire time.Time) (first Takedown, created bool, err error)
	// Lookup returns room's takedown of (id, kind) (ok false: none) and
	// how many takedowns the room holds.
	Lookup(ctx context.Context, room, id string, kind wire.Kind) (t Takedown, ok bool, n int, err error)
	// List returns room's takedowns, oldest first.
	List(ctx context.Context, room string) ([]Takedown, error)
}

// validTakedown checks t (the reason already normalised) in room.
func validTakedown(room string, t *Takedown) error {
	switch {
	case !wire.ValidRoom(room):
		return fmt.Errorf("%w: room %q: 1-64 of A-Z a-z 0-9 _ -", ErrBadTakedown, room)
	case !wire.ValidTakenDown(t.Of()):
		return fmt.Errorf("%w: id %q must be a message id (\"<ms>-<seq>\") and k its kind (1 barrage, 2 gift, 3 system)", ErrBadTakedown, t.ID)
	case t.By == "" || len(t.By) > maxTakedownByBytes:
		return fmt.Errorf("%w: by must be 1-%d bytes", ErrBadTakedown, maxTakedownByBytes)
	case utf8.RuneCountInString(t.Reason) > maxTakedownReasonRunes:
		return fmt.Errorf("%w: reason exceeds %d characters", ErrBadTakedown, maxTakedownReasonRunes)
	}
	return nil
}

// takedownKey is a takedown's field in a room's record: the message's
// identity (lane and id).
func takedownKey(id string, kind wire.Kind) string { return wire.IdentityOf(kind, id) }

// TakeDown takes down room's message t on behalf of by, for reason: it
// publishes the takedown on the room's live lane (where the edge and the
// slicer pick it up), records it in the takedown store and the audit trail,
// and returns the record. Taking down a message already taken down changes
// nothing and returns the first record. The room must be live (an ended
// room's slicer no longer writes its list).
//
// Errors: ErrBadTakedown (wrapped) for a bad id, kind, by or reason;
// ErrTakedownsFull; an *event.RoomError from the events directory for a
// room that is not live; any other is a backend failure, after which the
// call is safe to repeat. This signature is stable: other packages call it
// (the reports review queue acts through it).
func (s *Server) TakeDown(ctx context.Context, room string, t wire.TakenDown, by, reason string) (Takedown, error) {
	td, _, err := s.takeDown(ctx, room, t, by, reason)
	return td, err
}

func (s *Server) takeDown(ctx context.Context, room string, t wire.TakenDown, by, reason string) (Takedown, bool, error) {
	td := Takedown{ID: t.ID, Kind: t.Kind, By: by, Reason: normalize(reason), AtMs: s.cfg.Clock.Now().UnixMilli()}
	if err := validTakedown(room, &td); err != nil {
		return Takedown{}, false, err
	}
	expire := s.cfg.Clock.Now().Add(takedownRetention)
	if s.cfg.Events != nil {
		if err := s.cfg.Events.Check(room); err != nil {
			return Takedown{}, false, err
		}
		if v, ok := s.cfg.Events.Lookup(room); ok {
			expire = v.Event.EndTime().Add(takedownRetention)
		}
	}
	store := s.cfg.Takedowns
	first, ok, n, err := store.Lookup(ctx, room, t.ID, t.Kind)
	switch {
	case err != nil:
		return Takedown{}, false, fmt.Errorf("ingest: look up takedown: %w", err)
	case ok:
		return first, false, nil
	case n >= MaxTakedownsPerRoom:
		return Takedown{}, false, fmt.Errorf("%w: %s", ErrTakedownsFull, room)
	}
	// The live lane first: it is what viewers act on, and it is safe to
	// append twice (every reader of a td is idempotent), so a failure of
	// the store afterwards is answered with a retry, never a takedown
	// recorded and not published.
	entry := wire.Message{Kind: wire.KindSystem, TakenDown: []wire.TakenDown{t}}
	if _, err := s.cfg.Streams.Append(ctx, stream.Key{Room: room, Lane: stream.Live}, []wire.Message{entry}); err != nil {
		return Takedown{}, false, fmt.Errorf("ingest: publish takedown: %w", err)
	}
	first, created, err := store.Add(ctx, room, td, MaxTakedownsPerRoom, expire)
	if err != nil {
		return Takedown{}, false, fmt.Errorf("ingest: record takedown: %w", err)
	}
	if created {
		s.audit.Record(audit.Record{At: time.UnixMilli(td.AtMs), Room: room, User: by, Text: td.Reason,
			Decision: audit.TakenDown, Reason: t.Kind.String(), ID: t.ID})
		s.takedowns.Inc()
	}
	return first, created, nil
}

// takedownError is the answer to an error of TakeDown.
func takedownError(err error) (*httpx.Error, bool) {
	switch {
	case errors.Is(err, ErrBadTakedown):
		return httpx.Errorf(http.StatusBadRequest, "bad_takedown", "%v", err), true
	case errors.Is(err, ErrTakedownsFull):
		return httpx.Errorf(http.StatusInsufficientStorage, "takedowns_full", "the room holds %d takedowns, the most it keeps", MaxTakedownsPerRoom), true
	}
	return nil, false
}
