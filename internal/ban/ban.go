// Package ban keeps the operators' bans and every node's view of them.
//
// A Store holds the bans (in memory for the embedded mode, in Redis for a
// fleet); every write moves a version. A List is one process's snapshot of
// a Store, reloaded when the version moves (polled every second), so that
// asking whether a user is banned is a map read. The ingest refuses a
// banned user's comments by it, the edge closes and refuses their
// connections, the gslb refuses their entry. Store implementations and List
// are safe for concurrent use.
package ban

import (
	"context"
	"errors"
	"fmt"
	"time"

	"danmaku/internal/ident"
	"danmaku/sdk/wire"
)

// Ban keeps one user out of one room, out of every room of one event, or
// out of every room.
type Ban struct {
	// User is the banned user id, as in their tickets. Required.
	User string `json:"user"`
	// Room limits the ban to one room. "": see Event.
	Room string `json:"room,omitempty"`
	// Event limits the ban to the rooms of one event (a room's current
	// event, as event.Directory.Lookup tells it). Not with Room. Room and
	// Event "": every room.
	Event string `json:"event,omitempty"`
	// Until is when the ban lapses. Zero: never.
	Until time.Time `json:"until,omitzero"`
	// Reason is for operators.
	Reason string `json:"reason,omitempty"`
	// At is when the ban was set.
	At time.Time `json:"at"`
}

// Active reports whether b is in force at now.
func (b *Ban) Active(now time.Time) bool { return b.Until.IsZero() || now.Before(b.Until) }

// Scope is what the ban covers, as Store.Delete names it: the room, an
// event's EventScope, or "" for every room.
func (b *Ban) Scope() string {
	if b.Event != "" {
		return EventScope(b.Event)
	}
	return b.Room
}

// EventScope is the scope of a ban of every room of event: the id after
// '@', which no room id holds.
func EventScope(event string) string { return "@" + event }

// eventOfScope returns the event of an event scope.
func eventOfScope(scope string) (string, bool) {
	if len(scope) > 1 && scope[0] == '@' {
		return scope[1:], true
	}
	return "", false
}

// maxReasonBytes bounds a ban's reason.
const maxReasonBytes = 500

// Validate checks b's fields. The user id follows the user id rules of
// tickets and gifts (ident.CheckUser): a ban of an id no ticket can carry
// would ban nobody, and one that is not UTF-8 would be listed as U+FFFD,
// an id the ban cannot be lifted by. The reason is shown text, as cleaned
// (ident.CleanText): no control characters (a terminal escape in an
// operator's console), no format characters (a bidi override).
func (b *Ban) Validate() error {
	if err := ident.CheckUser(b.User); err != nil {
		return fmt.Errorf("ban: %w", err)
	}
	switch {
	case b.Room != "" && !wire.ValidRoom(b.Room):
		return fmt.Errorf("ban: room %q: 1-64 of A-Z a-z 0-9 _ -", b.Room)
	case b.Event != "" && !wire.ValidRoom(b.Event):
		return fmt.Errorf("ban: event %q: 1-64 of A-Z a-z 0-9 _ -", b.Event)
	case b.Room != "" && b.Event != "":
		return errors.New("ban: give room or event, not both")
	case len(b.Reason) > maxReasonBytes:
		return fmt.Errorf("ban: reason: at most %d bytes (got %d)", maxReasonBytes, len(b.Reason))
	case b.Reason != ident.CleanText(b.Reason):
		return errors.New("ban: reason: control or format characters, or white space to collapse; clean it as shown text (ident.CleanText)")
	}
	return nil
}

// Store keeps the bans. Every write moves a version, so that a reader
// polling every second re-reads the bans only when they changed.
type Store interface {
	// Put sets a ban (replacing the same user's ban of the same scope).
	Put(ctx context.Context, b Ban) error
	// Delete lifts user's ban of scope (Ban.Scope: a room, an
	// EventScope, or "" for the every-room ban); lifting a ban that does
	// not exist is not an error.
	Delete(ctx context.Context, user, scope string) error
	// User returns user's bans, expired ones included, by room.
	User(ctx context.Context, user string) ([]Ban, error)
	// Version returns a value that changes with every write.
	Version(ctx context.Context) (int64, error)
	// List returns every ban and the version they are at.
	List(ctx context.Context) ([]Ban, int64, error)
	// Purge deletes the bans that lapsed before now (atomically per ban:
	// a ban renewed meanwhile stays).
	Purge(ctx context.Context, now time.Time) (int, error)
}

// banKey is a ban's identity: its user and its scope (Ban.Scope).
type banKey struct{ user, room string }
