package ingest

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
)

var _ BanStore = (*MemoryBanStore)(nil)

// MemoryBanStore is the in-process BanStore (embedded mode, tests).
type MemoryBanStore struct {
	mu      sync.Mutex
	bans    map[banKey]Ban
	version int64
}

// NewMemoryBanStore returns an empty store.
func NewMemoryBanStore() *MemoryBanStore { return &MemoryBanStore{bans: map[banKey]Ban{}} }

// Put implements BanStore.
func (m *MemoryBanStore) Put(_ context.Context, b Ban) error {
	if err := b.Validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bans[banKey{b.User, b.Room}] = b
	m.version++
	return nil
}

// Delete implements BanStore.
func (m *MemoryBanStore) Delete(_ context.Context, user, room string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.bans[banKey{user, room}]; ok {
		delete(m.bans, banKey{user, room})
		m.version++
	}
	return nil
}

// User implements BanStore.
func (m *MemoryBanStore) User(_ context.Context, user string) ([]Ban, error) {
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

// Version implements BanStore.
func (m *MemoryBanStore) Version(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, nil
}

// List implements BanStore.
func (m *MemoryBanStore) List(context.Context) ([]Ban, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Ban, 0, len(m.bans))
	for _, b := range m.bans {
		out = append(out, b)
	}
	sortBans(out)
	return out, m.version, nil
}

// Purge implements BanStore.
func (m *MemoryBanStore) Purge(_ context.Context, now time.Time) (int, error) {
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
		return strings.Compare(a.Room, b.Room)
	})
}
