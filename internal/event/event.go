// Package event makes a concert a provisioned, bounded thing: an Event names
// its rooms, when they are live and each room's settings. Only rooms of a
// live event exist for viewers; every role reads the events through a
// Directory, an in-memory snapshot of the Store reloaded every second, so a
// lookup — of a real room or of any name a client makes up — costs no
// backend call. Stores and the Directory are safe for concurrent use.
package event

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"danmaku/internal/ident"
	"danmaku/sdk/wire"
)

// Event is one concert (or rehearsal): a set of rooms live from Start until
// End, or until an operator ends it.
type Event struct {
	// ID names the event: 1-64 of A-Z a-z 0-9 _ -.
	ID string `json:"id" yaml:"id"`
	// Title is for people.
	Title string `json:"title,omitempty" yaml:"title,omitempty"`
	// Start and End bound when the rooms are live.
	Start time.Time `json:"start" yaml:"start"`
	End   time.Time `json:"end" yaml:"end"`
	// EndedAt is set when the event was ended before End.
	EndedAt *time.Time `json:"ended_at,omitempty" yaml:"ended_at,omitempty"`
	// Rooms are the event's rooms and their settings.
	Rooms []Room `json:"rooms" yaml:"rooms"`
	// TicketScopeRequired admits to every room of the event only tickets
	// that name their rooms or event (a paid event): an unscoped ticket is
	// refused at entry (403 ticket_scope_required). False: any valid
	// ticket enters, as a viewer unless its scope names the room.
	TicketScopeRequired bool `json:"ticket_scope_required,omitempty" yaml:"ticket_scope_required,omitempty"`
}

// Room is one room of an event and its settings. Zero fields take the
// deployment's defaults.
type Room struct {
	// ID names the room: 1-64 of A-Z a-z 0-9 _ -.
	ID string `json:"id" yaml:"id"`
	// Budget is the messages per second a segment carries. Zero: the
	// slicer's default (60).
	Budget int `json:"budget,omitempty" yaml:"budget,omitempty"`
	// Shares split the budget: exactly four, system, high-value gifts,
	// low-value gifts, barrage, summing to 1. Empty: the default split.
	Shares []float64 `json:"shares,omitempty" yaml:"shares,omitempty"`
	// SegmentMs is the segment duration: 1000, 500 or 250. Zero: 1000.
	SegmentMs int64 `json:"segment_ms,omitempty" yaml:"segment_ms,omitempty"`
	// MinGiftValue is the lowest total value of a gift the edge pushes;
	// cheaper gifts reach viewers through segments only. Zero: the edge's.
	MinGiftValue int64 `json:"min_gift_value,omitempty" yaml:"min_gift_value,omitempty"`
	// Limits are the room's upload limits. Nil: the ingest's defaults.
	Limits *Limits `json:"limits,omitempty" yaml:"limits,omitempty"`
	// TicketScopeRequired is Event.TicketScopeRequired for this room
	// alone (a paid room in a free event). False: the event's.
	TicketScopeRequired bool `json:"ticket_scope_required,omitempty" yaml:"ticket_scope_required,omitempty"`
}

// Limits size a room's upload buckets.
type Limits struct {
	// RoomRefill is the room bucket's refill per second. Zero: default.
	RoomRefill float64 `json:"room_refill,omitempty" yaml:"room_refill,omitempty"`
	// RoomCeiling caps the room bucket's capacity. Zero: default.
	RoomCeiling float64 `json:"room_ceiling,omitempty" yaml:"room_ceiling,omitempty"`
	// UserBurst and UserEveryMs size the per-user bucket: UserBurst
	// comments, one more every UserEveryMs. Zero: 3 and 1500.
	UserBurst   float64 `json:"user_burst,omitempty" yaml:"user_burst,omitempty"`
	UserEveryMs int64   `json:"user_every_ms,omitempty" yaml:"user_every_ms,omitempty"`
	// EventRefill is the global limit: comments per second the whole
	// event admits over all its rooms and ingest nodes (a bucket in
	// Redis), taken from the first room that sets it. Zero: none.
	EventRefill float64 `json:"event_refill,omitempty" yaml:"event_refill,omitempty"`
	// DuplicateWindowMs is how long the same text in a room is suppressed
	// after it was first seen (from any user). Zero: 10,000.
	DuplicateWindowMs int64 `json:"duplicate_window_ms,omitempty" yaml:"duplicate_window_ms,omitempty"`
	// Words is what a sensitive word does to a comment: "mask" (stars,
	// stored), "reject" (dropped silently), "refuse" (422 sensitive_word)
	// or "off". Empty: the ingest's setting (mask by default).
	Words string `json:"words,omitempty" yaml:"words,omitempty"`
	// FastLanePerSec caps what the fast lane displays per second in the
	// room: announcements (over it: 429) and lottery entries (over it: not
	// shown, still entered). Zero: 30.
	FastLanePerSec float64 `json:"fast_lane_per_s,omitempty" yaml:"fast_lane_per_s,omitempty"`
	// GiftBacklogS bounds the room's gift backlog, in seconds of the gift
	// budget; new gifts over it get 429 until the slicer catches up.
	// Zero: 30.
	GiftBacklogS float64 `json:"gift_backlog_s,omitempty" yaml:"gift_backlog_s,omitempty"`
}

// State is where an event stands at a given time.
type State string

// States.
const (
	Scheduled State = "scheduled"
	Live      State = "live"
	Ended     State = "ended"
)

// StateAt returns e's state at t.
func (e *Event) StateAt(t time.Time) State {
	switch {
	case e.EndedAt != nil && !t.Before(*e.EndedAt), !t.Before(e.End):
		return Ended
	case t.Before(e.Start):
		return Scheduled
	}
	return Live
}

// EndTime is when the event ends or ended: EndedAt when it was ended early.
func (e *Event) EndTime() time.Time {
	if e.EndedAt != nil && e.EndedAt.Before(e.End) {
		return *e.EndedAt
	}
	return e.End
}

// EventRefill is the event's global limit (comments per second over all
// its rooms): the event_refill of the first room that sets one, 0 if none
// does. One value per event, whichever room a comment goes to, so that
// every node charges the one bucket at the same rate.
func (e *Event) EventRefill() float64 {
	for i := range e.Rooms {
		if l := e.Rooms[i].Limits; l != nil && l.EventRefill > 0 {
			return l.EventRefill
		}
	}
	return 0
}

// Bounds of what an event may hold.
const (
	MaxRooms    = 1000
	MaxDuration = 14 * 24 * time.Hour
	maxBudget   = 100_000
	numShares   = 4
)

var idRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ErrInvalid is the parent of every validation error; its message names
// the field and what is wrong with it.
var ErrInvalid = errors.New("event: invalid")

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

// Validate checks e completely and names the first field that is wrong.
func (e *Event) Validate() error {
	switch {
	case !idRE.MatchString(e.ID):
		return invalid("id", "must be 1-64 characters of A-Z a-z 0-9 _ - (got %q)", e.ID)
	case len(e.Title) > 200:
		return invalid("title", "at most 200 bytes")
	case e.Title != ident.CleanText(e.Title):
		// Shown to people, in consoles too: a terminal escape or a bidi
		// override in a title acts on what shows it.
		return invalid("title", "plain text only: no control or format characters, single spaces, none at either end")
	case e.Start.IsZero():
		return invalid("start", "required (RFC 3339 time)")
	case e.End.IsZero():
		return invalid("end", "required (RFC 3339 time)")
	case !e.End.After(e.Start):
		return invalid("end", "must be after start (%s ≤ %s)", e.End.Format(time.RFC3339), e.Start.Format(time.RFC3339))
	case e.End.Sub(e.Start) > MaxDuration:
		return invalid("end", "an event lasts at most %v (got %v)", MaxDuration, e.End.Sub(e.Start))
	case len(e.Rooms) == 0:
		return invalid("rooms", "at least one room")
	case len(e.Rooms) > MaxRooms:
		return invalid("rooms", "at most %d rooms (got %d)", MaxRooms, len(e.Rooms))
	}
	seen := make(map[string]bool, len(e.Rooms))
	for i := range e.Rooms {
		r := &e.Rooms[i]
		at := fmt.Sprintf("rooms[%d]", i)
		if seen[r.ID] {
			return invalid(at+".id", "room %q appears twice", r.ID)
		}
		seen[r.ID] = true
		if err := r.validate(at); err != nil {
			return err
		}
	}
	return nil
}

func (r *Room) validate(at string) error {
	switch {
	case !wire.ValidRoom(r.ID):
		return invalid(at+".id", "must be 1-64 characters of A-Z a-z 0-9 _ - (got %q)", r.ID)
	case r.Budget < 0 || r.Budget > maxBudget:
		return invalid(at+".budget", "must be 1-%d messages per second, or 0 for the default (got %d)", maxBudget, r.Budget)
	case len(r.Shares) != 0 && len(r.Shares) != numShares:
		return invalid(at+".shares", "exactly %d shares (system, high-value gifts, low-value gifts, barrage), no more, no fewer (got %d)", numShares, len(r.Shares))
	case r.SegmentMs != 0 && !wire.ValidSegmentMs(r.SegmentMs):
		return invalid(at+".segment_ms", "must be 1000, 500 or 250 (got %d)", r.SegmentMs)
	case r.MinGiftValue < 0:
		return invalid(at+".min_gift_value", "must not be negative (got %d)", r.MinGiftValue)
	}
	if len(r.Shares) == numShares {
		sum := 0.0
		for j, v := range r.Shares {
			if !(v >= 0 && v <= 1) { // also refuses NaN
				return invalid(fmt.Sprintf("%s.shares[%d]", at, j), "must be between 0 and 1 (got %v)", v)
			}
			sum += v
		}
		if math.Abs(sum-1) > 0.001 {
			return invalid(at+".shares", "must sum to 1 (got %.4f)", sum)
		}
	}
	if l := r.Limits; l != nil {
		// In the order of the fields, so that the answer names the first
		// that is wrong, the same every time.
		for _, f := range []struct {
			name string
			v    float64
		}{
			{"room_refill", l.RoomRefill}, {"room_ceiling", l.RoomCeiling}, {"user_burst", l.UserBurst}, {"user_every_ms", float64(l.UserEveryMs)},
			{"event_refill", l.EventRefill}, {"duplicate_window_ms", float64(l.DuplicateWindowMs)}, {"fast_lane_per_s", l.FastLanePerSec}, {"gift_backlog_s", l.GiftBacklogS},
		} {
			if !(f.v >= 0) || math.IsInf(f.v, 0) || f.v > 1e9 {
				return invalid(at+".limits."+f.name, "must be a number from 0 (the default) to 1e9 (got %v)", f.v)
			}
		}
		if l.DuplicateWindowMs > 10*60*1000 {
			return invalid(at+".limits.duplicate_window_ms", "must be at most 600000 (10 min) (got %d)", l.DuplicateWindowMs)
		}
		switch l.Words {
		case "", "mask", "reject", "refuse", "off":
		default:
			return invalid(at+".limits.words", `must be "mask", "reject", "refuse" or "off" (got %q)`, l.Words)
		}
	}
	return nil
}

// Overlaps reports whether e and o share a room while both are not ended
// at now: one room belongs to one live event at a time.
func (e *Event) Overlaps(o *Event, now time.Time) (room string, ok bool) {
	if e.ID == o.ID || o.StateAt(now) == Ended || !(e.Start.Before(o.EndTime()) && o.Start.Before(e.End)) {
		return "", false
	}
	rooms := make(map[string]bool, len(o.Rooms))
	for _, r := range o.Rooms {
		rooms[r.ID] = true
	}
	for _, r := range e.Rooms {
		if rooms[r.ID] {
			return r.ID, true
		}
	}
	return "", false
}
