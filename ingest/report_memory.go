package ingest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"danmaku/internal/clock"
	"danmaku/sdk/wire"
)

var _ ReportStore = (*MemoryReportStore)(nil)

// MemoryReportStore is the in-process ReportStore (embedded mode, tests).
// A room's reports are forgotten once its latest Expires has passed, by
// the store's clock, at the next call that touches the store.
type MemoryReportStore struct {
	clock  clock.Clock
	bounds ReportBounds

	mu    sync.Mutex
	rooms map[string]*memReportRoom
}

type memReportRoom struct {
	expires time.Time
	items   map[string]*memReportItem // by reportMember
	history map[string][]ReportDecision
}

type memReportItem struct {
	item      ReportItem
	reporters map[string]struct{}
}

// NewMemoryReportStore returns an empty store with bounds b (zero fields:
// the defaults), judging expiry by c (nil: real clock).
func NewMemoryReportStore(b ReportBounds, c clock.Clock) *MemoryReportStore {
	return &MemoryReportStore{clock: clock.Or(c), bounds: b.withDefaults(), rooms: map[string]*memReportRoom{}}
}

// room returns room's reports if they have not expired (create: made when
// missing). Expired rooms are forgotten on the way.
func (m *MemoryReportStore) room(room string, create bool) *memReportRoom {
	now := m.clock.Now()
	for id, r := range m.rooms {
		if !now.Before(r.expires) {
			delete(m.rooms, id)
		}
	}
	r := m.rooms[room]
	if r == nil && create {
		r = &memReportRoom{items: map[string]*memReportItem{}, history: map[string][]ReportDecision{}}
		m.rooms[room] = r
	}
	return r
}

// Add implements ReportStore.
func (m *MemoryReportStore) Add(_ context.Context, rep Report) (ReportAdded, error) {
	if err := rep.Validate(); err != nil {
		return ReportAdded{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.room(rep.Room, true)
	r.expires = rep.Expires
	key := reportMember(rep.Message.Kind, rep.Message.ID)
	var out ReportAdded
	x := r.items[key]
	if x == nil {
		if len(r.items) >= m.bounds.Messages {
			r.evict()
			out.Evicted = true
		}
		msg := rep.Message
		x = &memReportItem{item: ReportItem{ReportedMessage: msg, Reasons: map[string]int64{}, First: rep.At}, reporters: map[string]struct{}{}}
		r.items[key] = x
	} else if !x.item.Known && rep.Message.Known {
		x.item.ReportedMessage = rep.Message
	}
	if _, ok := x.reporters[rep.Reporter]; ok {
		out.Duplicate = true
		return out, nil
	}
	if len(x.reporters) >= m.bounds.Reporters {
		out.Uncounted = true
		return out, nil
	}
	x.reporters[rep.Reporter] = struct{}{}
	x.item.Count++
	x.item.Reasons[rep.Reason]++
	if rep.At.After(x.item.Last) {
		x.item.Last = rep.At
	}
	return out, nil
}

// evict forgets the least-reported message (ties: the smallest member, as
// the Redis store's ZPOPMIN does).
func (r *memReportRoom) evict() {
	var worst string
	var wc int64
	for k, x := range r.items {
		if worst == "" || x.item.Count < wc || (x.item.Count == wc && k < worst) {
			worst, wc = k, x.item.Count
		}
	}
	delete(r.items, worst)
}

func copyItem(x *memReportItem) ReportItem {
	it := x.item
	it.Reasons = maps.Clone(it.Reasons)
	if it.Decision != nil {
		d := *it.Decision
		it.Decision = &d
	}
	return it
}

// Top implements ReportStore.
func (m *MemoryReportStore) Top(_ context.Context, room string, n int) ([]ReportItem, error) {
	if !wire.ValidRoom(room) {
		return nil, fmt.Errorf("%w: room %q", ErrBadReport, room)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.room(room, false)
	if r == nil {
		return []ReportItem{}, nil
	}
	out := make([]ReportItem, 0, len(r.items))
	for _, x := range r.items {
		out = append(out, copyItem(x))
	}
	slices.SortFunc(out, reportOrder)
	return out[:min(n, len(out))], nil
}

// Get implements ReportStore.
func (m *MemoryReportStore) Get(_ context.Context, room string, kind wire.Kind, id string) (ReportItem, error) {
	if err := CheckReportRef(room, kind, id); err != nil {
		return ReportItem{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	x, err := m.find(room, kind, id)
	if err != nil {
		return ReportItem{}, err
	}
	return copyItem(x), nil
}

func (m *MemoryReportStore) find(room string, kind wire.Kind, id string) (*memReportItem, error) {
	r := m.room(room, false)
	if r != nil {
		if x := r.items[reportMember(kind, id)]; x != nil {
			return x, nil
		}
	}
	return nil, fmt.Errorf("%w: %s %d:%s", ErrNoReport, room, kind, id)
}

// Decide implements ReportStore.
func (m *MemoryReportStore) Decide(_ context.Context, room string, kind wire.Kind, id string, d ReportDecision) (ReportItem, error) {
	if err := CheckReportRef(room, kind, id); err != nil {
		return ReportItem{}, err
	}
	if err := d.Validate(); err != nil {
		return ReportItem{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	x, err := m.find(room, kind, id)
	if err != nil {
		return ReportItem{}, err
	}
	if x.item.Decision != nil && x.item.Decision.Action == d.Action {
		return copyItem(x), nil
	}
	d.ID, d.Kind = id, kind
	x.item.Decision = &d
	if u := x.item.User; u != "" {
		r := m.rooms[room]
		h := append([]ReportDecision{d}, r.history[u]...)
		r.history[u] = h[:min(len(h), m.bounds.History)]
	}
	return copyItem(x), nil
}

// History implements ReportStore.
func (m *MemoryReportStore) History(_ context.Context, room, user string) ([]ReportDecision, error) {
	if !wire.ValidRoom(room) {
		return nil, fmt.Errorf("%w: room %q", ErrBadReport, room)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.room(room, false)
	if r == nil {
		return []ReportDecision{}, nil
	}
	return append([]ReportDecision{}, r.history[user]...), nil
}
