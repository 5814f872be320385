package slicer

import (
	"context"
	"fmt"
	"time"

	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

// Site-wide broadcasts (stream.SiteKey) reach every live room through the
// room's system queue. Each room's leader reads the site stream through a
// consumer group of the room's own (siteGroup), so each room settles each
// broadcast on its own: a broadcast is acknowledged in a room's group only
// once a segment of that room holds it (or it is outside the room's window),
// and a takeover claims what the deposed leader left pending and checks it
// against the written segments by Identity ("s/"+id), as for the room's own
// messages. So every room shows every broadcast once.

// siteLane is the held-key lane of site messages: their ids are the site
// stream's, a space apart from the room's lanes.
const siteLane = 2

// siteRetention is how long the site stream keeps a broadcast. A room's
// group can only lose an entry trimmed before it read it; a leader reads
// the site stream every turn, and a room whose leader has been gone for
// longer than maxCatchUp (5 min) jumps to now anyway, so an hour leaves a
// wide margin (object storage down for an hour still reads on, up to
// maxPending). The store cannot list the rooms' groups (to trim behind the
// slowest one's pending floor), so the bound is by time. A fixed hour of
// broadcasts is small: they are coalesced at the source.
const siteRetention = time.Hour

// siteTrimEvery is how often a slicer process trims the site stream: one
// XTRIM a minute per process, whichever room's leader comes first, is
// nothing beside the per-room calls, and an entry outlives the hour by a
// minute at most.
const siteTrimEvery = time.Minute

// siteGroup is room's consumer group on the site stream: the room streams'
// group name qualified by the room, so the groups of all rooms on the one
// site stream never meet. ReadGroup creates it at the start of the stream
// on the room's first read; what precedes the room's window is acknowledged
// and skipped then.
func (s *Slicer) siteGroup(room string) string { return s.cfg.Group + "/" + room }

// siteQuota is the share of a slot's budget that site broadcasts always
// get: half the system queue's share (at least one). They get more only out
// of budget the room's own messages leave unused, so a storm of broadcasts
// never crowds out a busy room's gifts and system messages by more than
// this — and a room whose gifts never let up still shows every broadcast,
// at this rate. The rest is carried, never dropped. With the defaults (60 a
// second, system 10 %) it is 3 a second; an idle room shows up to its whole
// budget of them.
func siteQuota(slotBudget int, shares Shares) int {
	return max(1, int(float64(slotBudget)*shares[QueueSystem]/2))
}

// siteWindow is the span of store time (unix ms, [from, until)) whose
// broadcasts room shows: from its opening, up to its end plus endGrace once
// its event has ended (0: open). A broadcast outside it is acknowledged in
// the room's group and skipped.
//
// Nor is one more than maxCatchUp older than the room's next slot when it
// is read or claimed: the bound beyond which a leader does not write a
// room's missed seconds at all. A group created for a room that has long
// been live (the first slicer with broadcasts, rolled out during an event)
// would otherwise show up to an hour of them at once; a takeover claims
// within seconds, far inside it, and what a leader holds is not checked
// again, however long object storage keeps it from writing.
func (st *roomState) siteWindow() (from, until int64) {
	from = max(st.siteFrom, st.next*st.dur-maxCatchUp.Milliseconds())
	if st.handle != nil {
		if end := st.handle.endMs.Load(); end != 0 {
			until = end + endGrace.Milliseconds()
		}
	}
	return from, until
}

// takeSite files entries read or claimed from the site stream: those in
// the room's window are held (late ones into late, by segment start);
// the others are acknowledged and skipped. It returns how many went into
// late.
func (s *Slicer) takeSite(ctx context.Context, st *roomState, es []wire.Message, late map[int64][]wire.Message) (nlate int) {
	from, until := st.siteWindow()
	var skipped []string
	for _, e := range es {
		// Read from the site stream: a site message whatever its writer
		// set, so its identity never meets a room message's.
		e.Site = true
		ms, _, err := wire.ParseID(e.ID)
		if err != nil || ms < from || until != 0 && ms >= until {
			skipped = append(skipped, e.ID)
			continue
		}
		if start, isLate, skip := st.hold(e); isLate && !skip {
			late[start] = append(late[start], e)
			nlate++
		}
	}
	if len(skipped) > 0 {
		s.m.site.WithLabelValues("skipped").Add(float64(len(skipped)))
		if err := s.cfg.Streams.Ack(ctx, stream.SiteKey, s.siteGroup(st.room), skipped...); err != nil {
			// Still pending: the next claim brings them back and skips them.
			s.cfg.Logger.Warn("slicer: ack of skipped site messages failed", "room", st.room, "err", err)
		}
	}
	return nlate
}

// readSite reads what the room's site group has not yet been delivered, in
// batches, into pending (or late). Called right after a DrainRoom: every
// site entry stamped before that drain's store time is then delivered too.
// drained is false when maxPending cut it short.
func (s *Slicer) readSite(ctx context.Context, st *roomState, late map[int64][]wire.Message, nlate *int) (drained bool, err error) {
	for {
		if st.holding()+*nlate >= s.maxPending {
			return false, nil
		}
		es, err := s.cfg.Streams.ReadGroup(ctx, stream.SiteKey, s.siteGroup(st.room), s.cfg.NodeID, readBatch, 0)
		if err != nil {
			return false, fmt.Errorf("slicer: read site stream for %s: %w", st.room, err)
		}
		*nlate += s.takeSite(ctx, st, es, late)
		if len(es) < readBatch {
			return true, nil
		}
		if err := s.renew(ctx, st); err != nil {
			return false, err
		}
	}
}

// maybeTrimSite trims the site stream to siteRetention behind storeNow, at
// most once per siteTrimEvery in this process.
func (s *Slicer) maybeTrimSite(ctx context.Context, storeNow time.Time) {
	if storeNow.IsZero() {
		return
	}
	now := s.cfg.Clock.Now().UnixNano()
	last := s.siteTrimmed.Load()
	if last != 0 && time.Duration(now-last) < siteTrimEvery || !s.siteTrimmed.CompareAndSwap(last, now) {
		return
	}
	floor := wire.FormatID(storeNow.Add(-siteRetention).UnixMilli(), 0)
	if err := s.cfg.Streams.TrimBefore(ctx, stream.SiteKey, floor); err != nil {
		s.cfg.Logger.Warn("slicer: trim site stream failed", "err", err)
	}
}

// countSite is the number of site messages among msgs.
func countSite(msgs []wire.Message) int {
	n := 0
	for i := range msgs {
		if msgs[i].Site {
			n++
		}
	}
	return n
}

// noteSiteRead logs the first failed read of the site stream in a row, and
// the recovery: a site stream down would otherwise log once per room per
// turn.
func (s *Slicer) noteSiteRead(st *roomState, err error) {
	switch {
	case err != nil && !st.siteFailing:
		st.siteFailing = true
		s.cfg.Logger.Warn("slicer: site stream unreadable; the room goes on, broadcasts come in late", "room", st.room, "err", err)
	case err == nil && st.siteFailing:
		st.siteFailing = false
		s.cfg.Logger.Info("slicer: site stream readable again", "room", st.room)
	}
}
