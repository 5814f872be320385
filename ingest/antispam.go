package ingest

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/clock"
)

// Anti-spam components of the barrage path, checked in this order after the
// per-user bucket: BanList (bans.go), GlobalGate (globallimit.go),
// WordFilter (words.go), then Duplicates here; the room gate comes last.
// Every outcome is recorded in the audit trail (internal/audit).

// Defaults of DuplicatesConfig.
const (
	defaultDupWindow  = 10 * time.Second
	defaultDupPerRoom = 1 << 14
	// dupShards splits a room's memory so that concurrent comments of one
	// busy room rarely wait for the same lock.
	dupShards = 16
)

// DuplicatesConfig configures Duplicates.
type DuplicatesConfig struct {
	// Window is how long a text, once shown, suppresses copies of itself
	// in the same room. Zero: 10 s.
	Window time.Duration
	// PerRoom bounds the texts remembered per room. A flood of distinct
	// texts beyond it makes the oldest be forgotten early (a copy of one of
	// them may then pass again), never memory grow. Zero: 16,384 (about
	// 0.6 MB for a room at the bound).
	PerRoom int
	// Clock is what Run's sweep judges idleness by. Nil: real clock.
	Clock clock.Clock
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
}

// Duplicates suppresses the same comment text sent by many users to one
// room: within Window of a text's first appearance, later copies are
// dropped (the caller answers them as stored and counts them). Texts are
// compared folded (NFKC, lower case: what the word filter matches), as
// 64-bit hashes.
//
// Why exact hashes in two generations, not a count-min sketch or a Bloom
// filter: a false positive here silently drops an innocent comment, and
// sketches trade false positives for memory; a 64-bit hash collides once
// in 2^64, and 16,384 of them are a few hundred kilobytes. Each room
// shard keeps a current and a previous generation (map hash → first seen);
// the current becomes the previous when it is a Window old or full, so
// every remembered entry is at most two windows old, each lookup is two
// map reads, and memory is bounded per room. A copy compares its time with
// the first one's, so the window is exact, not a generation's length.
//
// Rooms are the live rooms the caller admits (the event directory bounds
// them); a room silent for two windows is forgotten by Sweep. Safe for
// concurrent use.
type Duplicates struct {
	window   atomic.Int64 // ms: the node's window (SetWindow)
	perShard int
	seed     maphash.Seed
	clk      clock.Clock

	mu    sync.RWMutex
	rooms map[string]*dupRoom

	dropped prometheus.Counter
}

type dupRoom struct {
	// window is the room's current window in ms: its event's setting, or
	// the default. Set by every check, so a changed setting takes effect
	// on the next comment.
	window atomic.Int64
	shards [dupShards]dupShard
}

type dupShard struct {
	mu        sync.Mutex
	cur, prev map[uint64]int64 // hash → first seen, ms
	curStart  int64            // ms
	last      int64            // ms of the last check, for Sweep
}

// NewDuplicates returns an empty Duplicates.
func NewDuplicates(cfg DuplicatesConfig) (*Duplicates, error) {
	if cfg.Window < 0 || cfg.PerRoom < 0 {
		return nil, errors.New("ingest: duplicates: negative Window or PerRoom")
	}
	if cfg.Window == 0 {
		cfg.Window = defaultDupWindow
	}
	if cfg.PerRoom == 0 {
		cfg.PerRoom = defaultDupPerRoom
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	d := &Duplicates{
		perShard: max(1, cfg.PerRoom/dupShards),
		seed:     maphash.MakeSeed(),
		clk:      clock.Or(cfg.Clock),
		rooms:    map[string]*dupRoom{},
	}
	d.window.Store(cfg.Window.Milliseconds())
	d.dropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_ingest_duplicates_dropped_total",
		Help: "Comments dropped as a copy of a text shown in the same room within the duplicate window.",
	})
	if err := cfg.Registerer.Register(d.dropped); err != nil {
		return nil, fmt.Errorf("ingest: duplicates metrics: %w", err)
	}
	return d, nil
}

// Seen records text in room at now and reports whether it is a copy of a
// text first seen there less than Window ago: true means drop it. The
// first occurrence (false) is remembered; copies do not extend the window,
// so a text repeated without pause is shown once per window. text is a
// comment as the ingest stores it (normalize).
func (d *Duplicates) Seen(room, text string, now time.Time) bool {
	return d.SeenWithin(room, text, now, 0)
}

// SeenWithin is Seen with the room's own window (its event's
// duplicate_window_ms); window <= 0 means the configured one. A room's
// window can change at run time: a longer one applies fully to texts seen
// after the change (older ones may have been forgotten by the shorter
// rotation), a shorter one at once.
func (d *Duplicates) SeenWithin(room, text string, now time.Time, window time.Duration) bool {
	w := window.Milliseconds()
	if w <= 0 {
		w = d.window.Load()
	}
	b := foldPool.Get().(*foldBuf)
	b.fold(text)
	h := maphash.Bytes(d.seed, b.hay)
	foldPool.Put(b)

	r := d.room(room)
	r.window.Store(w)
	s := &r.shards[h%dupShards]
	t := now.UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = t
	if t-s.curStart >= w {
		s.rotate(t)
	}
	if first, ok := s.cur[h]; ok && t-first < w {
		d.dropped.Inc()
		return true
	}
	if first, ok := s.prev[h]; ok && t-first < w {
		d.dropped.Inc()
		return true
	}
	if len(s.cur) >= d.perShard {
		s.rotate(t)
	}
	if s.cur == nil {
		s.cur = make(map[uint64]int64, 64)
	}
	s.cur[h] = t
	return false
}

// rotate makes the current generation the previous one; the old previous
// is emptied and reused, so a busy room stops allocating once its maps
// have grown.
func (s *dupShard) rotate(t int64) {
	old := s.prev
	s.prev = s.cur
	clear(old)
	s.cur = old
	s.curStart = t
}

func (d *Duplicates) room(room string) *dupRoom {
	d.mu.RLock()
	r := d.rooms[room]
	d.mu.RUnlock()
	if r != nil {
		return r
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r = d.rooms[room]; r == nil {
		r = &dupRoom{}
		d.rooms[room] = r
	}
	return r
}

// Sweep forgets rooms with no comment for two windows: everything they
// remember has expired.
func (d *Duplicates) Sweep(now time.Time) {
	t := now.UnixMilli()
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, r := range d.rooms {
		idle := true
		w := max(r.window.Load(), d.window.Load())
		for i := range r.shards {
			s := &r.shards[i]
			s.mu.Lock()
			if t-s.last < 2*w {
				idle = false
			}
			s.mu.Unlock()
			if !idle {
				break
			}
		}
		if idle {
			delete(d.rooms, name)
		}
	}
}

// Rooms returns how many rooms are remembered.
func (d *Duplicates) Rooms() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.rooms)
}

// SetWindow makes w the node's window, for rooms whose event sets none
// (the moderation document's duplicate_window_ms): longer, it applies
// fully to texts seen after the change, shorter at once. w <= 0 is ignored.
func (d *Duplicates) SetWindow(w time.Duration) {
	if w > 0 {
		d.window.Store(w.Milliseconds())
	}
}

// Run sweeps every window (the one it started with) until ctx is done, on
// its clock's timers when it has them (clock.TimersOf).
func (d *Duplicates) Run(ctx context.Context) error {
	t, tick := clock.TimersOf(d.clk).NewTicker(time.Duration(d.window.Load()) * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick:
			d.Sweep(d.clk.Now())
		}
	}
}

// Reasons of the anti-spam layer, as counted in
// danmaku_ingest_rejected_total{layer="antispam"} and written in the audit
// trail.
const (
	ReasonBanned        = "banned"
	ReasonGlobalLimit   = "global_limit"
	ReasonSensitiveWord = "sensitive_word"
	ReasonDuplicate     = "duplicate"
)
