package sdk

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"danmaku/internal/wire"
)

// manifestEvery bounds how often a poller that is far behind asks for the
// manifest, so a stalled slicer does not turn every 404 into two requests.
const manifestEvery = time.Second

// errMismatch is counted as a decode error: a CDN that answers with another
// room's or another second's segment is as broken as one that answers junk.
var errMismatch = fmt.Errorf("%w: not the room or second asked for", wire.ErrDecode)

// poller walks a room's seconds in order. Only pollLoop's goroutine touches it.
type poller struct {
	c       *Client
	second  int64  // next second to fetch
	seq     uint64 // seq expected of it, when haveSeq
	haveSeq bool
	backoff time.Duration
	// manifestAt is the server time of the last manifest check.
	manifestAt time.Time
}

func (c *Client) pollLoop(ctx context.Context, start int64) {
	p := &poller{c: c, second: start}
	for ctx.Err() == nil {
		p.step(ctx)
	}
}

// due is the server time at which second becomes fetchable under s: its end,
// plus the publish delay, plus the uncertainty of the clock offset.
func due(second int64, s *session) time.Time {
	ms := (second+1)*wire.SegmentDuration + s.entry.PublishDelayMs
	return time.UnixMilli(ms).Add(s.margin)
}

// liveSecond is the newest second that is due.
func (c *Client) liveSecond() int64 {
	s := c.sess.Load()
	ms := c.serverNow().Add(-s.margin).UnixMilli() - s.entry.PublishDelayMs
	return floorDiv(ms, wire.SegmentDuration) - 1
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// step waits for the next second to be due and fetches it once.
func (p *poller) step(ctx context.Context) {
	c := p.c
	// Re-read the session on every wake-up: a re-join may move the offset.
	err := c.waitFor(ctx, func() time.Duration {
		return due(p.second, c.sess.Load()).Sub(c.serverNow())
	})
	if err != nil {
		return
	}
	if p.maybeJump(ctx) {
		return
	}
	s := c.sess.Load()
	status, body, err := get(ctx, c.cfg.HTTPClient, s.entry.CDN+wire.SegmentKey(c.cfg.Room, p.second), wire.MaxSegmentBytes)
	switch {
	case err == nil && status == http.StatusOK:
		p.backoff = 0
		c.stats.segmentsFetched.Add(1)
		p.handle(ctx, body)
		p.second++
	case err == nil && status == http.StatusNotFound:
		// Due but not yet written: the slicer is a little late.
		p.backoff = 0
		c.stats.notFound.Add(1)
		_ = c.sleep(ctx, c.cfg.PollRetry)
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
		c.log.Warn("sdk: segment fetch failed", "room", c.cfg.Room, "second", p.second, "err", err, "wait", wait)
		_ = c.sleep(ctx, wait)
	}
}

// maybeJump moves the poller to live when it is more than FarBehind behind.
// It reports whether it moved.
func (p *poller) maybeJump(ctx context.Context) bool {
	c := p.c
	if c.cfg.FarBehind <= 0 {
		return false
	}
	live := c.liveSecond()
	if time.Duration(live-p.second)*time.Second <= c.cfg.FarBehind {
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
		// outage would otherwise make every client skip seconds that are
		// written later. Keep walking; the next check may succeed.
		c.log.Warn("sdk: far behind but the manifest is unavailable; not jumping", "room", c.cfg.Room, "err", err)
		return false
	case time.Duration(m.Second-p.second)*time.Second <= c.cfg.FarBehind:
		// The slicer is behind, not this client (it is catching up after an
		// outage or a failover): what it writes will be walked through.
		return false
	case m.Second <= live:
		target, seq, haveSeq = m.Second, m.Seq, true
	}
	skipped := target - p.second
	c.stats.jumps.Add(1)
	c.stats.skipped.Add(skipped)
	c.log.Info("sdk: far behind live; jumping", "room", c.cfg.Room, "from", p.second, "to", target, "skipped", skipped)
	p.second, p.seq, p.haveSeq = target, seq, haveSeq
	return true
}

// handle decodes one segment of p.second and delivers its messages. It never
// panics, whatever body holds.
func (p *poller) handle(ctx context.Context, body []byte) {
	c := p.c
	seg, err := wire.DecodeSegment(body)
	if err == nil && (seg.Room != c.cfg.Room || seg.Second != p.second) {
		err = errMismatch
	}
	if err != nil {
		c.stats.decodeErrors.Add(1)
		c.log.Warn("sdk: skipping undecodable segment", "room", c.cfg.Room, "second", p.second, "err", err)
		// The skipped segment used up one seq.
		p.seq++
		return
	}
	if p.haveSeq && seg.Seq != p.seq {
		c.stats.seqGaps.Add(1)
		c.log.Warn("sdk: segment seq gap", "room", c.cfg.Room, "second", p.second, "want", p.seq, "got", seg.Seq)
	}
	p.seq, p.haveSeq = seg.Seq+1, true
	_ = c.merge.deliver(ctx, seg.Messages, c.serverNow().UnixMilli())
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
