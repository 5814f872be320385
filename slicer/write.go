package slicer

// Writing a slot: the plan (planSlot) as a segment, its conditional PUT,
// acknowledgements, trims and the manifest.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"danmaku/internal/audit"
	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// writeSlot plans st.next (planSlot), writes its segment and settles it:
// acknowledges what it settled, keeps the carry, moves the manifest on.
// When a predecessor already wrote the slot, that segment is the truth
// (reconcileSlot). storeNow and localNow are the store time read before the
// drain and the local time it was read at.
func (s *Slicer) writeSlot(ctx context.Context, st *roomState, storeNow, localNow time.Time) error {
	slot := st.next
	fresh := st.pending[slot]
	_, b := s.roomConf(st.room)
	p := planSlot(slotInput{
		Carry: st.carry, Fresh: fresh,
		Budget: slotBudget(b.budget, st.dur), Shares: b.shares, HighGiftValue: s.cfg.HighGiftValue,
		TakenDown: st.td.set,
	}, st.rng)

	seg := wire.NewSegment(st.room, st.dur, slot, st.seq)
	seg.Messages = p.Messages
	seg.TakenDown = p.TakenDown
	body, err := wire.EncodeSegment(seg)
	if err != nil {
		return err
	}
	start := s.cfg.Clock.Now()
	_, err = s.cfg.Objects.Put(ctx, wire.SlotKey(st.room, st.dur, slot), body, objstore.PutOptions{
		ContentType: wire.SegmentContentType, CacheControl: wire.SegmentCacheControl, IfNoneMatch: true,
	})
	carry, settled := p.Carry, p.Settled
	switch {
	case errors.Is(err, objstore.ErrPrecondition):
		// A predecessor wrote this slot: keep its seq; settle what it holds
		// and carry what it lacks, message by original message.
		existing, rerr := s.readExisting(ctx, st.room, st.dur, slot)
		if rerr != nil {
			return rerr
		}
		s.m.written.WithLabelValues("existed").Inc()
		var superseded int
		carry, settled, superseded = reconcileSlot(p.Inputs, identities(existing), st.td.set)
		if superseded > 0 {
			s.m.drops.WithLabelValues("superseded").Add(float64(superseded))
		}
		seg = existing
	case err != nil:
		return fmt.Errorf("slicer: put segment %s/%d: %w", st.room, slot, err)
	default:
		s.noteWritten(st, slot, &p, len(body), start, storeNow, localNow)
	}
	s.settleSlot(ctx, st, seg, fresh, carry, settled)
	s.m.lag.Set(storeNow.Sub(time.UnixMilli(s.timing(st).Due(slot))).Seconds())
	s.m.carried.Set(float64(len(carry)))
	s.m.siteCarried.Set(float64(countSite(carry)))
	s.maybeSwitch(ctx, st)
	return nil
}

// noteWritten records a slot's segment that this leader wrote (PUT at local
// time start, of size bytes): the write's metrics, its readiness by the
// store clock (estimated from the drain's reading of it, storeNow at
// localNow), and the audit trail of what was sampled away.
func (s *Slicer) noteWritten(st *roomState, slot int64, p *slotPlan, size int, start, storeNow, localNow time.Time) {
	done := s.cfg.Clock.Now()
	s.m.written.WithLabelValues("written").Inc()
	s.roomM.observe(st.room, p.Messages)
	s.m.bytes.Observe(float64(size))
	s.m.latency.Observe(done.Sub(start).Seconds())
	t := s.timing(st)
	written := storeNow.Add(done.Sub(localNow))
	s.m.ready.Observe(written.Sub(time.UnixMilli(t.End(slot))).Seconds())
	if written.After(time.UnixMilli(t.Due(slot))) {
		s.m.late.Inc()
	}
	for q := range numQueues {
		s.m.perQueue.WithLabelValues(Queue(q).String()).Add(float64(p.Got[q]))
	}
	if n := countSite(p.Messages); n > 0 {
		s.m.site.WithLabelValues("written").Add(float64(n))
	}
	if len(p.Left) > 0 {
		s.m.drops.WithLabelValues("sampled").Add(float64(len(p.Left)))
	}
	if len(p.Removed) > 0 {
		s.m.drops.WithLabelValues("taken_down").Add(float64(len(p.Removed)))
	}
	s.auditSampled(st.room, p.Left, done)
}

// settleSlot moves st past a durable segment seg of st.next, planned from
// fresh (the slot's own messages) and the carry: it acknowledges what seg
// settled (written or sampled away) — carried messages stay pending, so a
// successor leader reclaims them — trims the lanes and moves the manifest
// forward.
func (s *Slicer) settleSlot(ctx context.Context, st *roomState, seg *wire.Segment, fresh, carry, settled []wire.Message) {
	s.ack(ctx, st.room, settled)
	for i := range settled {
		delete(st.held, keyOf(&settled[i]))
	}
	st.carry = carry
	st.carryGifts = countGifts(carry)
	st.npending -= len(fresh)
	st.pendingGifts -= countGifts(fresh)
	delete(st.pending, st.next)
	st.seq = seg.Seq + 1
	st.next++
	st.remember(seg)
	st.last = seg
	s.trim(ctx, st)
	if err := s.publishManifest(ctx, st, wire.ManifestFor(seg)); err != nil {
		s.cfg.Logger.Warn("slicer: manifest write failed", "room", st.room, "err", err)
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

// publishManifest moves the manifest forward to m, never back: a manifest
// already at m's segment or later is left alone, unless m marks the room
// ended and it does not yet. The room's takedown list goes first when it
// grew, and the manifest counts what the list object holds (td).
func (s *Slicer) publishManifest(ctx context.Context, st *roomState, m *wire.Manifest) error {
	s.publishTakedowns(ctx, st)
	m.Takedowns = uint64(st.td.published)
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
