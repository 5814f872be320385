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
	dur := replayDuration(ctx, rc, cdnURL, room)
	if !wire.ValidSegmentMs(dur) {
		return fmt.Errorf("%w: segment duration %d ms: %w", ErrReplay, dur, ErrUnsupported)
	}
	p := replayer{room: room, dur: dur, fn: fn,
		m: newMerger(nil, newSeenSet(defaultSeenIDs, defaultSeenWindow), &counters{})}
	return p.play(ctx, prefetchSlots(ctx, rc.hc, cdnURL, room, dur, from, to))
}

// replayDuration is the segment duration to replay at: the option's, else
// the room's manifest's, else the default.
func replayDuration(ctx context.Context, rc replayConfig, cdnURL, room string) int64 {
	if rc.segmentMs != 0 {
		return rc.segmentMs
	}
	if status, body, err := replayGet(ctx, rc.hc, cdnURL+wire.ManifestKey(room)); err == nil && status == http.StatusOK {
		if m, err := wire.DecodeManifest(body); err == nil {
			return int64(m.Dur)
		}
	}
	return wire.SegmentDuration
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
		if err := p.segment(r); err != nil {
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
func (p *replayer) segment(r slotResult) error {
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
	for _, msg := range seg.Messages {
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
