package ingest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"danmaku/internal/clock"
	"danmaku/sdk/wire"
)

var _ TakedownStore = (*MemoryTakedownStore)(nil)

// MemoryTakedownStore is the in-process TakedownStore (embedded mode,
// tests). A room's takedowns are forgotten once its expiry passes, at the
// next call that touches the room.
type MemoryTakedownStore struct {
	clock clock.Clock

	mu    sync.Mutex
	rooms map[string]*memTakedowns
}

type memTakedowns struct {
	list   []Takedown
	index  map[string]int // takedownKey → position in list
	expire time.Time
}

// NewMemoryTakedownStore returns an empty store whose expiry is judged by c
// (nil: real clock).
func NewMemoryTakedownStore(c clock.Clock) *MemoryTakedownStore {
	return &MemoryTakedownStore{clock: clock.Or(c), rooms: map[string]*memTakedowns{}}
}

// room returns room's record, nil when it has none or it expired. m.mu
// must be held.
func (m *MemoryTakedownStore) room(room string) *memTakedowns {
	r := m.rooms[room]
	if r != nil && !m.clock.Now().Before(r.expire) {
		delete(m.rooms, room)
		return nil
	}
	return r
}

// Add implements TakedownStore.
func (m *MemoryTakedownStore) Add(_ context.Context, room string, t Takedown, max int, expire time.Time) (Takedown, bool, error) {
	if err := validTakedown(room, &t); err != nil {
		return Takedown{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.room(room)
	if r == nil {
		r = &memTakedowns{index: map[string]int{}}
		m.rooms[room] = r
	}
	if expire.After(r.expire) {
		r.expire = expire
	}
	k := takedownKey(t.ID, t.Kind)
	if i, ok := r.index[k]; ok {
		return r.list[i], false, nil
	}
	if len(r.list) >= max {
		return Takedown{}, false, fmt.Errorf("%w: %s", ErrTakedownsFull, room)
	}
	r.index[k] = len(r.list)
	r.list = append(r.list, t)
	return t, true, nil
}

// Lookup implements TakedownStore.
func (m *MemoryTakedownStore) Lookup(_ context.Context, room, id string, kind wire.Kind) (Takedown, bool, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.room(room)
	if r == nil {
		return Takedown{}, false, 0, nil
	}
	if i, ok := r.index[takedownKey(id, kind)]; ok {
		return r.list[i], true, len(r.list), nil
	}
	return Takedown{}, false, len(r.list), nil
}

// List implements TakedownStore.
func (m *MemoryTakedownStore) List(_ context.Context, room string) ([]Takedown, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.room(room)
	if r == nil {
		return nil, nil
	}
	return append([]Takedown(nil), r.list...), nil
}
