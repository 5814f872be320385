// Package roomconf keeps the settings of each room that more than one role
// must agree on — today the segment duration, which the slicer writes and
// the gslb hands to clients — in a Store shared by every process, with a
// Cache that reads it at most once per room per TTL. Stores and the Cache
// are safe for concurrent use.
package roomconf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"danmaku/internal/clock"
	"danmaku/internal/wire"
)

// Settings are one room's shared settings. A zero field means "the
// deployment's default".
type Settings struct {
	// SegmentMs is the room's segment duration: 1000, 500 or 250 ms. A
	// change takes effect at the next whole second (every duration divides
	// a second, so that is a boundary of both).
	SegmentMs int64 `json:"segment_ms,omitempty"`
}

// ErrInvalid is returned for settings no room may have.
var ErrInvalid = errors.New("roomconf: invalid settings")

// Check validates s.
func (s Settings) Check() error {
	if s.SegmentMs != 0 && !wire.ValidSegmentMs(s.SegmentMs) {
		return fmt.Errorf("%w: segment_ms must be 1000, 500 or 250 (got %d)", ErrInvalid, s.SegmentMs)
	}
	return nil
}

// Store keeps every room's Settings.
type Store interface {
	// Get returns room's settings; a room never set has zero Settings.
	Get(ctx context.Context, room string) (Settings, error)
	// Put replaces room's settings.
	Put(ctx context.Context, room string, s Settings) error
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*RedisStore)(nil)
)

// MemoryStore is the in-process Store.
type MemoryStore struct {
	mu    sync.Mutex
	rooms map[string]Settings
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{rooms: map[string]Settings{}} }

// Get implements Store.
func (m *MemoryStore) Get(_ context.Context, room string) (Settings, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rooms[room], nil
}

// Put implements Store.
func (m *MemoryStore) Put(_ context.Context, room string, s Settings) error {
	if err := s.Check(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rooms[room] = s
	return nil
}

// defaultTTL bounds how stale a cached room is: a change reaches every
// process within about a second.
const defaultTTL = time.Second

// Cache reads a Store at most once per room per TTL and fills in the
// deployment's defaults. When the store fails, the last value read is kept
// (a stale duration is better than none); a room never read successfully
// gets the defaults and the error.
type Cache struct {
	store    Store
	defaults Settings
	ttl      time.Duration
	clk      clock.Clock

	mu    sync.Mutex
	rooms map[string]cached
}

type cached struct {
	s  Settings
	at time.Time
}

// NewCache returns a Cache over store. defaults fills zero fields (its own
// zero SegmentMs: 1000). ttl zero: 1 s. clk nil: the real clock.
func NewCache(store Store, defaults Settings, ttl time.Duration, clk clock.Clock) (*Cache, error) {
	if store == nil {
		return nil, errors.New("roomconf: Store is required")
	}
	if err := defaults.Check(); err != nil {
		return nil, err
	}
	if defaults.SegmentMs == 0 {
		defaults.SegmentMs = wire.SegmentDuration
	}
	if ttl == 0 {
		ttl = defaultTTL
	}
	return &Cache{store: store, defaults: defaults, ttl: ttl, clk: clock.Or(clk), rooms: map[string]cached{}}, nil
}

// Get returns room's settings with the defaults filled in.
func (c *Cache) Get(ctx context.Context, room string) (Settings, error) {
	now := c.clk.Now()
	c.mu.Lock()
	e, ok := c.rooms[room]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.ttl {
		return e.s, nil
	}
	s, err := c.store.Get(ctx, room)
	if err == nil {
		err = s.Check() // a bad value written by hand into Redis
	}
	if err != nil {
		if ok {
			return e.s, nil
		}
		return c.defaults, err
	}
	if s.SegmentMs == 0 {
		s.SegmentMs = c.defaults.SegmentMs
	}
	c.mu.Lock()
	c.rooms[room] = cached{s, now}
	c.mu.Unlock()
	return s, nil
}

// Put saves room's settings to the store and caches them here; other
// processes see them within their TTL.
func (c *Cache) Put(ctx context.Context, room string, s Settings) error {
	if err := c.store.Put(ctx, room, s); err != nil {
		return err
	}
	if s.SegmentMs == 0 {
		s.SegmentMs = c.defaults.SegmentMs
	}
	c.mu.Lock()
	c.rooms[room] = cached{s, c.clk.Now()}
	c.mu.Unlock()
	return nil
}

// Forget drops room from the cache (a closed room).
func (c *Cache) Forget(room string) {
	c.mu.Lock()
	delete(c.rooms, room)
	c.mu.Unlock()
}

// Defaults returns the deployment's defaults.
func (c *Cache) Defaults() Settings { return c.defaults }
