package slicer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/internal/wire"
)

// recentSeconds is how many written seconds' identities a leader keeps to
// settle redelivered messages without reading their segments back.
const recentSeconds = 16

// runRoom contends for room's lease and leads it while held.
func (s *Slicer) runRoom(ctx context.Context, room string, opened time.Time) {
	for ctx.Err() == nil {
		// The lease runs from before the request: the leader's own idea of
		// when it expires must never be later than Redis's.
		asked := s.cfg.Clock.Now()
		ok, err := s.cfg.Lease.Acquire(ctx, room, s.holder, s.cfg.LeaseTTL)
		if err == nil && ok {
			s.m.leaderFor.Inc()
			err = s.lead(ctx, room, opened, asked)
			s.m.leaderFor.Dec()
			_ = s.cfg.Lease.Release(context.WithoutCancel(ctx), room, s.holder)
			if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("slicer: lost room", "room", room, "err", err)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.cfg.LeaseTTL / 4):
		}
	}
}

// errLostLease ends a leader's term.
var errLostLease = errors.New("slicer: lease lost")

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
	next int64 // next second to write
	seq  uint64
	etag string // manifest ETag last written or read

	// pending holds messages read (or reclaimed) and not yet written, by
	// second; carry holds never-droppable messages that did not fit their
	// second, unmerged, oldest first. held is the identities of both, so a
	// message delivered twice (a claim of our own entry, a redelivery) is
	// held once.
	pending  map[int64][]wire.Message
	npending int
	carry    []wire.Message
	held     map[heldKey]struct{}

	// lastRead is, per lane, the newest id delivered to this leader this
	// term; a trim never passes it, so nothing unread is trimmed.
	lastRead [2]string
	// readUpTo is the store time before the last complete drain of both
	// lanes: every entry stamped before it has been read, so seconds due by
	// it are complete.
	readUpTo time.Time
	// recent are the identities of the last written seconds.
	recent map[int64]map[string]bool

	renewed time.Time // when the last successful lease request was sent
	rng     *rand.Rand
}

// heldKey is a message's identity (lane and id) without building a string:
// hold runs for every message read.
type heldKey struct {
	lane int
	id   string
}

func keyOf(m *wire.Message) heldKey { return heldKey{laneIndex(m.Kind), m.ID} }

// hold files m under second sec — or hands it back when sec was already
// written (late) — unless it is already held.
func (st *roomState) hold(sec int64, m wire.Message) (late bool) {
	k := keyOf(&m)
	if _, dup := st.held[k]; dup {
		return false
	}
	if sec < st.next {
		return true
	}
	st.held[k] = struct{}{}
	st.pending[sec] = append(st.pending[sec], m)
	st.npending++
	return false
}

// noteRead advances lane's lastRead to id.
func (st *roomState) noteRead(lane int, id string) {
	if st.lastRead[lane] == "" || wire.CompareIDs(id, st.lastRead[lane]) > 0 {
		st.lastRead[lane] = id
	}
}

// renew keeps the lease when a quarter of its TTL has passed since the last
// renewal. Leaders call it between every step that can take long (each read
// batch, each write), so a term never outlives its lease.
func (s *Slicer) renew(ctx context.Context, st *roomState) error {
	now := s.cfg.Clock.Now()
	if now.Sub(st.renewed) < s.cfg.LeaseTTL/4 {
		return nil
	}
	ok, err := s.cfg.Lease.Acquire(ctx, st.room, s.holder, s.cfg.LeaseTTL)
	if err != nil || !ok {
		return errors.Join(errLostLease, err)
	}
	st.renewed = now
	return nil
}

// lead writes room's seconds while the lease is held.
func (s *Slicer) lead(ctx context.Context, room string, opened, acquired time.Time) error {
	st, err := s.resume(ctx, room, opened)
	if err != nil {
		return err
	}
	st.renewed = acquired
	if err := s.reclaim(ctx, st, 0); err != nil {
		return err
	}
	s.cfg.Logger.Info("slicer: leading room", "room", room, "from_second", st.next, "seq", st.seq)
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	var (
		failures     int
		retryAt      time.Time
		lastReclaim  = s.cfg.Clock.Now()
		reclaimEvery = s.cfg.LeaseTTL
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if err := s.renew(ctx, st); err != nil {
			return err
		}
		now := s.cfg.Clock.Now()
		// The store time is taken before reading: every entry stamped before
		// it is in the stream when the read starts, so a drain makes every
		// second due by it complete.
		storeNow, err := s.cfg.Streams.Now(ctx)
		if err != nil {
			continue
		}
		// While object storage is down, due seconds wait as their read
		// messages. Past maxPending the slicer stops reading, so the rest
		// waits in the stream (unread, never lost), and seconds past what
		// was read are not written.
		if st.npending < maxPending {
			drained, err := s.read(ctx, st)
			if errors.Is(err, errLostLease) {
				return err
			}
			if err != nil {
				s.cfg.Logger.Warn("slicer: read failed", "room", room, "err", err)
				continue
			}
			if drained {
				st.readUpTo = storeNow
			}
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
		if now.Before(retryAt) {
			continue
		}
		for s.due(st.next, st.readUpTo) {
			if err := s.renew(ctx, st); err != nil {
				return err
			}
			if err := s.writeSecond(ctx, st, storeNow); err != nil {
				failures++
				retryAt = now.Add(backoff(failures))
				s.m.writeErrors.Inc()
				if failures == 1 || failures%20 == 0 {
					s.cfg.Logger.Warn("slicer: write failed; will retry in order", "room", room, "second", st.next, "failures", failures, "err", err)
				}
				break
			}
			if failures > 0 {
				s.cfg.Logger.Info("slicer: writes recovered", "room", room, "failures", failures)
			}
			failures = 0
		}
		if behind := storeNow.Sub(time.UnixMilli((st.next + 1) * 1000).Add(s.cfg.PublishDelay)); behind > 0 {
			s.m.behind.Set(behind.Seconds())
		} else {
			s.m.behind.Set(0)
		}
	}
}

// read drains what the group has for both lanes into pending. drained is
// true when both lanes were read to their end (not cut short by maxPending).
// Messages of seconds already written go through settleLate.
func (s *Slicer) read(ctx context.Context, st *roomState) (drained bool, err error) {
	late := map[int64][]wire.Message{}
	defer func() {
		if len(late) > 0 {
			if serr := s.settleLate(ctx, st, late); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	for li, lane := range lanes {
		key := stream.Key{Room: st.room, Lane: lane}
		for {
			if st.npending >= maxPending {
				return false, nil
			}
			if err := s.renew(ctx, st); err != nil {
				return false, err
			}
			es, err := s.cfg.Streams.ReadGroup(ctx, key, s.cfg.Group, s.cfg.NodeID, readBatch, 0)
			if err != nil {
				return false, err
			}
			for _, e := range es {
				st.noteRead(li, e.ID)
				sec, err := wire.SecondOf(e.ID)
				if err != nil {
					continue
				}
				if st.hold(sec, e) {
					late[sec] = append(late[sec], e)
				}
			}
			if len(es) < readBatch {
				break
			}
		}
	}
	return true, nil
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
			sec, err := wire.SecondOf(e.ID)
			if err != nil {
				continue
			}
			if st.hold(sec, e) {
				late[sec] = append(late[sec], e)
			}
		}
		n += len(es)
	}
	if minIdle > 0 && n > 0 {
		s.cfg.Logger.Info("slicer: claimed idle messages", "room", st.room, "count", n)
	}
	s.m.reclaimed.Add(float64(n))
	return s.settleLate(ctx, st, late)
}

// settleLate handles messages whose second was already written (a takeover,
// a redelivery, a message read after its second was due): the segment of
// that second is the truth. What it holds is settled now; what it lacks goes
// into the next second. So a message is neither lost nor shown twice.
func (s *Slicer) settleLate(ctx context.Context, st *roomState, late map[int64][]wire.Message) error {
	for sec, msgs := range late {
		has, ok := st.recent[sec]
		if !ok {
			seg, err := s.readExisting(ctx, st.room, sec)
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
			st.hold(st.next, m)
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

// writeSecond builds, writes and settles st.next. Carried messages come
// first, then the second's own in id order; identical gifts merge; the
// budget is allocated by queue. Carry and acknowledgement work on the
// original (unmerged) messages, so a merged gift is never settled for a part
// that no segment holds.
func (s *Slicer) writeSecond(ctx context.Context, st *roomState, storeNow time.Time) error {
	sec := st.next
	fresh := sortByID(st.pending[sec])
	inputs := make([]wire.Message, 0, len(st.carry)+len(fresh))
	inputs = append(append(inputs, st.carry...), fresh...)

	var (
		queues [numQueues][]wire.Message
		gifts  []wire.Message
		byID   = map[string]wire.Message{}
	)
	for _, m := range inputs {
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

	b := s.budget.Load()
	var need [numQueues]int
	for q := range numQueues {
		need[q] = len(queues[q])
	}
	got := allocate(b.budget, b.shares, need)

	var (
		out     []wire.Message
		carry   []wire.Message
		settled []wire.Message
		sampled int
	)
	for q := range numQueues {
		msgs := queues[q]
		if q.droppable() {
			kept := sample(msgs, got[q], st.rng)
			sampled += len(msgs) - len(kept)
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
	sort.SliceStable(out, func(i, j int) bool { return wire.CompareIDs(out[i].ID, out[j].ID) < 0 })

	seg := &wire.Segment{V: wire.Version, Room: st.room, Second: sec, Seq: st.seq, Dur: wire.SegmentDuration, Messages: out}
	body, err := wire.EncodeSegment(seg)
	if err != nil {
		return err
	}
	start := s.cfg.Clock.Now()
	_, err = s.cfg.Objects.Put(ctx, wire.SegmentKey(st.room, sec), body, objstore.PutOptions{
		ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl, IfNoneMatch: true,
	})
	switch {
	case errors.Is(err, objstore.ErrPrecondition):
		// A predecessor wrote this second. Its segment is the truth: keep its
		// seq; settle what it holds and carry what it lacks (never-droppable
		// only), message by original message.
		existing, rerr := s.readExisting(ctx, st.room, sec)
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
		return fmt.Errorf("slicer: put segment %s/%d: %w", st.room, sec, err)
	default:
		s.m.written.WithLabelValues("written").Inc()
		s.m.bytes.Observe(float64(len(body)))
		s.m.latency.Observe(s.cfg.Clock.Now().Sub(start).Seconds())
		for q := range numQueues {
			s.m.perQueue.WithLabelValues(Queue(q).String()).Add(float64(got[q]))
		}
		if sampled > 0 {
			s.m.drops.WithLabelValues("sampled").Add(float64(sampled))
		}
	}

	// The segment is durable: acknowledge what it settled (written or
	// sampled away). Carried messages stay pending, so a successor leader
	// reclaims them.
	s.ack(ctx, st.room, settled)
	for i := range settled {
		delete(st.held, keyOf(&settled[i]))
	}
	st.carry = carry
	st.npending -= len(fresh)
	delete(st.pending, sec)
	st.seq = seg.Seq + 1
	st.next = sec + 1
	st.remember(seg)
	s.trim(ctx, st)
	s.publishManifest(ctx, st, seg)
	due := time.UnixMilli((sec + 1) * 1000).Add(s.cfg.PublishDelay)
	s.m.lag.Set(storeNow.Sub(due).Seconds())
	s.m.carried.Set(float64(len(carry)))
	return nil
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

// remember keeps seg's identities among the recent seconds.
func (st *roomState) remember(seg *wire.Segment) {
	st.recent[seg.Second] = identities(seg)
	for sec := range st.recent {
		if sec <= seg.Second-recentSeconds {
			delete(st.recent, sec)
		}
	}
}

// ack acknowledges msgs on their lanes. Messages are originals, as read
// from the stream.
func (s *Slicer) ack(ctx context.Context, room string, msgs []wire.Message) {
	var ids [2][]string
	for _, m := range msgs {
		i := laneIndex(m.Kind)
		ids[i] = append(ids[i], m.ID)
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
		floors[i] = wire.FormatID(st.next*1000, 0)
		if ms, seq, err := wire.ParseID(st.lastRead[i]); err == nil {
			if after := wire.FormatID(ms, seq+1); wire.CompareIDs(after, floors[i]) < 0 {
				floors[i] = after
			}
		}
	}
	lower := func(m *wire.Message) {
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

func (s *Slicer) due(second int64, storeNow time.Time) bool {
	return !storeNow.Before(time.UnixMilli((second + 1) * 1000).Add(s.cfg.PublishDelay))
}

// resume picks up where the manifest says the room stands; a room without
// one starts at the second it was opened.
func (s *Slicer) resume(ctx context.Context, room string, opened time.Time) (*roomState, error) {
	st := &roomState{room: room, pending: map[int64][]wire.Message{}, held: map[heldKey]struct{}{}, recent: map[int64]map[string]bool{}, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	now, err := s.cfg.Streams.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("slicer: store time: %w", err)
	}
	cur := now.Unix()
	obj, err := s.cfg.Objects.Get(ctx, wire.ManifestKey(room))
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		st.next, st.seq = cur, 1
		if o := opened.Unix(); !opened.IsZero() && o < cur && cur-o <= maxCatchUp {
			st.next = o
		}
	case err != nil:
		return nil, fmt.Errorf("slicer: read manifest: %w", err)
	default:
		m, derr := wire.DecodeManifest(obj.Body)
		if derr != nil {
			return nil, fmt.Errorf("slicer: manifest of %s: %w", room, derr)
		}
		st.etag = obj.ETag
		st.next, st.seq = m.Second+1, m.Seq+1
		if cur-st.next > maxCatchUp {
			st.next = cur
		}
	}
	return st, nil
}

func (s *Slicer) readExisting(ctx context.Context, room string, sec int64) (*wire.Segment, error) {
	obj, err := s.cfg.Objects.Get(ctx, wire.SegmentKey(room, sec))
	if err != nil {
		return nil, fmt.Errorf("slicer: read existing segment %s/%d: %w", room, sec, err)
	}
	seg, err := wire.DecodeSegment(obj.Body)
	if err != nil {
		return nil, fmt.Errorf("slicer: existing segment %s/%d: %w", room, sec, err)
	}
	return seg, nil
}

// publishManifest moves the manifest forward to seg, never back.
func (s *Slicer) publishManifest(ctx context.Context, st *roomState, seg *wire.Segment) {
	body, err := wire.EncodeManifest(&wire.Manifest{V: wire.Version, Room: st.room, Second: seg.Second, Seq: seg.Seq, Dur: wire.SegmentDuration})
	if err != nil {
		return
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
			return
		}
		if !errors.Is(err, objstore.ErrPrecondition) {
			s.cfg.Logger.Warn("slicer: manifest write failed", "room", st.room, "err", err)
			return
		}
		// Someone else moved it: re-read, and only write if we are ahead.
		obj, gerr := s.cfg.Objects.Get(ctx, wire.ManifestKey(st.room))
		if gerr != nil {
			if errors.Is(gerr, objstore.ErrNotFound) {
				st.etag = ""
				continue
			}
			return
		}
		st.etag = obj.ETag
		if m, derr := wire.DecodeManifest(obj.Body); derr == nil && m.Second >= seg.Second {
			return
		}
	}
}
