package ban

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/clock"
	"danmaku/internal/reload"
)

// Defaults of ListConfig.
const (
	defaultReload = time.Second
	defaultPurge  = 10 * time.Minute
)

// ListConfig configures a List.
type ListConfig struct {
	// Store is where bans live. Required.
	Store Store
	// What names the list in logs, e.g. "edge: ban list". Zero: "ban list".
	What string
	// Reload is how often the store's version is checked. Zero: 1 s.
	Reload time.Duration
	// PurgeEvery is how often lapsed bans are deleted from the store. Zero:
	// 10 minutes. Negative: never (another process purges; a reader with
	// read-only access to the store).
	PurgeEvery time.Duration
	// EventOf returns the event a room belongs to now ("" for none), for
	// the bans of an event (event.Directory.EventOf). Nil: those bans
	// cover no room.
	EventOf func(room string) string
	// Clock judges expiry. Nil: real clock.
	Clock clock.Clock
	// Banned counts what Banned refused, Active is set to the bans of
	// each snapshot; the role names and registers them. Nil: not kept.
	Banned prometheus.Counter
	Active prometheus.Gauge
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// List is a process's view of the bans: a snapshot of the Store, reloaded
// when the store's version moves (checked every Reload, like
// event.Directory), so Banned is a map read. A failed reload keeps the
// last snapshot; until the first load, nobody is banned (Ready is false).
// Changed lets a role act on a new snapshot (the edge closes the
// connections of the users it bans). Safe for concurrent use.
type List struct {
	store Store
	what  string
	every time.Duration
	purge time.Duration
	clk   clock.Clock
	log   *slog.Logger
	// eventOf is ListConfig.EventOf.
	eventOf func(room string) string

	snap atomic.Pointer[snapshot]

	banned prometheus.Counter // nil: not counted
	active prometheus.Gauge   // nil: not kept
}

type snapshot struct {
	version int64
	until   map[banKey]time.Time // by user and scope; zero: never lapses
	events  bool                 // some ban has an event's scope
	// changed is closed when a newer snapshot replaces this one.
	changed chan struct{}
}

// NewList returns a List; call Refresh or Run to load it.
func NewList(cfg ListConfig) (*List, error) {
	if cfg.Store == nil {
		return nil, errors.New("ban: list: Store is required")
	}
	if cfg.Reload < 0 {
		return nil, errors.New("ban: list: negative Reload")
	}
	if cfg.Reload == 0 {
		cfg.Reload = defaultReload
	}
	if cfg.PurgeEvery == 0 {
		cfg.PurgeEvery = defaultPurge
	}
	if cfg.What == "" {
		cfg.What = "ban list"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &List{store: cfg.Store, what: cfg.What, every: cfg.Reload, purge: cfg.PurgeEvery, clk: clock.Or(cfg.Clock), log: cfg.Logger, eventOf: cfg.EventOf, banned: cfg.Banned, active: cfg.Active}
	// An empty, unloaded snapshot carries the first changed channel.
	l.snap.Store(&snapshot{version: -1, changed: make(chan struct{})})
	return l, nil
}

// Refresh reloads the snapshot if the store's version moved.
func (l *List) Refresh(ctx context.Context) error {
	cur := l.snap.Load()
	if cur.until != nil {
		v, err := l.store.Version(ctx)
		if err != nil {
			return err
		}
		if v == cur.version {
			return nil
		}
	}
	bans, v, err := l.store.List(ctx)
	if err != nil {
		return err
	}
	s := &snapshot{version: v, until: make(map[banKey]time.Time, len(bans)), changed: make(chan struct{})}
	now := l.clk.Now()
	for _, b := range bans {
		if b.Active(now) {
			s.until[banKey{b.User, b.Scope()}] = b.Until
			s.events = s.events || b.Event != ""
		}
	}
	// Two concurrent refreshes (the loop and an operator API's write):
	// only one replaces cur, so changed is closed once.
	if l.snap.CompareAndSwap(cur, s) {
		close(cur.changed)
		if l.active != nil {
			l.active.Set(float64(len(s.until)))
		}
	}
	return nil
}

// Run reloads every interval, and purges lapsed bans every PurgeEvery,
// until ctx is done.
func (l *List) Run(ctx context.Context) error {
	lastPurge := l.clk.Now()
	return reload.Every(ctx, l.every, l.log, l.what, func(ctx context.Context) error {
		err := l.Refresh(ctx)
		if now := l.clk.Now(); l.purge > 0 && now.Sub(lastPurge) >= l.purge {
			lastPurge = now
			if n, err := l.store.Purge(ctx, now); err != nil {
				l.log.Warn("ban: purging lapsed bans failed", "err", err)
			} else if n > 0 {
				l.log.Info("ban: purged lapsed bans", "bans", n)
			}
		}
		return err
	})
}

// Ready reports whether the list has loaded the store at least once.
func (l *List) Ready() bool { return l.snap.Load().until != nil }

// Changed returns a channel closed when the next snapshot replaces the
// current one: a watcher takes it, reads the bans (Each), and waits on it.
func (l *List) Changed() <-chan struct{} { return l.snap.Load().changed }

// Banned reports whether user is banned from room now (a ban of the room,
// of its event, or of every room), and counts the refusal when so. It reads the snapshot
// only.
func (l *List) Banned(room, user string) bool {
	if l.Has(room, user) {
		if l.banned != nil {
			l.banned.Inc()
		}
		return true
	}
	return false
}

// Has is Banned without the count: for a check that refuses nothing.
func (l *List) Has(room, user string) bool {
	s := l.snap.Load()
	if len(s.until) == 0 {
		return false
	}
	now := l.clk.Now()
	for _, k := range [2]banKey{{user, ""}, {user, room}} {
		if until, ok := s.until[k]; ok && (until.IsZero() || now.Before(until)) {
			return true
		}
	}
	if s.events && l.eventOf != nil {
		if ev := l.eventOf(room); ev != "" {
			if until, ok := s.until[banKey{user, EventScope(ev)}]; ok && (until.IsZero() || now.Before(until)) {
				return true
			}
		}
	}
	return false
}

// Covers reports whether a ban of scope (as Each gives it) covers room.
func (l *List) Covers(scope, room string) bool {
	if scope == "" || scope == room {
		return true
	}
	ev, ok := eventOfScope(scope)
	return ok && l.eventOf != nil && l.eventOf(room) == ev
}

// Each calls fn for every ban of the snapshot in force now, with its
// scope (Ban.Scope; Covers tells the rooms it covers). Order is
// unspecified.
func (l *List) Each(fn func(user, scope string)) {
	s := l.snap.Load()
	now := l.clk.Now()
	for k, until := range s.until {
		if until.IsZero() || now.Before(until) {
			fn(k.user, k.room)
		}
	}
}

// Len returns the number of bans in the snapshot (lapsed ones included
// until the next reload): what a walk with Each costs.
func (l *List) Len() int { return len(l.snap.Load().until) }

// Every returns the reload interval.
func (l *List) Every() time.Duration { return l.every }
