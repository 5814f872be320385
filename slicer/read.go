package slicer

// Reading a room: drain both lanes (and the site stream) into the held
// messages, claim what a predecessor left pending, and settle messages of
// slots already written against their segments.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"danmaku/internal/objstore"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

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
