package slicer

// A room's loop: contend for its lease, lead it while held (read at each
// slot's end, write what is complete), finish it when its event ends.

import (
	"context"
	"errors"
	"time"

	"danmaku/internal/backoff"
	"danmaku/internal/clock"
	"danmaku/internal/stream"
	"danmaku/sdk/wire"
)

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
		_ = clock.Sleep(ctx, s.timers, s.cfg.LeaseTTL/3) // ctx's end ends the loop
	}
}

// errLostLease ends a leader's term.
var errLostLease = errors.New("slicer: lease lost")

// errRoomEnded ends a room's loop: its last segment and ended manifest are
// written.
var errRoomEnded = errors.New("slicer: room ended")

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
			if clock.Sleep(ctx, s.timers, s.cfg.Tick) != nil {
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
					retryAt = now.Add(writeRetry.Delay(failures))
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
		if clock.Sleep(ctx, s.timers, s.nextWake(st, retryAt)) != nil {
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

// writeRetry is the wait before the n-th retry of a failed write: up to
// 100 ms doubling to 2 s, with full jitter (so that the rooms an S3 outage
// stopped together do not retry in step). Seconds are written in order, so
// a retry holds back the seconds after it; a short cap keeps the catch-up
// prompt once S3 is back.
var writeRetry = backoff.Policy{Base: 100 * time.Millisecond, Max: 2 * time.Second}
