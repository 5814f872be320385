package sdk

import (
	"danmaku/sdk/wire"

	"context"
	"sync"
	"time"
)

// seenSet remembers delivered ids for de-duplication, bounded by count and by
// age; the oldest are forgotten first. It is not safe for concurrent use.
type seenSet struct {
	max    int
	window int64 // ms
	ids    map[string]struct{}
	q      []seenEntry // insertion order, from head
	head   int
}

type seenEntry struct {
	id string
	at int64 // server ms when added
}

func newSeenSet(max int, window time.Duration) *seenSet {
	return &seenSet{max: max, window: window.Milliseconds(), ids: make(map[string]struct{})}
}

func (s *seenSet) has(id string) bool {
	_, ok := s.ids[id]
	return ok
}

func (s *seenSet) len() int { return len(s.ids) }

// add remembers id at server time now (ms) and forgets what is too old or
// beyond the bound.
func (s *seenSet) add(id string, now int64) {
	if _, ok := s.ids[id]; ok {
		return
	}
	s.ids[id] = struct{}{}
	s.q = append(s.q, seenEntry{id, now})
	for s.head < len(s.q) && (len(s.q)-s.head > s.max || s.q[s.head].at < now-s.window) {
		delete(s.ids, s.q[s.head].id)
		s.q[s.head] = seenEntry{}
		s.head++
	}
	// Reclaim the consumed front once it is the larger part.
	if s.head > 1024 && s.head > len(s.q)/2 {
		n := copy(s.q, s.q[s.head:])
		clear(s.q[n:])
		s.q = s.q[:n]
		s.head = 0
	}
}

// merger is the one door to the Messages channel: it de-duplicates the edge
// and segment streams against each other and delivers in the order it is
// called, one batch at a time.
//
// It also holds the taken-down set: no message named in it is delivered,
// and a takedown of a message it delivered is itself delivered, as a
// KindTakedown notice, after it.
type merger struct {
	mu    sync.Mutex
	out   chan<- Message
	seen  *seenSet
	td    *seenSet // taken-down identities, bounded by count only
	stats *counters
}

func newMerger(out chan<- Message, seen, td *seenSet, stats *counters) *merger {
	return &merger{out: out, seen: seen, td: td, stats: stats}
}

// takedown remembers the takedowns of tds (before the messages of the same
// frame or segment are delivered, so that a copy beside its takedown is not
// shown) and delivers a KindTakedown notice for each new one whose message
// was delivered. Notices are never dropped: like gifts they wait for room
// on the channel; takedown returns early only when ctx is done. With no
// channel (Replay) the notices are returned instead.
func (m *merger) takedown(ctx context.Context, tds []TakenDown, now int64) ([]Message, error) {
	if len(tds) == 0 {
		return nil, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var notices []Message
	for _, t := range tds {
		// Every source's decoder (wire) has checked t.
		key := t.Identity()
		if m.td.has(key) {
			continue
		}
		m.td.add(key, now)
		m.stats.takedowns.Add(1)
		if !m.seen.has(key) {
			continue
		}
		if m.out == nil {
			notices = append(notices, takedownNotice(t))
			m.stats.takedownNotices.Add(1)
			continue
		}
		select {
		case m.out <- takedownNotice(t):
			m.stats.takedownNotices.Add(1)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return notices, nil
}

// takenDown reports whether msg was taken down. m.mu is held.
func (m *merger) takenDown(msg *Message) bool {
	if msg.Site || m.td.len() == 0 {
		return false
	}
	return m.td.has(msg.Identity())
}

// deliver puts the new messages of batch on the channel, in batch order. now
// is the server time in ms. A full channel drops barrage and makes gifts and
// system messages wait; deliver returns early only when ctx is done.
func (m *merger) deliver(ctx context.Context, batch []Message, now int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range batch {
		if m.takenDown(&msg) {
			m.stats.takedownSuppressed.Add(1)
			continue
		}
		msg, ok := m.admit(msg, now)
		if !ok {
			m.stats.duplicates.Add(1)
			continue
		}
		if msg.Kind == KindBarrage {
			select {
			case m.out <- msg:
				m.stats.delivered.Add(1)
				m.stats.observeLatency(msg.ID, now)
			default:
				m.stats.droppedBarrage.Add(1)
			}
			continue
		}
		select {
		case m.out <- msg:
			m.stats.delivered.Add(1)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// admit decides whether msg is new, marks what it stands for as seen, and
// returns the form to deliver. No id is ever delivered twice (while
// remembered): a merged gift whose own id was shown is delivered under the
// first of its ids that was not.
func (m *merger) admit(msg Message, now int64) (Message, bool) {
	// Ids are unique per lane, and the lane follows from the kind: the seen
	// set keys on the lane-qualified identity, so a barrage and a gift that
	// share an id are both delivered.
	if len(msg.Merged) == 0 {
		key := msg.Identity()
		if m.seen.has(key) {
			return msg, false
		}
		m.seen.add(key, now)
		return msg, true
	}
	// A merged gift's id is that of one of the gifts it stands for, which
	// may well have been shown from the edge: decide by the whole list.
	own := msg.Identity()
	idSeen := m.seen.has(own)
	var fresh []string
	for _, id := range msg.Merged {
		key := wire.IdentityOf(msg.Kind, id)
		if !m.seen.has(key) {
			fresh = append(fresh, id)
			m.seen.add(key, now)
		}
	}
	m.seen.add(own, now)
	if len(fresh) == 0 {
		return msg, false
	}
	if len(fresh) < len(msg.Merged) {
		// Some of the gifts were shown from the edge. With one gift per id
		// the count can be cut exactly; otherwise showing the whole count
		// again beats losing a gift.
		if int(msg.Count) == len(msg.Merged) {
			msg.Count = uint32(len(fresh))
		}
		msg.Merged = fresh
	}
	if idSeen {
		msg.ID = fresh[0]
	}
	return msg, true
}

// observeLatency counts a barrage message delivered at server time now (ms)
// in its latency bucket. Its id's millisecond is the time the room stream
// appended it, by the clock that also stamps the server's time the client
// estimates: the ingest's acceptance, which is the start of the barrage's
// end-to-end latency (the id's second and the segment's offset say the same,
// less precisely). A malformed id is not counted.
func (s *counters) observeLatency(id string, now int64) {
	ms, _, err := wire.ParseID(id)
	if err != nil {
		return
	}
	s.latency[wire.LatencyBucket(now-ms)].Add(1)
}
