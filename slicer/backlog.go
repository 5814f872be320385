package slicer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Backlog is where a room's leader publishes the room's gift backlog — how
// long, in seconds of the budget gifts can use, the gifts it holds will
// take to reach segments — for the ingest nodes, which refuse new gifts
// (429) while it is over a bound. The Redis implementation is one key per
// room beside its streams, which the ingest's gift script reads in the same
// step as its order check; the memory one serves embedded mode and tests.
// Implementations are safe for concurrent use.
//
// Between two of the leader's turns, each gift the ingest accepts adds
// perGift (the seconds of budget one gift takes) to the published value
// (MemoryBacklog.Admit; in Redis, the gift script), so that a burst within
// one slot — a business server's retries all coming back at once — cannot
// outrun the bound until the next Set; the next Set replaces the sum with
// the leader's own count.
type Backlog interface {
	// Set publishes room's backlog for ttl, with the seconds each gift
	// accepted until the next Set adds (0: none). Past ttl without a newer
	// Set the room reads 0: a leader that died takes its value with it.
	Set(ctx context.Context, room string, seconds, perGift float64, ttl time.Duration) error
	// Get returns room's published backlog: 0 when none is (never set, or
	// expired).
	Get(ctx context.Context, room string) (float64, error)
}

// backlogTTL is how long a published backlog holds. A leader publishes
// while its room is backed up at every loop turn — each slot, at least once
// a second — so a value lives through several missed turns (a slow PUT, a
// pause) and vanishes a few seconds after its leader dies. Until the
// successor (≤ 2.7 s after the last renewal, docs/architecture.md) writes
// and publishes again, the room reads 0 and gifts are accepted unbounded:
// accepted gifts are never dropped, so the price is a backlog that grew for
// those seconds, never a lost gift.
const backlogTTL = 5 * time.Second

// errBadBacklog is returned by Set for a negative, infinite or NaN value.
var errBadBacklog = errors.New("slicer: backlog and seconds per gift must be finite numbers ≥ 0")

func checkBacklog(seconds, perGift float64) error {
	for _, v := range [2]float64{seconds, perGift} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w (got %v, %v)", errBadBacklog, seconds, perGift)
		}
	}
	return nil
}

// giftRate is how many gifts a second of b's budget writes when gifts are
// backed up: their own shares and the barrage share, which allocate lends
// them (a never-droppable queue borrows from the queues below it) — all but
// the system share. At least one a second, so that a budget given wholly to
// system messages still yields a finite backlog.
func giftRate(b budgetConf) float64 {
	return max(float64(b.budget)*(1-b.shares[QueueSystem]), 1)
}

// giftBacklog is st's gift backlog in seconds: the gifts carried and those
// read but not yet written, counted as the messages stand (before merging,
// which only a slot decides), over giftRate.
//
// Gifts still unread in the stream are not counted one by one: reading
// stops only at maxPending (carry included), and counting entries beyond
// what was read would cost a store call per slot (XLEN counts what sits
// behind a carried gift's trim floor too, written or not). Instead, a
// leader that has stopped reading counts everything it holds, of every
// kind, as backlog: whatever is unread waits behind all of it.
func (s *Slicer) giftBacklog(st *roomState) float64 {
	_, b := s.roomConf(st.room)
	n := st.pendingGifts + st.carryGifts
	if held := st.holding(); held >= s.maxPending {
		n = held
	}
	return float64(n) / giftRate(b)
}

// publishBacklog publishes st's gift backlog. A room with nothing backed up
// that has published 0 (or nothing) this term costs no call: an absent key
// reads 0 anyway.
func (s *Slicer) publishBacklog(ctx context.Context, st *roomState) {
	sec := s.giftBacklog(st)
	if sec == 0 && !st.backlogShown {
		return
	}
	_, b := s.roomConf(st.room)
	if err := s.cfg.Backlog.Set(ctx, st.room, sec, 1/giftRate(b), backlogTTL); err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("slicer: gift backlog not published", "room", st.room, "err", err)
		}
		return
	}
	st.backlogShown = sec > 0
	s.backlogMu.Lock()
	s.backlogs[st.room] = sec
	s.backlogMu.Unlock()
}

// forgetBacklog drops room from the backlog gauge when its term ends.
func (s *Slicer) forgetBacklog(room string) {
	s.backlogMu.Lock()
	delete(s.backlogs, room)
	s.backlogMu.Unlock()
}

// maxBacklog is the largest gift backlog published for the rooms this
// slicer leads.
func (s *Slicer) maxBacklog() float64 {
	s.backlogMu.Lock()
	defer s.backlogMu.Unlock()
	m := 0.0
	for _, v := range s.backlogs {
		m = max(m, v)
	}
	return m
}
