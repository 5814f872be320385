package event

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/reload"
)

// defaultReload is how often a Directory re-reads the Store: a change (a
// new event, an early end, new limits) reaches every process within it.
const defaultReload = time.Second

// Directory is a process's view of the events: a snapshot of the Store,
// reloaded every interval, that answers which event a room belongs to and
// in what state without calling anything. A failed reload keeps the last
// snapshot (states still move with the clock); until the first load
// succeeds, Ready is false.
type Directory struct {
	store Store
	clk   clock.Clock
	every time.Duration
	log   *slog.Logger

	snap atomic.Pointer[snapshot]
}

type snapshot struct {
	events []Event
	// rooms maps a room to the events that name it (an ended rehearsal and
	// the concert, say), with the room's place in each and the event's
	// global rate: a lookup runs for every comment, and an event holds up
	// to a thousand rooms, so nothing is searched then.
	rooms map[string][]roomRef
}

type roomRef struct {
	e      *Event
	i      int     // the room's index in e.Rooms
	refill float64 // e.EventRefill()
}

// DirectoryConfig configures a Directory.
type DirectoryConfig struct {
	// Store is where events live. Required.
	Store Store
	// Reload is how often the Store is re-read. Zero: 1 s.
	Reload time.Duration
	// Clock tells the time states are judged at. Nil: real clock.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// NewDirectory returns a Directory; call Refresh or Run to load it.
func NewDirectory(cfg DirectoryConfig) (*Directory, error) {
	if cfg.Store == nil {
		return nil, errors.New("event: directory: Store is required")
	}
	if cfg.Reload == 0 {
		cfg.Reload = defaultReload
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Directory{store: cfg.Store, clk: clock.Or(cfg.Clock), every: cfg.Reload, log: cfg.Logger}, nil
}

// DirectoryOf returns a loaded Directory of exactly events, on an in-memory
// Store: a fixed set of events for embedded use and tests.
func DirectoryOf(clk clock.Clock, events ...Event) (*Directory, error) {
	store := NewMemoryStore()
	for _, e := range events {
		if err := store.Create(context.Background(), e); err != nil {
			return nil, err
		}
	}
	d, err := NewDirectory(DirectoryConfig{Store: store, Clock: clk})
	if err != nil {
		return nil, err
	}
	return d, d.Refresh(context.Background())
}

// Refresh reloads the snapshot once.
func (d *Directory) Refresh(ctx context.Context) error {
	events, err := d.store.List(ctx)
	if err != nil {
		return err
	}
	s := &snapshot{events: events, rooms: map[string][]roomRef{}}
	for i := range s.events {
		e := &s.events[i]
		refill := e.EventRefill()
		for k, r := range e.Rooms {
			s.rooms[r.ID] = append(s.rooms[r.ID], roomRef{e: e, i: k, refill: refill})
		}
	}
	d.snap.Store(s)
	return nil
}

// Run reloads every interval until ctx is done.
func (d *Directory) Run(ctx context.Context) error {
	return reload.Every(ctx, d.every, d.log, "event: directory", d.Refresh)
}

// Ready reports whether the Directory has loaded the Store at least once.
func (d *Directory) Ready() bool { return d.snap.Load() != nil }

// RoomView is a room as the Directory sees it now.
type RoomView struct {
	Event *Event
	Room  Room
	State State
	// EventRefill is Event.EventRefill(), worked out once per load.
	EventRefill float64
}

// ScopeRequired reports whether the room admits only tickets that name
// their rooms or event (Event.TicketScopeRequired or the room's own).
func (v RoomView) ScopeRequired() bool {
	return v.Room.TicketScopeRequired || (v.Event != nil && v.Event.TicketScopeRequired)
}

// Lookup returns room's current event — the live one, else the next to
// start, else the last to end — its settings there, and the state. ok is
// false for a room no event names (or before the first load).
func (d *Directory) Lookup(room string) (RoomView, bool) {
	s := d.snap.Load()
	if s == nil {
		return RoomView{}, false
	}
	now := d.clk.Now()
	var best *roomRef
	var bestState State
	refs := s.rooms[room]
	for k := range refs {
		e := refs[k].e
		st := e.StateAt(now)
		switch {
		case best == nil, rank(st) > rank(bestState),
			st == bestState && st == Scheduled && e.Start.Before(best.e.Start),
			st == bestState && st == Ended && e.EndTime().After(best.e.EndTime()):
			best, bestState = &refs[k], st
		}
	}
	if best == nil {
		return RoomView{}, false
	}
	return RoomView{Event: best.e, Room: best.e.Rooms[best.i], State: bestState, EventRefill: best.refill}, true
}

// EventOf returns the id of room's current event (as Lookup chooses it),
// or "" for a room no event names: what a ban of an event covers.
func (d *Directory) EventOf(room string) string {
	if v, ok := d.Lookup(room); ok {
		return v.Event.ID
	}
	return ""
}

// rank orders the states a room's events may be in: the live one wins.
func rank(s State) int {
	switch s {
	case Live:
		return 3
	case Scheduled:
		return 2
	}
	return 1
}

// Live reports whether room belongs to a live event now.
func (d *Directory) Live(room string) bool {
	v, ok := d.Lookup(room)
	return ok && v.State == Live
}

// LiveRooms returns every room of a live event now.
func (d *Directory) LiveRooms() []RoomView {
	s := d.snap.Load()
	if s == nil {
		return nil
	}
	now := d.clk.Now()
	var out []RoomView
	for i := range s.events {
		e := &s.events[i]
		if e.StateAt(now) != Live {
			continue
		}
		for _, r := range e.Rooms {
			out = append(out, RoomView{Event: e, Room: r, State: Live})
		}
	}
	return out
}

// Events returns the snapshot's events.
func (d *Directory) Events() []Event {
	s := d.snap.Load()
	if s == nil {
		return nil
	}
	return s.events
}

// The reasons Check refuses a room (errors.Is on its *RoomError).
var (
	// ErrNotLoaded: the directory has not loaded the events yet; a client
	// retries shortly.
	ErrNotLoaded = errors.New("event: events not loaded yet")
	// ErrNoSuchRoom: no event names the room.
	ErrNoSuchRoom = errors.New("event: room is not in any event")
	// ErrRoomNotLive: the room's event has not started yet, or has ended.
	ErrRoomNotLive = errors.New("event: room not live")
)

// RoomError is what Check refuses a room with: the reason, one of the
// sentinels above, and a message for people that names the room and its
// event. Handlers answer it with RoomHTTPError.
type RoomError struct {
	Reason  error
	Message string
}

func (e *RoomError) Error() string { return e.Message }

// Unwrap returns the reason.
func (e *RoomError) Unwrap() error { return e.Reason }

// IssuedLeeway is how early, by its own clock, a node behind the gslb
// (edge, ingest) lets a room in before its event starts: the gslb found the
// room live when it issued the client's token, and its clock — or the
// business server's, for a gift — may run ahead of this node's. The fault table's edge 2 s behind refused every
// viewer of a show's first 2 s (409 room_not_live), who all went to the
// other edge and stayed. Tickets allow the same 5 s.
const IssuedLeeway = 5 * time.Second

// CheckIssued is Check for a node behind the gslb: a room whose event
// starts within IssuedLeeway counts as live.
func (d *Directory) CheckIssued(room string) error {
	err := d.Check(room)
	if !errors.Is(err, ErrRoomNotLive) {
		return err
	}
	if v, ok := d.Lookup(room); ok && v.State == Scheduled && v.Event.Start.Sub(d.clk.Now()) <= IssuedLeeway {
		return nil
	}
	return err
}

// Check answers whether clients may use room now: nil for a room of a live
// event, else a *RoomError — ErrNoSuchRoom for a room no event names,
// ErrRoomNotLive before its event starts or after it ends, ErrNotLoaded
// before the first load.
func (d *Directory) Check(room string) error {
	if !d.Ready() {
		return &RoomError{ErrNotLoaded, "events not loaded yet; retry shortly"}
	}
	v, ok := d.Lookup(room)
	switch {
	case !ok:
		return &RoomError{ErrNoSuchRoom, fmt.Sprintf("room %q is not in any event", room)}
	case v.State == Scheduled:
		return &RoomError{ErrRoomNotLive, fmt.Sprintf("room %q opens when event %q starts, at %s", room, v.Event.ID, v.Event.Start.UTC().Format(time.RFC3339))}
	case v.State == Ended:
		return &RoomError{ErrRoomNotLive, fmt.Sprintf("room %q closed when event %q ended, at %s", room, v.Event.ID, v.Event.EndTime().UTC().Format(time.RFC3339))}
	}
	return nil
}
