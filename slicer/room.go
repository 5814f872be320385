package slicer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"danmaku/internal/audit"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// recentSpan is how far back a leader keeps written segments' identities
// to settle redelivered messages without reading their segments back.
const recentSpan = 16 * time.Second

// Boundary wake-ups. A leader waits until its next slot ends (by the store
// clock, as estimated from its last read of it) plus wakeGuard, so that a
// segment is written within milliseconds of its end.
const wakeGuard = 2 * time.Millisecond

// reclaimEvery is how often a leader claims what a deposed leader left
// pending: rare (a deposed leader is rare), and cheap enough that an idle
// room stays within its few calls a second.
const reclaimEvery = 10 * time.Second

// runRoom contends for room's lease and leads it while held, until the
// room has ended (its manifest says so) or ctx is done.
func (s *Slicer) runRoom(ctx context.Context, room string, opened time.Time, h *roomHandle) {
	for ctx.Err() == nil {
		// The lease runs from before the request: the leader's own idea of
		// when it expires must never be later than Redis's.
		asked := s.cfg.Clock.Now()
		ok, err := s.cfg.Lease.Acquire(ctx, room, s.holder, s.cfg.LeaseTTL)
		if err == nil && ok {
			s.m.leaderFor.Inc()
			err = s.lead(ctx, room, opened, asked, h)
			s.m.leaderFor.Dec()
			_ = s.cfg.Lease.Release(context.WithoutCancel(ctx), room, s.holder)
			if errors.Is(err, errRoomEnded) {
				return
			}
			if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("slicer: lost room", "room", room, "err", err)
			}
		}
		// A standby asks every third of a TTL: an idle room's leader and
		// standby together stay within a few calls a second.
		select {
		case <-ctx.Done():
		case <-time.After(s.cfg.LeaseTTL / 3):
		}
	}
}

// errLostLease ends a leader's term.
var errLostLease = errors.New("slicer: lease lost")

// errRoomEnded ends a room's loop: its last segment and ended manifest are
// written.
var errRoomEnded = errors.New("slicer: room ended")

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

// renew keeps the lease when half its TTL has passed since the last
// renewal (by this loop or the process's renewer, whichever came first).
// Leaders call it between every step that can take long (each read batch,
// each write), so a term never outlives its lease; the renewer keeps it
// while the loop itself is starved of CPU.
func (s *Slicer) renew(ctx context.Context, st *roomState) error {
	if st.lease.lost.Load() {
		return errLostLease
	}
	now := s.cfg.Clock.Now()
	if now.Sub(st.lease.at()) < s.cfg.LeaseTTL/2 {
		return nil
	}
	return s.renewLease(ctx, st.room, st.lease, now)
}

// renewLease renews one held lease, asked at local time asked.
func (s *Slicer) renewLease(ctx context.Context, room string, l *heldLease, asked time.Time) error {
	ok, err := s.cfg.Lease.Acquire(ctx, room, s.holder, s.cfg.LeaseTTL)
	if err != nil || !ok {
		if err == nil {
			l.lost.Store(true) // someone else holds it now
		}
		return errors.Join(errLostLease, err)
	}
	l.renewed.Store(asked.UnixNano())
	return nil
}

// lead writes room's segments while the lease is held; once the room's
// event has ended (h) and everything up to its end is written, it finishes
// the room.
//
// A room costs its leader one store call per slot, busy or idle: it sleeps
// until the slot ends and then drains it with DrainRoom (the store time and
// whatever is new, in one step: what makes the slot complete), in batches of
// readBatch per lane. Reading at the boundary only keeps the calls per
// comment low however busy the room; decoding a slot's worth at once costs
// milliseconds.
func (s *Slicer) lead(ctx context.Context, room string, opened, acquired time.Time, h *roomHandle) error {
	st, err := s.resume(ctx, room, opened)
	if err != nil {
		return err
	}
	if st.ended {
		return errRoomEnded // a predecessor finished it
	}
	st.handle = h
	st.lease = &heldLease{}
	st.lease.renewed.Store(acquired.UnixNano())
	s.hold(room, st.lease)
	defer s.unhold(room)
	defer s.forgetBacklog(room)
	if err := s.reclaim(ctx, st, 0); err != nil {
		return err
	}
	s.cfg.Logger.Info("slicer: leading room", "room", room, "from_slot", st.next, "segment_ms", st.dur, "seq", st.seq)
	var (
		failures    int
		retryAt     time.Time
		lastReclaim = s.cfg.Clock.Now()
	)
	for ctx.Err() == nil {
		if err := s.renew(ctx, st); err != nil {
			return err
		}
		now := s.cfg.Clock.Now()
		again, err := s.advance(ctx, st, now)
		if errors.Is(err, errLostLease) {
			return err
		}
		if err != nil {
			s.cfg.Logger.Warn("slicer: read failed", "room", room, "err", err)
			if !sleepCtx(ctx, s.cfg.Tick) {
				return nil
			}
			continue
		}
		if again {
			continue // more to read at once
		}
		// Entries a deposed leader read after this one took over sit
		// pending under its name; claim them once they idle past two
		// lease lifetimes (it has certainly stopped by then).
		if now.Sub(lastReclaim) >= reclaimEvery {
			lastReclaim = now
			if err := s.reclaim(ctx, st, 2*s.cfg.LeaseTTL); err != nil {
				if errors.Is(err, errLostLease) {
					return err
				}
				s.cfg.Logger.Warn("slicer: reclaim failed", "room", room, "err", err)
			}
		}
		if !now.Before(retryAt) {
			for s.complete(st) {
				if err := s.renew(ctx, st); err != nil {
					return err
				}
				if err := s.writeSlot(ctx, st, st.readUpTo, now); err != nil {
					failures++
					retryAt = now.Add(backoff(failures))
					s.m.writeErrors.Inc()
					if failures == 1 || failures%20 == 0 {
						s.cfg.Logger.Warn("slicer: write failed; will retry in order", "room", room, "slot", st.next, "segment_ms", st.dur, "failures", failures, "err", err)
					}
					break
				}
				if failures > 0 {
					s.cfg.Logger.Info("slicer: writes recovered", "room", room, "failures", failures)
				}
				failures = 0
			}
		}
		s.publishBacklog(ctx, st)
		s.maybeTrimSite(ctx, st.readUpTo)
		if end := h.endMs.Load(); end != 0 && s.finished(st, end) {
			return s.finish(ctx, st)
		}
		if behind := st.readUpTo.Sub(time.UnixMilli(s.timing(st).Due(st.next))); behind > 0 {
			s.m.behind.Set(behind.Seconds())
		} else {
			s.m.behind.Set(0)
		}
		if !sleepCtx(ctx, s.nextWake(st, retryAt)) {
			return nil
		}
	}
	return nil
}

// advance brings st up to the store: it reads what is new (again: a batch
// came back full, read on at once) and, when all is read, moves readUpTo to
// the store time of that read, which makes the slots that ended by it
// complete. While object storage is down, due slots wait as their read
// messages. Past maxPending — pending and carried together — it stops
// reading, so the rest waits in the stream (unread, never lost), and the
// slots go on by the clock instead (passStopped). now is the local time
// the turn began.
func (s *Slicer) advance(ctx context.Context, st *roomState, now time.Time) (again bool, err error) {
	if st.holding() >= s.maxPending {
		s.passStopped(st, now)
		return false, nil
	}
	storeNow, drained, err := s.read(ctx, st)
	if err != nil {
		return false, err
	}
	after := s.cfg.Clock.Now()
	st.offset = storeNow.Sub(now.Add(after.Sub(now) / 2))
	st.offsetKnown = true
	if !drained {
		// Cut short by a full batch (read on) or by maxPending (the
		// next call passes the slots on).
		return true, nil
	}
	st.readUpTo = storeNow
	return false, nil
}

// passStopped keeps slots coming while reading is stopped at maxPending
// and every slot read is written. What is held then — mostly carried
// gifts — leaves only in written slots, and reading resumes only once it
// has, so the slots go on by the store clock (estimated from the last
// read), each taking its budget out of the carry. An unread entry of a
// slot written this way is read later as a late message and goes into the
// next slot (settleLate): late, never lost, never twice. While written
// slots remain (object storage down), nothing changes: they go first.
func (s *Slicer) passStopped(st *roomState, now time.Time) {
	if s.complete(st) || !st.offsetKnown {
		return
	}
	if t := now.Add(st.offset); t.After(st.readUpTo) {
		st.readUpTo = t
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

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// nextWake is how long to sleep: until the next slot ends by the store
// clock (plus wakeGuard), at most a second, so that an ended event and a
// failed write's retry are noticed.
func (s *Slicer) nextWake(st *roomState, retryAt time.Time) time.Duration {
	now := s.cfg.Clock.Now()
	wait := time.Second
	if now.Before(retryAt) {
		return min(wait, retryAt.Sub(now))
	}
	if !st.offsetKnown {
		return s.cfg.Tick
	}
	d := time.UnixMilli(s.timing(st).End(st.next)).Sub(now.Add(st.offset)) + wakeGuard
	switch {
	case d > 0:
		return min(d, wait)
	case d > -time.Second:
		return 0 // its end has just passed: drain now
	}
	return s.cfg.Tick // far past (a fake clock in tests): poll
}

// finished reports whether an ended room is written to its end: every slot
// up to the end plus endGrace, and nothing held — gifts are never dropped,
// so a room with carried gifts goes on until they are out.
func (s *Slicer) finished(st *roomState, endMs int64) bool {
	return st.next*st.dur >= endMs+endGrace.Milliseconds() && st.npending == 0 && len(st.carry) == 0
}

// finish closes a room whose event has ended: the manifest is marked ended
// (clients stop polling; a standby that takes the lease stops too), and the
// room's streams leave the registry and expire after the retention. The
// caller releases the lease; the room's loop and state go with it.
func (s *Slicer) finish(ctx context.Context, st *roomState) error {
	var m *wire.Manifest
	switch {
	case st.last != nil:
		m = wire.ManifestFor(st.last)
	case st.resumed != nil:
		cp := *st.resumed
		m = &cp
	}
	if m != nil {
		m.Ended = true
		if err := s.publishManifest(ctx, st, m); err != nil {
			return err
		}
	}
	if err := s.cfg.Streams.CloseRoom(ctx, st.room, s.cfg.Retention); err != nil {
		s.cfg.Logger.Warn("slicer: close room", "room", st.room, "err", err)
	}
	// The room's group on the site stream would otherwise stay for good
	// (the site stream outlives every room). A room that opens again later
	// starts a new one, skipping what precedes its opening.
	if err := s.cfg.Streams.DropGroup(ctx, stream.SiteKey, s.siteGroup(st.room)); err != nil {
		s.cfg.Logger.Warn("slicer: drop the room's site group", "room", st.room, "err", err)
	}
	s.cfg.Logger.Info("slicer: room ended", "room", st.room, "last_seq", st.seq-1)
	return errRoomEnded
}

// complete reports whether the next slot has ended by the store time before
// the last complete drain: every entry it can ever hold has been read.
func (s *Slicer) complete(st *roomState) bool {
	return !st.readUpTo.Before(time.UnixMilli(s.timing(st).End(st.next)))
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

// read drains what the group has for both lanes into pending, in store
// calls that each read the store time first (DrainRoom). It returns the
// time of the last call; drained is true when that call found both lanes
// read to their end (not cut short by a full batch or maxPending), so every
// entry stamped before it is held. Messages of slots already written go
// through settleLate.
func (s *Slicer) read(ctx context.Context, st *roomState) (now time.Time, drained bool, err error) {
	late := map[int64][]wire.Message{}
	defer func() {
		if len(late) > 0 {
			if serr := s.settleLate(ctx, st, late); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	nlate := 0 // held once settleLate has run: they count against maxPending too
	for {
		if st.holding()+nlate >= s.maxPending {
			return now, false, nil
		}
		if err := s.renew(ctx, st); err != nil {
			return now, false, err
		}
		var b, l []wire.Message
		now, b, l, err = s.cfg.Streams.DrainRoom(ctx, st.room, s.cfg.Group, s.cfg.NodeID, readBatch)
		if err != nil {
			return now, false, err
		}
		nlate += st.holdAll(b, l, late)
		if len(b) < readBatch && len(l) < readBatch {
			// The site stream after the drain, so that its entries
			// stamped before now are delivered too; cut short (at
			// maxPending), the room is not drained either.
			drained, err := s.readSite(ctx, st, late, &nlate)
			if errors.Is(err, errLostLease) {
				return now, false, err
			}
			s.noteSiteRead(st, err)
			// A failed site read holds nothing up: the room's own slots
			// go on, and the broadcasts come in late (settleLate), once.
			return now, drained || err != nil, nil
		}
	}
}

// reclaim takes over the messages pending in the group for longer than
// minIdle (0 on takeover: everything its predecessor read and did not
// settle). Messages already held are skipped; messages of seconds already
// written go through settleLate.
func (s *Slicer) reclaim(ctx context.Context, st *roomState, minIdle time.Duration) error {
	late := map[int64][]wire.Message{}
	n := 0
	for li, lane := range lanes {
		if err := s.renew(ctx, st); err != nil {
			return err
		}
		// One call per lane: the store follows the claim cursor to the end
		// (count 0). Calling again from the start would claim the same
		// entries again, since they qualify at any idle time ≥ minIdle.
		es, err := s.cfg.Streams.Claim(ctx, stream.Key{Room: st.room, Lane: lane}, s.cfg.Group, s.cfg.NodeID, minIdle, 0)
		if err != nil {
			return fmt.Errorf("slicer: reclaim %s: %w", st.room, err)
		}
		for _, e := range es {
			st.noteRead(li, e.ID)
			if start, isLate, skip := st.hold(e); isLate && !skip {
				late[start] = append(late[start], e)
			}
		}
		n += len(es)
	}
	// The room's group on the site stream: what a deposed leader read and
	// did not settle there (settleLate checks it against the segments).
	if err := s.renew(ctx, st); err != nil {
		return err
	}
	// A failure holds nothing up: they stay pending and idle on, and the
	// next reclaim (reclaimEvery) claims them.
	es, err := s.cfg.Streams.Claim(ctx, stream.SiteKey, s.siteGroup(st.room), s.cfg.NodeID, minIdle, 0)
	s.noteSiteRead(st, err)
	s.takeSite(ctx, st, es, late)
	n += len(es)
	if minIdle > 0 && n > 0 {
		s.cfg.Logger.Info("slicer: claimed idle messages", "room", st.room, "count", n)
	}
	s.m.reclaimed.Add(float64(n))
	return s.settleLate(ctx, st, late)
}

// settleLate handles messages whose slot was already written (a takeover,
// a redelivery, a message read after its slot was due), keyed by the start
// (unix ms) of the segment that holds their time: that segment is the
// truth. What it holds is settled now; what it lacks goes into the next
// slot. So a message is neither lost nor shown twice.
func (s *Slicer) settleLate(ctx context.Context, st *roomState, late map[int64][]wire.Message) error {
	for start, msgs := range late {
		has, ok := st.recent[start]
		if !ok {
			d := st.durAt(start)
			seg, err := s.readExisting(ctx, st.room, d, start/d)
			switch {
			case errors.Is(err, objstore.ErrNotFound):
				// Never written (the room started after it): show it now.
			case err != nil:
				// Unknown: leave the messages pending in the group; the
				// next idle claim brings them back.
				return err
			default:
				has = identities(seg)
			}
		}
		var settled []wire.Message
		for _, m := range msgs {
			if has[m.Identity()] {
				settled = append(settled, m)
				continue
			}
			st.holdNext(m)
		}
		s.ack(ctx, st.room, settled)
	}
	return nil
}

func (s *Slicer) queueOf(m *wire.Message) Queue {
	switch m.Kind {
	case wire.KindSystem:
		return QueueSystem
	case wire.KindGift:
		// Saturating value × count: an absurd value is high, never negative.
		v, c := m.Value, int64(max(m.Count, 1))
		if v >= s.cfg.HighGiftValue || (v > 0 && c > math.MaxInt64/v) || v*c >= s.cfg.HighGiftValue {
			return QueueHighGift
		}
		return QueueLowGift
	}
	return QueueBarrage
}

// writeSlot builds, writes and settles st.next. Carried messages come
// first, then the slot's own in id order; identical gifts merge; the
// budget is allocated by queue. Carry and acknowledgement work on the
// original (unmerged) messages, so a merged gift is never settled for a part
// that no segment holds. storeNow and localNow are the store time read
// before the drain and the local time it was read at.
func (s *Slicer) writeSlot(ctx context.Context, st *roomState, storeNow, localNow time.Time) error {
	slot := st.next
	fresh := sortByID(st.pending[slot])
	inputs := make([]wire.Message, 0, len(st.carry)+len(fresh))
	inputs = append(append(inputs, st.carry...), fresh...)

	var (
		queues [numQueues][]wire.Message
		gifts  []wire.Message
		site   []wire.Message // site broadcasts, oldest first
		byID   = map[string]wire.Message{}
	)
	for _, m := range inputs {
		if m.Site {
			site = append(site, m)
			continue
		}
		if m.Kind == wire.KindGift {
			gifts = append(gifts, m)
			byID[m.Identity()] = m
			continue
		}
		q := s.queueOf(&m)
		queues[q] = append(queues[q], m)
	}
	for _, g := range mergeGifts(gifts) {
		q := s.queueOf(&g)
		queues[q] = append(queues[q], g)
	}
	// originals lists what a (possibly merged) queue message stands for.
	originals := func(m wire.Message) []wire.Message {
		if len(m.Merged) == 0 {
			return []wire.Message{m}
		}
		out := make([]wire.Message, 0, len(m.Merged))
		for _, id := range m.Merged {
			out = append(out, byID[wire.IdentityOf(m.Kind, id)])
		}
		return out
	}

	_, b := s.roomConf(st.room)
	budget := slotBudget(b.budget, st.dur)
	// Site broadcasts join the system queue, after the room's own system
	// messages, up to their quota or what the room's own messages leave of
	// the budget, whichever is more (siteQuota); the rest is carried.
	own := 0
	for q := range numQueues {
		own += len(queues[q])
	}
	nsite := min(len(site), max(siteQuota(budget, b.shares), budget-own))
	queues[QueueSystem] = append(queues[QueueSystem], site[:nsite]...)
	siteCarried := site[nsite:]
	var need [numQueues]int
	for q := range numQueues {
		need[q] = len(queues[q])
	}
	got := allocate(budget, b.shares, need)

	var (
		out     []wire.Message
		carry   []wire.Message
		settled []wire.Message
		sampled int
		left    []wire.Message // sampled away, for the audit trail
	)
	for q := range numQueues {
		msgs := queues[q]
		if q.droppable() {
			kept, out := sampleOut(msgs, got[q], st.rng)
			sampled += len(out)
			if s.cfg.Audit != nil {
				left = append(left, out...)
			}
			settled = append(settled, msgs...)
			msgs = kept
		} else {
			for _, m := range msgs[got[q]:] {
				carry = append(carry, originals(m)...)
			}
			msgs = msgs[:got[q]]
			for _, m := range msgs {
				settled = append(settled, originals(m)...)
			}
		}
		for _, m := range msgs {
			out = append(out, wire.Slim(m))
		}
	}
	carry = append(carry, siteCarried...)
	sort.SliceStable(out, func(i, j int) bool { return wire.CompareIDs(out[i].ID, out[j].ID) < 0 })

	seg := wire.NewSegment(st.room, st.dur, slot, st.seq)
	seg.Messages = out
	body, err := wire.EncodeSegment(seg)
	if err != nil {
		return err
	}
	start := s.cfg.Clock.Now()
	_, err = s.cfg.Objects.Put(ctx, wire.SlotKey(st.room, st.dur, slot), body, objstore.PutOptions{
		ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl, IfNoneMatch: true,
	})
	switch {
	case errors.Is(err, objstore.ErrPrecondition):
		// A predecessor wrote this slot. Its segment is the truth: keep its
		// seq; settle what it holds and carry what it lacks (never-droppable
		// only), message by original message.
		existing, rerr := s.readExisting(ctx, st.room, st.dur, slot)
		if rerr != nil {
			return rerr
		}
		s.m.written.WithLabelValues("existed").Inc()
		has := identities(existing)
		carry, settled = nil, nil
		for _, m := range inputs {
			switch {
			case has[m.Identity()]:
				settled = append(settled, m)
			case m.Kind == wire.KindBarrage:
				s.m.drops.WithLabelValues("superseded").Inc()
				settled = append(settled, m)
			default:
				carry = append(carry, m)
			}
		}
		seg = existing
	case err != nil:
		return fmt.Errorf("slicer: put segment %s/%d: %w", st.room, slot, err)
	default:
		done := s.cfg.Clock.Now()
		s.m.written.WithLabelValues("written").Inc()
		s.m.bytes.Observe(float64(len(body)))
		s.m.latency.Observe(done.Sub(start).Seconds())
		// The store time now, estimated from the drain's reading of it.
		t := s.timing(st)
		written := storeNow.Add(done.Sub(localNow))
		s.m.ready.Observe(written.Sub(time.UnixMilli(t.End(slot))).Seconds())
		if written.After(time.UnixMilli(t.Due(slot))) {
			s.m.late.Inc()
		}
		for q := range numQueues {
			s.m.perQueue.WithLabelValues(Queue(q).String()).Add(float64(got[q]))
		}
		if n := countSite(out); n > 0 {
			s.m.site.WithLabelValues("written").Add(float64(n))
		}
		if sampled > 0 {
			s.m.drops.WithLabelValues("sampled").Add(float64(sampled))
		}
		s.auditSampled(st.room, left, done)
	}

	// The segment is durable: acknowledge what it settled (written or
	// sampled away). Carried messages stay pending, so a successor leader
	// reclaims them.
	s.ack(ctx, st.room, settled)
	for i := range settled {
		delete(st.held, keyOf(&settled[i]))
	}
	st.carry = carry
	st.carryGifts = countGifts(carry)
	st.npending -= len(fresh)
	st.pendingGifts -= countGifts(fresh)
	delete(st.pending, slot)
	st.seq = seg.Seq + 1
	st.next = slot + 1
	st.remember(seg)
	st.last = seg
	s.trim(ctx, st)
	if err := s.publishManifest(ctx, st, wire.ManifestFor(seg)); err != nil {
		s.cfg.Logger.Warn("slicer: manifest write failed", "room", st.room, "err", err)
	}
	s.m.lag.Set(storeNow.Sub(time.UnixMilli(s.timing(st).Due(slot))).Seconds())
	s.m.carried.Set(float64(len(carry)))
	s.m.siteCarried.Set(float64(countSite(carry)))
	s.maybeSwitch(ctx, st)
	return nil
}

// slotBudget is the share of a per-second budget that one slot of dur ms
// gets: a viewer reads as much per second whatever the segment length. At
// least 1, so a short slot still carries a gift.
func slotBudget(perSecond int, dur int64) int {
	return max(1, int((int64(perSecond)*dur+500)/1000))
}

// sortByID orders msgs by id, parsing each id once (a comparator that parses
// both ids costs O(n log n) parses and moves whole messages around).
func sortByID(msgs []wire.Message) []wire.Message {
	type key struct {
		ms  int64
		seq uint64
		i   int
	}
	keys := make([]key, len(msgs))
	sorted := true
	for i := range msgs {
		ms, seq, _ := wire.ParseID(msgs[i].ID)
		keys[i] = key{ms, seq, i}
		if i > 0 && (ms < keys[i-1].ms || ms == keys[i-1].ms && seq < keys[i-1].seq) {
			sorted = false
		}
	}
	if sorted {
		return msgs
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].ms != keys[b].ms {
			return keys[a].ms < keys[b].ms
		}
		return keys[a].seq < keys[b].seq
	})
	out := make([]wire.Message, len(msgs))
	for i, k := range keys {
		out[i] = msgs[k.i]
	}
	return out
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

// ack acknowledges msgs on their lanes. Messages are originals, as read
// from the stream.
func (s *Slicer) ack(ctx context.Context, room string, msgs []wire.Message) {
	var ids [2][]string
	var site []string
	for _, m := range msgs {
		if m.Site {
			site = append(site, m.ID)
			continue
		}
		i := laneIndex(m.Kind)
		ids[i] = append(ids[i], m.ID)
	}
	if len(site) > 0 {
		if err := s.cfg.Streams.Ack(ctx, stream.SiteKey, s.siteGroup(room), site...); err != nil {
			// As below: claimed again later, found in its segment.
			s.cfg.Logger.Warn("slicer: ack of site messages failed", "room", room, "err", err)
		}
	}
	for i, lane := range lanes {
		if len(ids[i]) == 0 {
			continue
		}
		if err := s.cfg.Streams.Ack(ctx, stream.Key{Room: room, Lane: lane}, s.cfg.Group, ids[i]...); err != nil {
			// Still pending: a later idle claim brings the messages back
			// and settleLate finds them in their segment.
			s.cfg.Logger.Warn("slicer: ack failed", "room", room, "err", err)
		}
	}
}

// trim removes stream entries behind what is durably settled, per lane: the
// floor starts at the next unwritten second and is lowered by every message
// still held (pending or carried), by the oldest entry pending in the group
// under any consumer (a deposed leader's reads), and it never passes the
// newest entry this leader has read. A lane read nothing this term is not
// trimmed.
func (s *Slicer) trim(ctx context.Context, st *roomState) {
	var floors [2]string
	for i := range floors {
		if st.lastRead[i] == "" {
			continue
		}
		floors[i] = wire.FormatID(st.next*st.dur, 0)
		if ms, seq, err := wire.ParseID(st.lastRead[i]); err == nil {
			if after := wire.FormatID(ms, seq+1); wire.CompareIDs(after, floors[i]) < 0 {
				floors[i] = after
			}
		}
	}
	lower := func(m *wire.Message) {
		if m.Site {
			return // of the site stream, trimmed by time (maybeTrimSite)
		}
		i := laneIndex(m.Kind)
		if floors[i] != "" && wire.CompareIDs(m.ID, floors[i]) < 0 {
			floors[i] = m.ID
		}
	}
	for i := range st.carry {
		lower(&st.carry[i])
	}
	for _, msgs := range st.pending {
		for i := range msgs {
			lower(&msgs[i])
		}
	}
	for i, lane := range lanes {
		if floors[i] == "" {
			continue
		}
		key := stream.Key{Room: st.room, Lane: lane}
		p, ok, err := s.cfg.Streams.PendingFloor(ctx, key, s.cfg.Group)
		if err != nil {
			continue // unknown: trim next time
		}
		if ok && wire.CompareIDs(p, floors[i]) < 0 {
			floors[i] = p
		}
		_ = s.cfg.Streams.TrimBefore(ctx, key, floors[i])
	}
}

// backoff is the wait before the n-th retry of a failed write: 100 ms
// doubling to 2 s. Seconds are written in order, so a retry holds back the
// seconds after it; a short cap keeps the catch-up prompt once S3 is back.
func backoff(n int) time.Duration {
	d := 100 * time.Millisecond << min(n-1, 5)
	return min(d, 2*time.Second)
}

// identities returns the identities a segment holds, merged ones included.
func identities(seg *wire.Segment) map[string]bool {
	has := make(map[string]bool, len(seg.Messages))
	for _, m := range seg.Messages {
		has[m.Identity()] = true
		for _, id := range m.Merged {
			has[wire.IdentityOf(m.Kind, id)] = true
		}
	}
	return has
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

func (s *Slicer) readExisting(ctx context.Context, room string, dur, slot int64) (*wire.Segment, error) {
	obj, err := s.cfg.Objects.Get(ctx, wire.SlotKey(room, dur, slot))
	if err != nil {
		return nil, fmt.Errorf("slicer: read existing segment %s/%d: %w", room, slot, err)
	}
	seg, err := wire.DecodeSegment(obj.Body)
	if err != nil {
		return nil, fmt.Errorf("slicer: existing segment %s/%d: %w", room, slot, err)
	}
	return seg, nil
}

// publishManifest moves the manifest forward to m, never back: a manifest
// already at m's segment or later is left alone, unless m marks the room
// ended and it does not yet.
func (s *Slicer) publishManifest(ctx context.Context, st *roomState, m *wire.Manifest) error {
	body, err := wire.EncodeManifest(m)
	if err != nil {
		return err
	}
	for attempt := 0; attempt < 3; attempt++ {
		opts := objstore.PutOptions{ContentType: wire.ManifestContentType, CacheControl: wire.ManifestCacheControl}
		if st.etag == "" {
			opts.IfNoneMatch = true
		} else {
			opts.IfMatch = st.etag
		}
		etag, err := s.cfg.Objects.Put(ctx, wire.ManifestKey(st.room), body, opts)
		if err == nil {
			st.etag = etag
			return nil
		}
		if !errors.Is(err, objstore.ErrPrecondition) {
			return err
		}
		// Someone else moved it: re-read, and only write if we are ahead.
		obj, gerr := s.cfg.Objects.Get(ctx, wire.ManifestKey(st.room))
		if gerr != nil {
			if errors.Is(gerr, objstore.ErrNotFound) {
				st.etag = ""
				continue
			}
			return gerr
		}
		st.etag = obj.ETag
		cur, derr := wire.DecodeManifest(obj.Body)
		if derr == nil && (cur.Ended || cur.StartMs() > m.StartMs() || cur.StartMs() == m.StartMs() && !m.Ended) {
			return nil
		}
	}
	return fmt.Errorf("slicer: manifest of %s moved three times under this writer", st.room)
}

// auditSampled records the comments of room that the budget left out of a
// written segment: decision sampled, with their stream ids (the ingest
// recorded each as stored). Text is the comment as stored — masked, if the
// word filter masked it.
func (s *Slicer) auditSampled(room string, msgs []wire.Message, at time.Time) {
	if s.cfg.Audit == nil {
		return
	}
	for i := range msgs {
		m := &msgs[i]
		s.cfg.Audit.Record(audit.Record{At: at, Room: room, User: m.User, Text: m.Text, Decision: audit.Sampled, ID: m.ID})
	}
}
