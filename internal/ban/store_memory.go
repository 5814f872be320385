package ban

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

var _ Store = (*MemoryStore)(nil)

// MemoryStore is the in-process Store (embedded mode, tests).
type MemoryStore struct {
	mu      sync.Mutex
	bans    map[banKey]Ban
	version int64
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{bans: map[banKey]Ban{}} }

// Put implements Store.
func (m *MemoryStore) Put(_ context.Context, b Ban) error {
	if err := b.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bans[banKey{b.User, b.Scope()}] = b
	m.version++
	return nil
}

// Delete implements Store.
func (m *MemoryStore) Delete(_ context.Context, user, room string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.bans[banKey{user, room}]; ok {
		delete(m.bans, banKey{user, room})
		m.version++
	}
	return nil
}

// User implements Store.
func (m *MemoryStore) User(_ context.Context, user string) ([]Ban, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Ban
	for k, b := range m.bans {
		if k.user == user {
			out = append(out, b)
		}
	}
	sortBans(out)
	return out, nil
}

// Version implements Store.
func (m *MemoryStore) Version(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, nil
}

// List implements Store.
func (m *MemoryStore) List(context.Context) ([]Ban, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Ban, 0, len(m.bans))
	for _, b := range m.bans {
		out = append(out, b)
	}
	sortBans(out)
	return out, m.version, nil
}

// Purge implements Store.
func (m *MemoryStore) Purge(_ context.Context, now time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k, b := range m.bans {
		if !b.Active(now) {
			delete(m.bans, k)
			n++
		}
	}
	if n > 0 {
		m.version++
	}
	return n, nil
}

// sortBans orders bans by user, then room (the every-room ban first).
func sortBans(bans []Ban) {
	slices.SortFunc(bans, func(a, b Ban) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Scope(), b.Scope())
	})
}
