package slicer

// A room's leader state: what it holds read and unwritten, by slot, and
// where the room stands (resume).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// recentSpan is how far back a leader keeps written segments' identities
// to settle redelivered messages without reading their segments back.
const recentSpan = 16 * time.Second

// Lanes by index, for per-lane state.
var lanes = [2]stream.Lane{stream.Barrage, stream.Live}

func laneIndex(k wire.Kind) int {
	if k == wire.KindBarrage {
		return 0
	}
	return 1
}

// roomState is the leader's state of one room. Only the room's goroutine
// touches it.
type roomState struct {
	room string
	// dur is the segment duration in ms; next is the next slot to write on
	// its grid (slot n covers [n·dur, (n+1)·dur) ms).
	dur  int64
	next int64
	seq  uint64
	etag string // manifest ETag last written or read
	// prevDur is the duration before the last change, which took effect at
	// switchMs: a late message older than that was written on prevDur's
	// grid.
	prevDur  int64
	switchMs int64

	// pending holds messages read (or reclaimed) and not yet written, by
	// slot; carry holds never-droppable messages that did not fit their
	// slot, unmerged, oldest first. held is the identities of both, so a
	// message delivered twice (a claim of our own entry, a redelivery) is
	// held once.
	pending  map[int64][]wire.Message
	npending int
	carry    []wire.Message
	held     map[heldKey]struct{}
	// pendingGifts and carryGifts count the gifts among pending and carry:
	// the room's gift backlog (giftBacklog). backlogShown is set while the
	// last backlog published this term was not 0.
	pendingGifts int
	carryGifts   int
	backlogShown bool

	// lastRead is, per lane, the newest id delivered to this leader this
	// term; a trim never passes it, so nothing unread is trimmed.
	lastRead [2]string
	// readUpTo is the store time before the last complete drain of both
	// lanes: every entry stamped before it has been read, so slots that
	// ended by it are complete.
	readUpTo time.Time
	// offset is the store clock minus the local clock, from the last read
	// of the store clock; it schedules the wake-up at a slot's end.
	offset      time.Duration
	offsetKnown bool
	// recent are the identities of the last written segments, by start ms.
	recent map[int64]map[string]bool

	lease *heldLease // this term's lease, shared with the process renewer
	rng   *rand.Rand

	// last is the newest segment written (or found written) this term;
	// resumed is the manifest the term started from.
	last    *wire.Segment
	resumed *wire.Manifest
	// ended is set by resume when the manifest says the room has ended.
	ended bool

	// siteFrom is the store time (unix ms) from which site broadcasts are
	// shown in the room: its opening (siteWindow). handle tells the room's
	// end, which closes the window; nil in tests of the loop's parts.
	siteFrom int64
	handle   *roomHandle
	// siteFailing is set while reads of the site stream fail (logged
	// once, and once recovered).
	siteFailing bool

	// td is the room's takedowns (takedown.go).
	td takedowns
}

// heldKey is a message's identity (lane and id) without building a string:
// hold runs for every message read.
type heldKey struct {
	lane int
	id   string
}

func keyOf(m *wire.Message) heldKey {
	if m.Site {
		return heldKey{siteLane, m.ID}
	}
	return heldKey{laneIndex(m.Kind), m.ID}
}

// timing is the room's schedule under its current duration.
func (s *Slicer) timing(st *roomState) wire.Timing {
	return wire.Timing{SegmentMs: st.dur, PublishDelayMs: s.cfg.PublishDelay.Milliseconds()}
}

// durAt is the duration of the segment that holds unix ms t.
func (st *roomState) durAt(t int64) int64 {
	if st.prevDur != 0 && t < st.switchMs {
		return st.prevDur
	}
	return st.dur
}

// hold files m under its slot — or, when that slot was already written,
// hands back the start (unix ms) of the segment that holds its time — unless
// it is already held or its id is malformed (skip).
func (st *roomState) hold(m wire.Message) (lateStart int64, late, skip bool) {
	ms, _, err := wire.ParseID(m.ID)
	if err != nil {
		return 0, false, true
	}
	// A takedown counts from the moment it is read: every segment written
	// from now on leaves its message out, whichever slot it falls in.
	st.td.note(m.TakenDown)
	k := keyOf(&m)
	if _, dup := st.held[k]; dup {
		return 0, false, true
	}
	if ms < st.next*st.dur {
		d := st.durAt(ms)
		return ms - ms%d, true, false
	}
	slot := ms / st.dur
	st.held[k] = struct{}{}
	st.pending[slot] = append(st.pending[slot], m)
	st.npending++
	if m.Kind == wire.KindGift {
		st.pendingGifts++
	}
	return 0, false, false
}

// holdNext files m under the next slot to write (a message of a written
// slot that its segment lacks).
func (st *roomState) holdNext(m wire.Message) {
	k := keyOf(&m)
	if _, dup := st.held[k]; dup {
		return
	}
	st.held[k] = struct{}{}
	st.pending[st.next] = append(st.pending[st.next], m)
	st.npending++
	if m.Kind == wire.KindGift {
		st.pendingGifts++
	}
}

// holding is how many messages the leader holds read and unwritten:
// pending and carried. At maxPending it stops reading.
func (st *roomState) holding() int { return st.npending + len(st.carry) }

// countGifts is the number of gifts among msgs.
func countGifts(msgs []wire.Message) int {
	n := 0
	for i := range msgs {
		if msgs[i].Kind == wire.KindGift {
			n++
		}
	}
	return n
}

// noteRead advances lane's lastRead to id.
func (st *roomState) noteRead(lane int, id string) {
	if st.lastRead[lane] == "" || wire.CompareIDs(id, st.lastRead[lane]) > 0 {
		st.lastRead[lane] = id
	}
}

// holdAll files freshly read entries of both lanes; those of written slots
// go into late, by the start of the segment that holds them. It returns how
// many went into late.
func (st *roomState) holdAll(barrage, live []wire.Message, late map[int64][]wire.Message) (nlate int) {
	for li, es := range [2][]wire.Message{barrage, live} {
		for _, e := range es {
			st.noteRead(li, e.ID)
			if start, isLate, skip := st.hold(e); isLate && !skip {
				late[start] = append(late[start], e)
				nlate++
			}
		}
	}
	return nlate
}

// remember keeps seg's identities among the recent segments.
func (st *roomState) remember(seg *wire.Segment) {
	start := seg.StartMs()
	st.recent[start] = identities(seg)
	for t := range st.recent {
		if t <= start-recentSpan.Milliseconds() {
			delete(st.recent, t)
		}
	}
}

// complete reports whether the next slot has ended by the store time before
// the last complete drain: every entry it can ever hold has been read.
func (s *Slicer) complete(st *roomState) bool {
	return !st.readUpTo.Before(time.UnixMilli(s.timing(st).End(st.next)))
}

// finished reports whether an ended room is written to its end: every slot
// up to the end plus endGrace, and nothing held — gifts are never dropped,
// so a room with carried gifts goes on until they are out.
func (s *Slicer) finished(st *roomState, endMs int64) bool {
	return st.next*st.dur >= endMs+endGrace.Milliseconds() && st.npending == 0 && len(st.carry) == 0
}

// maybeSwitch applies a change of the room's segment duration at a whole
// second, the one boundary every duration shares: pending messages are
// re-filed on the new grid, and late ones older than the switch are still
// looked up on the old one.
func (s *Slicer) maybeSwitch(ctx context.Context, st *roomState) {
	start := st.next * st.dur
	if start%1000 != 0 {
		return
	}
	dur, _ := s.roomConf(st.room)
	if dur == st.dur {
		return
	}
	s.cfg.Logger.Info("slicer: segment duration changes", "room", st.room, "from_ms", st.dur, "to_ms", dur, "at", start)
	st.prevDur, st.switchMs = st.dur, start
	st.dur, st.next = dur, start/dur
	old := st.pending
	st.pending = make(map[int64][]wire.Message, len(old))
	for _, msgs := range old {
		for _, m := range msgs {
			ms, _, _ := wire.ParseID(m.ID) // held messages have valid ids
			slot := ms / st.dur
			st.pending[slot] = append(st.pending[slot], m)
		}
	}
}

// resume picks up where the manifest says the room stands; a room without
// one starts at the slot it was opened in.
func (s *Slicer) resume(ctx context.Context, room string, opened time.Time) (*roomState, error) {
	st := &roomState{room: room, pending: map[int64][]wire.Message{}, held: map[heldKey]struct{}{}, recent: map[int64]map[string]bool{},
		lease: &heldLease{}, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	now, err := s.cfg.Streams.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("slicer: store time: %w", err)
	}
	dur, _ := s.roomConf(room)
	cur := now.UnixMilli()
	if !opened.IsZero() {
		st.siteFrom = opened.UnixMilli()
	}
	obj, err := s.cfg.Objects.Get(ctx, wire.ManifestKey(room))
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		st.dur, st.seq = dur, 1
		st.next = cur / st.dur
		if o := opened.UnixMilli(); !opened.IsZero() && o < cur && time.Duration(cur-o)*time.Millisecond <= maxCatchUp {
			st.next = o / st.dur
		}
		// A new room shows the broadcasts from its opening, or from its
		// first segment when that is later (opened long ago, never
		// written): never an hour of old ones.
		st.siteFrom = max(st.siteFrom, st.next*st.dur)
	case err != nil:
		return nil, fmt.Errorf("slicer: read manifest: %w", err)
	default:
		m, derr := wire.DecodeManifest(obj.Body)
		if derr != nil {
			return nil, fmt.Errorf("slicer: manifest of %s: %w", room, derr)
		}
		st.etag = obj.ETag
		st.resumed = m
		if m.Ended {
			st.ended = true
			return st, nil
		}
		if err := s.loadTakedowns(ctx, st); err != nil {
			return nil, err
		}
		// Carry on with the duration the room was written with; a change
		// applies at the next whole second (maybeSwitch).
		st.dur = int64(m.Dur)
		st.next, st.seq = m.Slot()+1, m.Seq+1
		if time.Duration(cur-st.next*st.dur)*time.Millisecond > maxCatchUp {
			st.next = cur / st.dur
		}
		s.maybeSwitch(ctx, st)
	}
	return st, nil
}
