package sdk

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"danmaku/sdk/wire"
)

// manifestEvery bounds how often a poller that is far behind asks for the
// manifest, so a stalled slicer does not turn every 404 into two requests.
const manifestEvery = time.Second

// errMismatch is counted as a decode error: a CDN that answers with another
// room's or another second's segment is as broken as one that answers junk.
var errMismatch = fmt.Errorf("%w: not the room or segment asked for", wire.ErrDecode)

// mismatchRetries is how often a segment that is not the one asked for (a
// CDN that served the wrong object) is asked for again before it is
// skipped: a retry usually reaches another cache node or a fixed one.
const mismatchRetries = 3

// poller walks a room's segments in order. Only pollLoop's goroutine
// touches it.
type poller struct {
	c *Client
	// dur is the room's segment duration in ms and slot the next slot to
	// fetch on its grid; both come from the entry and follow the room when
	// its duration changes (the manifest says so).
	dur     int64
	slot    int64
	seq     uint64 // seq expected of it, when haveSeq
	haveSeq bool
	backoff time.Duration
	// tries counts requests for the current slot; mismatches counts its
	// answers that were another object.
	tries      int
	mismatches int
	// manifestAt is the server time of the last manifest check.
	manifestAt time.Time
	// catchUpMs is the server time the poller was live at when it started
	// behind it on purpose (a viewer whose video is behind live reads the
	// segments since its playhead): it does not jump to live before.
	catchUpMs int64
}

// pollLoop walks the segments from the one holding startMs; liveMs is the
// server time at the start, which a poller that starts earlier (playhead
// sync) walks up to without jumping.
func (c *Client) pollLoop(ctx context.Context, startMs, liveMs int64) {
	dur := c.sess.Load().entry.SegmentMs
	p := &poller{c: c, dur: dur, slot: startMs / dur, catchUpMs: liveMs}
	for ctx.Err() == nil {
		p.step(ctx)
	}
}

// timing is the schedule of the room under s, at segment duration dur.
func timing(s *session, dur int64) wire.Timing {
	return wire.Timing{SegmentMs: dur, PublishDelayMs: s.entry.PublishDelayMs}
}

// due is the server time at which slot becomes fetchable under s: its end,
// plus the publish delay, plus the uncertainty of the clock offset.
func (p *poller) due(s *session) time.Time {
	return time.UnixMilli(timing(s, p.dur).Due(p.slot)).Add(p.c.clockMargin())
}

// liveSlot is the newest slot that is due.
func (p *poller) liveSlot() int64 {
	s := p.c.sess.Load()
	return timing(s, p.dur).LiveSlot(p.c.serverNow().Add(-p.c.clockMargin()).UnixMilli())
}

// retryWait is the wait after a 404 for a due slot: PollRetry, but at most
// a quarter of a segment, so that a short-segment room is not slowed down.
func (p *poller) retryWait() time.Duration {
	return min(p.c.cfg.PollRetry, time.Duration(p.dur)*time.Millisecond/4)
}

// step waits for the next slot to be due and fetches it once.
func (p *poller) step(ctx context.Context) {
	c := p.c
	// Re-read the session on every wake-up: a re-join may move the offset.
	err := c.waitFor(ctx, func() time.Duration {
		return p.due(c.sess.Load()).Sub(c.serverNow())
	})
	if err != nil {
		return
	}
	if p.maybeJump(ctx) {
		return
	}
	s := c.sess.Load()
	p.tries++
	status, body, err := get(ctx, c.cfg.HTTPClient, s.entry.CDN+wire.SlotKey(c.cfg.Room, p.dur, p.slot), wire.MaxSegmentBytes)
	switch {
	case err == nil && status == http.StatusOK:
		p.backoff = 0
		c.stats.segmentsFetched.Add(1)
		if p.handle(ctx, body) {
			if p.tries == 1 {
				c.stats.firstPollHits.Add(1)
			}
			p.next()
		}
	case err == nil && status == http.StatusNotFound:
		// Due but not yet written: the slicer is a little late — or the
		// room's segment duration changed, and this key never will be.
		p.backoff = 0
		c.stats.notFound.Add(1)
		if p.followDuration(ctx) {
			return
		}
		_ = c.sleep(ctx, p.retryWait())
	default:
		if ctx.Err() != nil {
			return
		}
		c.stats.fetchErrors.Add(1)
		if err == nil {
			err = fmt.Errorf("status %d", status)
		}
		p.backoff = min(max(2*p.backoff, 2*c.cfg.PollRetry), c.cfg.PollBackoffMax)
		wait := p.backoff/2 + rand.N(p.backoff/2+1)
		c.log.Warn("sdk: segment fetch failed", "room", c.cfg.Room, "slot", p.slot, "err", err, "wait", wait)
		_ = c.sleep(ctx, wait)
	}
}

// next moves to the following slot.
func (p *poller) next() {
	p.slot++
	p.tries, p.mismatches = 0, 0
}

// followDuration checks, when a due slot has answered 404 for a while, what
// the manifest says: a room that has ended (and whose last segment this
// poller has passed) ends the client with ErrRoomEnded; a room whose segment
// duration changed is followed on the new grid at the same time. It
// reports whether the poller moved or stopped.
func (p *poller) followDuration(ctx context.Context) bool {
	c := p.c
	s := c.sess.Load()
	late := c.serverNow().Sub(p.due(s))
	if late < max(time.Second, 4*time.Duration(p.dur)*time.Millisecond) {
		return false
	}
	now := c.serverNow()
	if !p.manifestAt.IsZero() && now.Sub(p.manifestAt) < manifestEvery {
		return false
	}
	p.manifestAt = now
	m, err := c.fetchManifest(ctx)
	if err != nil {
		return false
	}
	if m.Ended && p.slot*p.dur > m.StartMs() {
		c.end(ErrRoomEnded)
		return true
	}
	if int64(m.Dur) == p.dur {
		return false
	}
	// Durations change at whole seconds, where both grids meet; this slot
	// was never written, so the change happened at or before its start.
	startMs := p.slot * p.dur
	newDur := int64(m.Dur)
	c.log.Info("sdk: the room's segment duration changed", "room", c.cfg.Room, "from_ms", p.dur, "to_ms", newDur)
	p.dur = newDur
	p.slot = (startMs + newDur - 1) / newDur
	p.tries, p.mismatches = 0, 0
	return true
}

// maybeJump moves the poller to live when it is more than FarBehind behind.
// It reports whether it moved.
func (p *poller) maybeJump(ctx context.Context) bool {
	c := p.c
	if c.cfg.FarBehind <= 0 || p.slot*p.dur < p.catchUpMs {
		return false
	}
	span := func(slots int64) time.Duration { return time.Duration(slots*p.dur) * time.Millisecond }
	live := p.liveSlot()
	if span(live-p.slot) <= c.cfg.FarBehind {
		return false
	}
	// A viewer synchronised to a video behind live still needs every
	// segment from its playhead less playheadJump on (what was stored there
	// is due ahead of its video): it jumps no further than that.
	need := c.playheadStart((live+1)*p.dur) / p.dur
	if need <= p.slot {
		return false
	}
	now := c.serverNow()
	if !p.manifestAt.IsZero() && now.Sub(p.manifestAt) < manifestEvery {
		return false
	}
	p.manifestAt = now
	target, seq, haveSeq := live, uint64(0), false
	m, err := c.fetchManifest(ctx)
	switch {
	case err != nil:
		// Without the manifest nobody knows what is written: a CDN or S3
		// outage would otherwise make every client skip slots that are
		// written later. Keep walking; the next check may succeed.
		c.log.Warn("sdk: far behind but the manifest is unavailable; not jumping", "room", c.cfg.Room, "err", err)
		return false
	case int64(m.Dur) != p.dur:
		// The room changed its segment duration: move to the new grid at
		// the same time, and judge how far behind that is on the next step.
		startMs := p.slot * p.dur
		p.dur = int64(m.Dur)
		p.slot = (startMs + p.dur - 1) / p.dur
		p.tries, p.mismatches, p.haveSeq = 0, 0, false
		p.manifestAt = time.Time{}
		return true
	case span(m.Slot()-p.slot) <= c.cfg.FarBehind:
		// The slicer is behind, not this client (it is catching up after an
		// outage or a failover): what it writes will be walked through.
		return false
	case m.Slot() <= live:
		target, seq, haveSeq = m.Slot(), m.Seq, true
	}
	if need < target {
		target, seq, haveSeq = need, 0, false
	}
	skipped := target - p.slot
	c.stats.jumps.Add(1)
	c.stats.skipped.Add(int64(span(skipped) / time.Second))
	c.log.Info("sdk: far behind live; jumping", "room", c.cfg.Room, "from", p.slot, "to", target, "segment_ms", p.dur)
	p.slot, p.seq, p.haveSeq = target, seq, haveSeq
	p.tries, p.mismatches = 0, 0
	return true
}

// handle decodes one segment of p.slot and delivers its messages. It
// reports whether the poller may move on: a segment that is another room's
// or another slot's (a CDN serving the wrong object) is asked for again,
// up to mismatchRetries times, before it is skipped. It never panics,
// whatever body holds.
func (p *poller) handle(ctx context.Context, body []byte) bool {
	c := p.c
	seg, err := wire.DecodeSegment(body)
	if err == nil && (seg.Room != c.cfg.Room || int64(seg.Dur) != p.dur || seg.Slot() != p.slot) {
		err = errMismatch
		if p.mismatches < mismatchRetries {
			p.mismatches++
			c.stats.mismatchRetries.Add(1)
			c.log.Warn("sdk: segment is not the one asked for; asking again", "room", c.cfg.Room, "slot", p.slot, "got_room", seg.Room, "got_start_ms", seg.StartMs())
			_ = c.sleep(ctx, p.retryWait())
			return false
		}
	}
	if err != nil {
		c.stats.decodeErrors.Add(1)
		c.log.Warn("sdk: skipping undecodable segment", "room", c.cfg.Room, "slot", p.slot, "err", err)
		// The skipped segment used up one seq.
		p.seq++
		return true
	}
	if p.haveSeq && seg.Seq != p.seq {
		c.stats.seqGaps.Add(1)
		c.log.Warn("sdk: segment seq gap", "room", c.cfg.Room, "slot", p.slot, "want", p.seq, "got", seg.Seq)
	}
	p.seq, p.haveSeq = seg.Seq+1, true
	now := c.serverNow().UnixMilli()
	c.stats.lastSegmentLagMs.Store(now - (seg.StartMs() + int64(seg.Dur)))
	if _, err := c.merge.takedown(ctx, seg.TakenDown, now); err != nil {
		return true
	}
	_ = c.merge.deliver(ctx, seg.Messages, now)
	return true
}

func (c *Client) fetchManifest(ctx context.Context) (*wire.Manifest, error) {
	s := c.sess.Load()
	status, body, err := get(ctx, c.cfg.HTTPClient, s.entry.CDN+wire.ManifestKey(c.cfg.Room), maxManifestBytes)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("sdk: manifest: status %d", status)
	}
	m, err := wire.DecodeManifest(body)
	if err != nil {
		return nil, fmt.Errorf("sdk: manifest: %w", err)
	}
	if m.Room != c.cfg.Room {
		return nil, fmt.Errorf("sdk: manifest: %w", errMismatch)
	}
	c.noteManifestTakedowns(m.Takedowns)
	return m, nil
}

const maxManifestBytes = 64 << 10

// get fetches url and returns the status and, for 200, the body. At most
// limit+1 bytes are read: the decoders reject anything above their limit, so
// an oversized object is skipped like any other undecodable one rather than
// retried forever.
func get(ctx context.Context, hc *http.Client, url string, limit int64) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("sdk: get: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("sdk: get: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Drain a little so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return resp.StatusCode, nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return 0, nil, fmt.Errorf("sdk: get: %w", err)
	}
	return http.StatusOK, body, nil
}
