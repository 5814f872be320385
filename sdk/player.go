package sdk

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"danmaku/sdk/wire"
)

// Player plays a recorded room's barrage in step with a video on demand that
// carries program date times (a recorded show): each message is handed to
// the app when the video's playhead reaches the sender's playhead time
// (wire.PlayheadOf), and seeks are followed both ways — back, and what lies
// after the new position is played again; forward, and what was jumped over
// is not poured out. Replay, by contrast, reads a range as fast as it can.
//
// A message is stored (its id) at or after its playhead time, and at most
// two minutes after it (the ingest refuses older playheads), so the
// messages of a moment P are in the segments of [P, P+2 min]: the player
// keeps that much read ahead of the playhead, through the CDN.
type Player struct {
	cdn, room string
	dur       int64
	hc        *http.Client
	playhead  PlayheadClock
	now       func() time.Time // the local clock, to tell a seek from play

	idx []heldMsg // sorted by (at, seq)
	seq uint64
	// r reads the room's takedown list, and r.m holds the taken-down set
	// (for the player's life) and the seen set (per seek).
	r              *replayer
	listed         uint64 // the manifest's takedown count at the start
	listOK         bool
	loadTo         int64 // the slot times read end here (ms)
	cursor         int64 // playhead time up to which messages were handed over
	lastPh, lastAt int64
	started        bool
	stats          PlayerStats
}

// PlayerStats counts what a Player did.
type PlayerStats struct {
	// Played counts messages handed to the app; Seeks the jumps of the
	// playhead it followed; Segments the segments read; Skipped the
	// segments that could not be read or decoded.
	Played, Seeks, Segments, Skipped int64
}

// playerAhead is how far past the playhead's moment a message can have
// been stored: the ingest's oldest playhead. playerLead is how much more
// the player reads ahead, so that playing on never waits for the CDN.
const (
	playerAhead = maxPlayheadBehind
	playerLead  = 5 * time.Second
	// playerChunk bounds the slots read in one go, between two looks at the
	// playhead: a seek is followed within one chunk.
	playerChunk = 32
)

// NewPlayer returns a player of room's recorded segments at cdnURL, driven by
// playhead. The options are Replay's (the HTTP client, the segment duration).
func NewPlayer(ctx context.Context, cdnURL, room string, playhead PlayheadClock, opts ...ReplayOption) (*Player, error) {
	rc := replayConfig{}
	for _, o := range opts {
		o(&rc)
	}
	if rc.hc == nil {
		rc.hc = &http.Client{Timeout: defaultHTTPTimeout}
	}
	switch {
	case !wire.ValidRoom(room):
		return nil, fmt.Errorf("%w: invalid room %q", ErrReplay, room)
	case cdnURL == "":
		return nil, fmt.Errorf("%w: no CDN URL", ErrReplay)
	case playhead == nil:
		return nil, fmt.Errorf("%w: no playhead clock", ErrReplay)
	}
	if !strings.HasSuffix(cdnURL, "/") {
		cdnURL += "/"
	}
	dur, listed := replayDuration(ctx, rc, cdnURL, room)
	if !wire.ValidSegmentMs(dur) {
		return nil, fmt.Errorf("%w: segment duration %d ms: %w", ErrReplay, dur, ErrUnsupported)
	}
	r := &replayer{room: room, dur: dur, hc: rc.hc, cdn: cdnURL,
		m: newMerger(nil, newSeenSet(defaultSeenIDs, defaultSeenWindow),
			newSeenSet(defaultTakedownIDs, takedownForever), &counters{})}
	return &Player{cdn: cdnURL, room: room, dur: dur, hc: rc.hc, playhead: playhead, now: time.Now, r: r, listed: listed}, nil
}

// Stats returns the player's counters. Call it from fn or after Run.
func (p *Player) Stats() PlayerStats { return p.stats }

// Run follows the playhead until ctx ends (it returns ctx's error) or fn
// fails (it returns fn's error), handing each message to fn when the
// playhead reaches it, in playhead order. While the clock says it does not
// know the playhead, nothing is played.
func (p *Player) Run(ctx context.Context, fn func(Message) error) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := p.step(ctx, fn); err != nil {
			return err
		}
		t.Reset(holdTick)
	}
}

// step reads the playhead once: follows a seek, reads ahead, plays what is
// due.
func (p *Player) step(ctx context.Context, fn func(Message) error) error {
	if !p.listOK {
		// Never a message a moderator took down: the room's list first,
		// as Replay reads it (and fails the same way without it).
		if err := p.r.readList(ctx, p.listed); err != nil {
			return err
		}
		p.listOK = true
	}
	ph, ok := p.playhead()
	if !ok {
		return nil
	}
	local := p.now().UnixMilli()
	if !p.started || p.jumped(ph, local) {
		if p.started {
			p.stats.Seeks++
		}
		p.seek(ph)
	}
	p.lastPh, p.lastAt = ph, local
	if err := p.readAhead(ctx, ph); err != nil {
		return err
	}
	return p.play(ph, fn)
}

// jumped tells a seek (or a discontinuity) from playing on: the playhead
// moved more than playheadJump more or less than the local clock.
func (p *Player) jumped(ph, local int64) bool {
	drift := (ph - p.lastPh) - (local - p.lastAt)
	return drift > playheadJump.Milliseconds() || drift < -playheadJump.Milliseconds()
}

// seek starts playing at ph and reads again from there: the messages
// before the old cursor were dropped as they were played, and a seek back
// plays them again (the CDN has the segments cached).
func (p *Player) seek(ph int64) {
	p.started = true
	p.cursor = ph - 1 // a message at exactly ph is played
	p.idx = nil
	p.r.m.seen = newSeenSet(defaultSeenIDs, defaultSeenWindow)
	start := ph - ph%p.dur
	p.loadTo = start
}

// readAhead reads segments until what is read covers the playhead's
// messages and the lead, at most playerChunk slots per step.
func (p *Player) readAhead(ctx context.Context, ph int64) error {
	want := ph + playerAhead.Milliseconds() + playerLead.Milliseconds()
	if p.loadTo >= want {
		return nil
	}
	from, to := p.loadTo/p.dur, min(want/p.dur+1, p.loadTo/p.dur+playerChunk)
	futures := prefetchSlotRange(ctx, p.hc, p.cdn, p.room, p.dur, from, to)
	var added bool
	for f := range futures {
		var r slotResult
		select {
		case r = <-f:
		case <-ctx.Done():
			return ctx.Err()
		}
		switch {
		case r.err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			p.stats.Skipped++
			continue
		case r.status == http.StatusNotFound:
			continue
		case r.status != http.StatusOK:
			p.stats.Skipped++
			continue
		}
		seg, err := wire.DecodeSegment(r.body)
		if err == nil && (seg.Room != p.room || int64(seg.Dur) != p.dur || seg.Slot() != r.slot) {
			err = errMismatch
		}
		if err != nil {
			p.stats.Skipped++
			continue
		}
		p.stats.Segments++
		at := (r.slot + 1) * p.dur
		// A recorded room's segments may name takedowns the list did not
		// hold yet (a replay trailing the live show): they apply at once.
		if _, err := p.r.m.takedown(ctx, seg.TakenDown, at); err != nil {
			return err
		}
		for _, msg := range seg.Messages {
			if p.r.m.takenDown(&msg) {
				continue
			}
			msg, ok := p.r.m.admit(msg, at)
			if !ok {
				continue
			}
			pt := wire.PlayheadOf(&msg)
			if pt <= p.cursor {
				continue // its moment was passed before it was read
			}
			p.seq++
			p.idx = append(p.idx, heldMsg{at: pt, seq: p.seq, m: msg})
			added = true
		}
	}
	p.loadTo = to * p.dur
	if added {
		slices.SortFunc(p.idx, func(a, b heldMsg) int {
			return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.seq, b.seq))
		})
	}
	return nil
}

// play hands over, in order, the messages whose moment is in (cursor, ph].
func (p *Player) play(ph int64, fn func(Message) error) error {
	n := 0
	for n < len(p.idx) && p.idx[n].at <= ph {
		if p.idx[n].at > p.cursor && !p.r.m.takenDown(&p.idx[n].m) {
			if err := fn(p.idx[n].m); err != nil {
				p.idx = p.idx[n+1:]
				return err
			}
			p.stats.Played++
		}
		n++
	}
	p.idx = p.idx[n:]
	p.cursor = max(p.cursor, ph)
	return nil
}

// prefetchSlotRange is prefetchSlots over slot numbers [from, to).
func prefetchSlotRange(ctx context.Context, hc *http.Client, cdnURL, room string, dur, from, to int64) <-chan chan slotResult {
	futures := make(chan chan slotResult, replayAhead)
	go func() {
		defer close(futures)
		for n := from; n < to; n++ {
			f := make(chan slotResult, 1)
			select {
			case futures <- f:
			case <-ctx.Done():
				return
			}
			go func() {
				status, body, err := replayGet(ctx, hc, cdnURL+wire.SlotKey(room, dur, n))
				f <- slotResult{n, status, body, err}
			}()
		}
	}()
	return futures
}
