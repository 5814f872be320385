package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"danmaku/sdk/wire"
)

const (
	// replayAhead is how many segments Replay fetches ahead of the one it
	// delivers: enough to hide the round trip, few enough to be polite.
	replayAhead    = 8
	replayAttempts = 4
	replayBackoff  = 200 * time.Millisecond
	// replayMaxErrors bounds the skipped-segment errors Replay collects.
	replayMaxErrors = 100
)

// ErrReplay is the parent of the errors Replay reports for skipped segments.
var ErrReplay = errors.New("sdk: replay")

// ReplayOption configures one Replay call.
type ReplayOption func(*replayConfig)

type replayConfig struct {
	hc        *http.Client
	segmentMs int64
}

// ReplayHTTPClient makes Replay use hc. Default: a client with a 10 s timeout.
func ReplayHTTPClient(hc *http.Client) ReplayOption {
	return func(rc *replayConfig) { rc.hc = hc }
}

// ReplaySegmentMs says the room's segments are ms long (1000, 500 or 250).
// Default: the duration the room's live manifest names, or 1000 without one.
func ReplaySegmentMs(ms int64) ReplayOption {
	return func(rc *replayConfig) { rc.segmentMs = ms }
}

// Replay reads the segments of room for the unix seconds [from, to) from the
// CDN at cdnURL and calls fn for each message, in segment order and, within a
// segment, in the order it lists them; ids already passed to fn (a merged
// gift whose ids all were) are not passed again. The segments are those of
// the room's duration (ReplaySegmentMs, else its manifest's); a room that
// changed its duration within the range is read at that one duration only. A
// slot with no segment (404: before or after the event) is skipped silently.
// A segment that does not decode, or cannot be fetched after a few attempts,
// is skipped and reported: Replay then returns, after the last slot, the
// skipped slots' errors joined (each wrapping ErrReplay). An error from fn
// or the end of ctx stops Replay at once and is returned.
//
// Replay never passes a message a moderator took down: it reads the room's
// takedown list before the first segment (and fails, wrapping ErrReplay,
// when the list cannot be had while the manifest counts takedowns: better
// no replay than one showing what was taken down), again when the manifest counts more takedowns than the list
// held (a cached copy) and whenever a segment names a takedown the list did
// not hold (the room is live). A takedown learned only after its message
// was passed (a replay trailing a live show) is passed to fn as a
// KindTakedown notice (TakedownOf), as Client delivers it.
func Replay(ctx context.Context, cdnURL, room string, from, to int64, fn func(Message) error, opts ...ReplayOption) error {
	rc := replayConfig{}
	for _, o := range opts {
		o(&rc)
	}
	if rc.hc == nil {
		rc.hc = &http.Client{Timeout: defaultHTTPTimeout}
	}
	switch {
	case !wire.ValidRoom(room):
		return fmt.Errorf("%w: invalid room %q", ErrReplay, room)
	case cdnURL == "":
		return fmt.Errorf("%w: no CDN URL", ErrReplay)
	case from < 0 || to < from:
		return fmt.Errorf("%w: bad range [%d, %d)", ErrReplay, from, to)
	}
	if !strings.HasSuffix(cdnURL, "/") {
		cdnURL += "/"
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dur, listed := replayDuration(ctx, rc, cdnURL, room)
	if !wire.ValidSegmentMs(dur) {
		return fmt.Errorf("%w: segment duration %d ms: %w", ErrReplay, dur, ErrUnsupported)
	}
	p := replayer{room: room, dur: dur, fn: fn, hc: rc.hc, cdn: cdnURL,
		m: newMerger(nil, newSeenSet(defaultSeenIDs, defaultSeenWindow),
			newSeenSet(defaultTakedownIDs, takedownForever), &counters{})}
	if err := p.readList(ctx, listed); err != nil {
		return err
	}
	return p.play(ctx, prefetchSlots(ctx, rc.hc, cdnURL, room, dur, from, to))
}

// replayDuration is the segment duration to replay at (the option's, else
// the room's manifest's, else the default) and how many takedowns the
// manifest counts (0 without one).
func replayDuration(ctx context.Context, rc replayConfig, cdnURL, room string) (int64, uint64) {
	dur, listed := rc.segmentMs, uint64(0)
	if status, body, err := replayGet(ctx, rc.hc, cdnURL+wire.ManifestKey(room)); err == nil && status == http.StatusOK {
		if m, err := wire.DecodeManifest(body); err == nil && m.Room == room {
			listed = m.Takedowns
			if dur == 0 {
				dur = int64(m.Dur)
			}
		}
	}
	if dur == 0 {
		dur = wire.SegmentDuration
	}
	return dur, listed
}

// replayListAttempts bounds the reads of a list older than the manifest
// that names it (a cached copy: its max-age is 1 s).
const replayListAttempts = 4

// readList reads the room's takedown list into the taken-down set, until
// it holds at least want takedowns (the manifest's count) or
// replayListAttempts reads, replayBackoff·2ⁿ apart, have not reached it.
func (p *replayer) readList(ctx context.Context, want uint64) error {
	wait := replayBackoff
	for attempt := 1; ; attempt++ {
		p.listAt = time.Now()
		status, body, err := replayGet(ctx, p.hc, p.cdn+wire.TakedownListKey(p.room))
		l := &wire.TakedownList{V: 1, Room: p.room}
		switch {
		case err != nil:
		case status == http.StatusOK:
			l, err = decodeTakedownList(body, p.room)
		case status != http.StatusNotFound:
			err = fmt.Errorf("status %d", status)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if want == 0 && p.listN == 0 {
				// The manifest counts no takedowns (or there is none):
				// an origin that hides missing keys answers 403 for the
				// list a room without takedowns never had.
				return nil
			}
			return fmt.Errorf("%w: takedown list: %w", ErrReplay, err)
		}
		p.listN = max(p.listN, l.N)
		notices, err := p.m.takedown(ctx, l.IDs, 0)
		if err != nil {
			return err
		}
		p.notices = append(p.notices, notices...)
		if p.listN >= want || attempt == replayListAttempts {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
}

// slotResult is one slot's fetch.
type slotResult struct {
	slot   int64
	status int
	body   []byte
	err    error
}

// prefetchSlots fetches the slots of [from, to) ahead, in order: each slot
// gets its own future, at most replayAhead outstanding.
func prefetchSlots(ctx context.Context, hc *http.Client, cdnURL, room string, dur, from, to int64) <-chan chan slotResult {
	futures := make(chan chan slotResult, replayAhead)
	go func() {
		defer close(futures)
		for n := from * 1000 / dur; n < to*1000/dur; n++ {
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

// replayer plays fetched segments in order through the merger.
type replayer struct {
	room    string
	dur     int64
	fn      func(Message) error
	m       *merger
	skipped []error
	// The takedown list: where, when it was last read, and its count.
	hc     *http.Client
	cdn    string
	listAt time.Time
	listN  uint64
	// notices are takedowns of passed messages, for fn.
	notices []Message
}

func (p *replayer) skip(slot int64, err error) {
	if len(p.skipped) < replayMaxErrors {
		p.skipped = append(p.skipped, fmt.Errorf("%w: segment at %d ms skipped: %w", ErrReplay, slot*p.dur, err))
	}
}

// play hands every message of the futures' segments to fn, in order; a
// segment that cannot be had is skipped and named in the error returned
// at the end.
func (p *replayer) play(ctx context.Context, futures <-chan chan slotResult) error {
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
			p.skip(r.slot, r.err)
			continue
		case r.status == http.StatusNotFound:
			continue
		case r.status != http.StatusOK:
			p.skip(r.slot, fmt.Errorf("status %d", r.status))
			continue
		}
		if err := p.segment(ctx, r); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(p.skipped...)
}

// segment decodes one fetched segment and hands its new messages to fn;
// only fn's error is returned (a bad segment is skipped).
func (p *replayer) segment(ctx context.Context, r slotResult) error {
	seg, err := wire.DecodeSegment(r.body)
	if err == nil && (seg.Room != p.room || int64(seg.Dur) != p.dur || seg.Slot() != r.slot) {
		err = errMismatch
	}
	if err != nil {
		p.skip(r.slot, err)
		return nil
	}
	// Remembered as of the segment's own time, so the window slides
	// with the replay rather than with the wall clock.
	at := (r.slot + 1) * p.dur
	if err := p.takedowns(ctx, seg.TakenDown, at); err != nil {
		return err
	}
	for _, msg := range seg.Messages {
		if p.m.takenDown(&msg) {
			p.m.stats.takedownSuppressed.Add(1)
			continue
		}
		msg, ok := p.m.admit(msg, at)
		if !ok {
			continue
		}
		if err := p.fn(msg); err != nil {
			return err
		}
	}
	return nil
}

// takedowns applies a segment's td, passes fn a notice for each message it
// had passed, and reads the list again (at most once a takedownListEvery)
// when the segment named a takedown the set did not hold: the room is live
// and the list has grown since it was read.
func (p *replayer) takedowns(ctx context.Context, tds []TakenDown, at int64) error {
	if len(tds) == 0 {
		return nil
	}
	before := p.m.stats.takedowns.Load()
	notices, err := p.m.takedown(ctx, tds, at)
	if err != nil {
		return err
	}
	p.notices = append(p.notices, notices...)
	if p.m.stats.takedowns.Load() > before && time.Since(p.listAt) >= takedownListEvery {
		// A failure here is not fatal: the list read at the start holds
		// every takedown made before the replay began.
		if err := p.readList(ctx, 0); err != nil && ctx.Err() != nil {
			return err
		}
	}
	notices, p.notices = p.notices, nil
	for _, n := range notices {
		if err := p.fn(n); err != nil {
			return err
		}
	}
	return nil
}

// replayGet fetches one segment, retrying network and server errors.
func replayGet(ctx context.Context, hc *http.Client, url string) (int, []byte, error) {
	var (
		status int
		body   []byte
		err    error
	)
	wait := replayBackoff
	for attempt := 0; attempt < replayAttempts; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, nil, ctx.Err()
			case <-t.C:
			}
			wait *= 2
		}
		status, body, err = get(ctx, hc, url, wire.MaxSegmentBytes)
		if err == nil && status < 500 {
			return status, body, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("status %d", status)
	}
	return 0, nil, err
}
