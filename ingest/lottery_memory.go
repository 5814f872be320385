package ingest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"danmaku/internal/clock"
)

var _ LotteryStore = (*MemoryLotteryStore)(nil)

// MemoryLotteryStore is the in-process LotteryStore (embedded mode,
// tests). Entrants keep their order of entry, so a cursor is an index and
// pages never repeat. Lotteries are kept for the retention after their end
// and then forgotten by the next Start.
type MemoryLotteryStore struct {
	clock     clock.Clock
	retention time.Duration

	mu        sync.Mutex
	lotteries map[lotteryRef]*memLottery
	version   int64
}

type lotteryRef struct{ room, id string }

type memLottery struct {
	l     Lottery
	seen  map[string]struct{}
	order []string
}

// NewMemoryLotteryStore returns an empty store whose Enter is timed by c
// (nil: real clock).
func NewMemoryLotteryStore(c clock.Clock) *MemoryLotteryStore {
	return &MemoryLotteryStore{clock: clock.Or(c), retention: defaultLotteryRetention, lotteries: map[lotteryRef]*memLottery{}}
}

func (m *MemoryLotteryStore) find(room, id string) (*memLottery, error) {
	if err := checkLotteryRef(room, id); err != nil {
		return nil, err
	}
	x, ok := m.lotteries[lotteryRef{room, id}]
	if !ok {
		return nil, fmt.Errorf("%w: %s/%s", ErrNoLottery, room, id)
	}
	return x, nil
}

// Start implements LotteryStore.
func (m *MemoryLotteryStore) Start(_ context.Context, l Lottery) (Lottery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	if l.StartedAt.IsZero() {
		l.StartedAt = now
	}
	if err := l.Validate(now); err != nil {
		return Lottery{}, err
	}
	ref := lotteryRef{l.Room, l.ID}
	if x, ok := m.lotteries[ref]; ok {
		if x.l.sameStart(&l) {
			return x.l, nil
		}
		return Lottery{}, fmt.Errorf("%w: %s/%s", ErrLotteryExists, l.Room, l.ID)
	}
	for r, x := range m.lotteries {
		if now.Sub(x.l.Until) > m.retention {
			delete(m.lotteries, r)
		}
	}
	m.lotteries[ref] = &memLottery{l: l, seen: map[string]struct{}{}}
	m.version++
	return l, nil
}

// Stop implements LotteryStore.
func (m *MemoryLotteryStore) Stop(_ context.Context, room, id string, at time.Time) (Lottery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x, err := m.find(room, id)
	if err != nil {
		return Lottery{}, err
	}
	if x.l.StoppedAt.IsZero() {
		x.l.StoppedAt = at
		m.version++
	}
	return x.l, nil
}

// Get implements LotteryStore.
func (m *MemoryLotteryStore) Get(_ context.Context, room, id string) (Lottery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x, err := m.find(room, id)
	if err != nil {
		return Lottery{}, err
	}
	return x.l, nil
}

// Enter implements LotteryStore.
func (m *MemoryLotteryStore) Enter(_ context.Context, room, id, user string) (bool, error) {
	if err := checkEntrant(user); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	x, err := m.find(room, id)
	if err != nil {
		return false, err
	}
	if !x.l.Open(m.clock.Now()) {
		return false, fmt.Errorf("%w: %s/%s", ErrLotteryClosed, room, id)
	}
	if _, ok := x.seen[user]; ok {
		return false, nil
	}
	x.seen[user] = struct{}{}
	x.order = append(x.order, user)
	return true, nil
}

// Count implements LotteryStore.
func (m *MemoryLotteryStore) Count(_ context.Context, room, id string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x, err := m.find(room, id)
	if err != nil {
		return 0, err
	}
	return int64(len(x.order)), nil
}

// Entrants implements LotteryStore.
func (m *MemoryLotteryStore) Entrants(_ context.Context, room, id string, cursor uint64, count int) ([]string, uint64, error) {
	if count < 1 || count > maxEntrantsPage {
		return nil, 0, fmt.Errorf("%w: count %d: 1-%d", ErrBadLottery, count, maxEntrantsPage)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	x, err := m.find(room, id)
	if err != nil {
		return nil, 0, err
	}
	if cursor >= uint64(len(x.order)) {
		return nil, 0, nil
	}
	end := min(cursor+uint64(count), uint64(len(x.order)))
	page := append([]string(nil), x.order[cursor:end]...)
	if end == uint64(len(x.order)) {
		end = 0
	}
	return page, end, nil
}

// Running implements LotteryStore.
func (m *MemoryLotteryStore) Running(context.Context) ([]Lottery, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Lottery
	for _, x := range m.lotteries {
		if x.l.StoppedAt.IsZero() {
			out = append(out, x.l)
		}
	}
	sortLotteries(out)
	return out, m.version, nil
}

// Version implements LotteryStore.
func (m *MemoryLotteryStore) Version(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version, nil
}

func sortLotteries(ls []Lottery) {
	sort.Slice(ls, func(i, j int) bool {
		if ls[i].Room != ls[j].Room {
			return ls[i].Room < ls[j].Room
		}
		return ls[i].ID < ls[j].ID
	})
}
