package stream

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"danmaku/internal/clock"
	"danmaku/sdk/wire"
)

var _ Store = (*MemoryStore)(nil)

// MemoryStore is the in-process Store of embedded mode. It keeps every entry
// in memory until trimmed.
type MemoryStore struct {
	clock clock.Clock

	mu      sync.Mutex
	streams map[Key]*memStream
	rooms   map[string]time.Time
	closed  bool
}

type memEntry struct {
	ms  int64
	seq uint64
	msg wire.Message
}

type memPending struct {
	consumer  string
	delivered time.Time
}

type memGroup struct {
	next    int64 // ms of last delivered
	nextSeq uint64
	started bool
	pending map[string]memPending
}

type memStream struct {
	entries []memEntry // ascending ids
	lastMs  int64
	lastSeq uint64
	groups  map[string]*memGroup
	notify  chan struct{} // closed and replaced on every append
}

// NewMemoryStore returns an empty store stamping ids with c (nil: real clock).
func NewMemoryStore(c clock.Clock) *MemoryStore {
	return &MemoryStore{clock: clock.Or(c), streams: map[Key]*memStream{}, rooms: map[string]time.Time{}}
}

func (s *MemoryStore) stream(k Key) *memStream {
	st, ok := s.streams[k]
	if !ok {
		st = &memStream{groups: map[string]*memGroup{}, notify: make(chan struct{})}
		s.streams[k] = st
	}
	return st
}

// Append implements Store.
func (s *MemoryStore) Append(ctx context.Context, key Key, msgs []wire.Message) ([]wire.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	st := s.stream(key)
	if key.Room != SiteRoom {
		s.openLocked(key.Room)
	}
	out := make([]wire.Message, len(msgs))
	now := s.clock.Now().UnixMilli()
	for i, m := range msgs {
		ms, seq := now, uint64(0)
		if ms <= st.lastMs {
			ms, seq = st.lastMs, st.lastSeq+1
		}
		st.lastMs, st.lastSeq = ms, seq
		m.ID = wire.FormatID(ms, seq)
		st.entries = append(st.entries, memEntry{ms: ms, seq: seq, msg: owned(m)})
		out[i] = owned(m)
	}
	if len(msgs) > 0 {
		close(st.notify)
		st.notify = make(chan struct{})
	}
	return out, nil
}

// owned returns m with its own copy of Merged, so that neither the caller of
// Append nor any reader shares a slice with the stored entry (as with a store
// across the network; the slicer extends Merged when it merges gifts).
func owned(m wire.Message) wire.Message {
	if m.Merged != nil {
		m.Merged = append([]string(nil), m.Merged...)
	}
	return m
}

// after returns the index of the first entry with id > (ms, seq).
func (st *memStream) after(ms int64, seq uint64) int {
	return sort.Search(len(st.entries), func(i int) bool {
		e := st.entries[i]
		return e.ms > ms || (e.ms == ms && e.seq > seq)
	})
}

func parseAfter(id string) (int64, uint64, error) {
	if id == "" || id == "0" {
		return 0, 0, nil
	}
	ms, seq, err := wire.ParseID(id)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadID, id)
	}
	return ms, seq, nil
}

// wait blocks until an append to key, ctx is done or the deadline passes.
// It returns false when the caller should stop waiting.
func (s *MemoryStore) wait(ctx context.Context, notify <-chan struct{}, deadline *time.Timer) bool {
	select {
	case <-notify:
		return true
	case <-ctx.Done():
		return false
	case <-deadline.C:
		return false
	}
}

// ReadGroup implements Store.
func (s *MemoryStore) ReadGroup(ctx context.Context, key Key, group, consumer string, count int, block time.Duration) ([]Entry, error) {
	var timer *time.Timer
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		out, notify := s.readGroupOnce(key, group, consumer, count, s.clock.Now())
		s.mu.Unlock()
		if len(out) > 0 || block <= 0 {
			return out, ctx.Err()
		}
		if timer == nil {
			timer = time.NewTimer(block)
			defer timer.Stop()
		}
		if !s.wait(ctx, notify, timer) {
			return nil, ctx.Err()
		}
	}
}

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, key Key, group, consumer string, minIdle time.Duration, count int) ([]Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	st := s.stream(key)
	g, ok := st.groups[group]
	if !ok {
		return nil, nil
	}
	now := s.clock.Now()
	var out []Entry
	for _, e := range st.entries {
		if count > 0 && len(out) >= count {
			break
		}
		p, ok := g.pending[e.msg.ID]
		if !ok || now.Sub(p.delivered) < minIdle {
			continue
		}
		g.pending[e.msg.ID] = memPending{consumer: consumer, delivered: now}
		out = append(out, owned(e.msg))
	}
	return out, nil
}

// PendingFloor implements Store.
func (s *MemoryStore) PendingFloor(ctx context.Context, key Key, group string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", false, ErrClosed
	}
	g, ok := s.stream(key).groups[group]
	if !ok {
		return "", false, nil
	}
	floor := ""
	for id := range g.pending {
		if floor == "" || wire.CompareIDs(id, floor) < 0 {
			floor = id
		}
	}
	return floor, floor != "", nil
}

// Ack implements Store.
func (s *MemoryStore) Ack(ctx context.Context, key Key, group string, ids ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if g, ok := s.stream(key).groups[group]; ok {
		for _, id := range ids {
			delete(g.pending, id)
		}
	}
	return nil
}

// DropGroup implements Store.
func (s *MemoryStore) DropGroup(ctx context.Context, key Key, group string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	delete(s.stream(key).groups, group)
	return nil
}

// TrimBefore implements Store.
func (s *MemoryStore) TrimBefore(ctx context.Context, key Key, minID string) error {
	ms, seq, err := wire.ParseID(minID)
	if err != nil {
		return fmt.Errorf("%w: %q", ErrBadID, minID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	st := s.stream(key)
	i := sort.Search(len(st.entries), func(i int) bool {
		e := st.entries[i]
		return e.ms > ms || (e.ms == ms && e.seq >= seq)
	})
	if i > 0 {
		st.entries = append([]memEntry(nil), st.entries[i:]...)
	}
	return nil
}

// Read implements Store.
func (s *MemoryStore) Read(ctx context.Context, key Key, after string, count int, block time.Duration) ([]Entry, error) {
	var (
		ms    int64
		seq   uint64
		err   error
		timer *time.Timer
	)
	if after == "$" {
		s.mu.Lock()
		st := s.stream(key)
		ms, seq = st.lastMs, st.lastSeq
		s.mu.Unlock()
	} else if ms, seq, err = parseAfter(after); err != nil {
		return nil, err
	}
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		st := s.stream(key)
		var out []Entry
		for i := st.after(ms, seq); i < len(st.entries) && (count <= 0 || len(out) < count); i++ {
			out = append(out, owned(st.entries[i].msg))
		}
		notify := st.notify
		s.mu.Unlock()
		if len(out) > 0 || block <= 0 {
			return out, nil
		}
		if timer == nil {
			timer = time.NewTimer(block)
			defer timer.Stop()
		}
		if !s.wait(ctx, notify, timer) {
			return nil, ctx.Err()
		}
	}
}

// LastID implements Store.
func (s *MemoryStore) LastID(ctx context.Context, key Key) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stream(key)
	return wire.FormatID(st.lastMs, st.lastSeq), nil
}

// Rooms implements Store.
func (s *MemoryStore) Rooms(ctx context.Context) ([]Room, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Room, 0, len(s.rooms))
	for r, t := range s.rooms {
		out = append(out, Room{ID: r, Opened: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// OpenRoom implements Store.
func (s *MemoryStore) OpenRoom(ctx context.Context, room string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.openLocked(room)
	return nil
}

func (s *MemoryStore) openLocked(room string) {
	if _, ok := s.rooms[room]; !ok {
		s.rooms[room] = s.clock.Now()
	}
}

// Now implements Store.
func (s *MemoryStore) Now(ctx context.Context) (time.Time, error) { return s.clock.Now(), nil }

// Close makes every later call fail with ErrClosed and wakes blocked readers.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		for _, st := range s.streams {
			close(st.notify)
			st.notify = make(chan struct{})
		}
	}
	return nil
}

// CloseRoom implements Store. The streams go after retention on a timer:
// the memory store serves one process, which keeps no other record.
func (s *MemoryStore) CloseRoom(ctx context.Context, room string, retention time.Duration) error {
	s.mu.Lock()
	delete(s.rooms, room)
	s.mu.Unlock()
	drop := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, lane := range []Lane{Barrage, Live} {
			k := Key{Room: room, Lane: lane}
			if st, ok := s.streams[k]; ok {
				close(st.notify) // wake blocked readers; they find nothing
				delete(s.streams, k)
			}
		}
	}
	if retention <= 0 {
		drop()
		return nil
	}
	time.AfterFunc(retention, drop)
	return nil
}

// readGroupOnce delivers up to count entries of key not yet delivered to
// group and returns them with the channel that wakes a waiter on the next
// append. The caller holds s.mu.
func (s *MemoryStore) readGroupOnce(key Key, group, consumer string, count int, now time.Time) ([]Entry, chan struct{}) {
	st := s.stream(key)
	g, ok := st.groups[group]
	if !ok {
		g = &memGroup{pending: map[string]memPending{}}
		st.groups[group] = g
	}
	i := st.after(g.next, g.nextSeq)
	if !g.started {
		i = 0
	}
	var out []Entry
	for ; i < len(st.entries) && (count <= 0 || len(out) < count); i++ {
		e := st.entries[i]
		out = append(out, owned(e.msg))
		g.pending[e.msg.ID] = memPending{consumer: consumer, delivered: now}
		g.next, g.nextSeq, g.started = e.ms, e.seq, true
	}
	return out, st.notify
}

// DrainRoom implements Store: under the store's lock, so the clock read
// and the reads are one step.
func (s *MemoryStore) DrainRoom(ctx context.Context, room, group, consumer string, count int) (time.Time, []Entry, []Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return time.Time{}, nil, nil, ErrClosed
	}
	now := s.clock.Now()
	b, _ := s.readGroupOnce(Key{Room: room, Lane: Barrage}, group, consumer, count, now)
	l, _ := s.readGroupOnce(Key{Room: room, Lane: Live}, group, consumer, count, now)
	return now, b, l, ctx.Err()
}
