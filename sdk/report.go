package sdk

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"danmaku/sdk/wire"
)

// defaultReportInterval is how often the client reports its counters to the
// edge: well inside the edge's allowance (a burst of 10, then one a second).
const defaultReportInterval = 10 * time.Second

// maxReportDelta is the largest change per counter one report carries: the
// edge takes 200 drops and held sends a second of a connection's life and
// refuses a report beyond that whole, so each goes out in 10 s portions.
const maxReportDelta = wire.MaxReportCounter

// counterReport is the text frame the edge relays to the operators' metrics
// (edge/README.md): what changed since the previous report.
type counterReport struct {
	Drops int64 `json:"drops"`
	Held  int64 `json:"held"`
	// Segs is segments fetched, Hits those of them the first request
	// found (Hits ≤ Segs): the first-poll hit ratio as clients see it.
	Segs int64 `json:"segs,omitempty"`
	Hits int64 `json:"hits,omitempty"`
	// Lat counts the barrage delivered to the app by end-to-end latency,
	// in the buckets of wire.LatencyBoundsMs (absent when none was).
	Lat []int64 `json:"lat,omitempty"`
	// Skew counts, for a client synchronised to its video's playhead, how
	// long after its playhead time each message was shown, in the same
	// buckets (absent when none was).
	Skew []int64 `json:"skew,omitempty"`
	// TD counts takedowns the client applied, TDRm the taken-down
	// messages it removed from the screen (the render queue's RemovedShown;
	// without one, the notices delivered to the app). Edges that predate
	// them ignore both.
	TD   int64 `json:"td,omitempty"`
	TDRm int64 `json:"tdrm,omitempty"`
}

// reporter remembers what was reported, so that each report carries the
// change since the last one that was written — across reconnects too.
type reporter struct {
	mu                  sync.Mutex
	sentDrops, sentHeld int64
	sentSegs, sentHits  int64
	sentLat             [wire.LatencyBuckets]int64
	sentSkew            [wire.LatencyBuckets]int64
	sentTD, sentTDRm    int64
}

// next is the report of what changed since the last one sent, within the
// edge's bounds; what is beyond them waits for the next report. r.mu is
// held.
func (r *reporter) next(drops, held, segs, hits int64, lat, skew *[wire.LatencyBuckets]int64) counterReport {
	rep := counterReport{
		Drops: min(drops-r.sentDrops, maxReportDelta),
		Held:  min(held-r.sentHeld, maxReportDelta),
		Segs:  min(segs-r.sentSegs, wire.MaxReportSegments),
	}
	// A hit is counted after its segment, and a report may carry fewer
	// segments than were fetched: the edge refuses hits > segs, so the
	// surplus waits for the segments it belongs to.
	rep.Hits = min(hits-r.sentHits, rep.Segs)
	rep.Lat = histDelta(lat, &r.sentLat)
	rep.Skew = histDelta(skew, &r.sentSkew)
	return rep
}

// histDelta is what a histogram gained since sent, within the edge's bound
// on one report (the rest waits for the next); nil when nothing.
func histDelta(now, sent *[wire.LatencyBuckets]int64) []int64 {
	var out []int64
	budget := int64(wire.MaxReportLatencies)
	for i := range now {
		n := min(now[i]-sent[i], budget)
		if n > 0 && out == nil {
			out = make([]int64, wire.LatencyBuckets)
		}
		if n > 0 {
			out[i] = n
			budget -= n
		}
	}
	return out
}

// empty reports whether rep carries nothing.
func (rep *counterReport) empty() bool {
	return rep.Drops == 0 && rep.Held == 0 && rep.Segs == 0 && rep.Hits == 0 && rep.Lat == nil && rep.Skew == nil &&
		rep.TD == 0 && rep.TDRm == 0
}

// sent records rep as written.
func (r *reporter) sent(rep *counterReport) {
	r.sentDrops += rep.Drops
	r.sentHeld += rep.Held
	r.sentSegs += rep.Segs
	r.sentHits += rep.Hits
	r.sentTD += rep.TD
	r.sentTDRm += rep.TDRm
	for i, n := range rep.Lat {
		r.sentLat[i] += n
	}
	for i, n := range rep.Skew {
		r.sentSkew[i] += n
	}
}

// report writes one report to conn if anything changed. A failed write is
// not counted as sent: its change goes out with the next report.
func (c *Client) report(conn *websocket.Conn) error {
	var drops int64
	removed := c.stats.takedownNotices.Load()
	if c.cfg.Render != nil {
		rs := c.cfg.Render.Stats()
		drops, removed = rs.Drops(), rs.RemovedShown
	}
	td := c.stats.takedowns.Load()
	held := c.stats.sendsHeldBack.Load()
	// Hits before segments: every hit read then has its segment counted.
	hits := c.stats.firstPollHits.Load()
	segs := c.stats.segmentsFetched.Load()
	var lat [wire.LatencyBuckets]int64
	for i := range lat {
		lat[i] = c.stats.latency[i].Load()
	}
	c.holdMu.Lock()
	skew := c.hold.reported
	c.holdMu.Unlock()
	r := &c.reporter
	r.mu.Lock()
	defer r.mu.Unlock()
	// The edge refuses a report above its bounds; the rest goes out with
	// the next report.
	rep := r.next(drops, held, segs, hits, &lat, &skew)
	rep.TD = min(td-r.sentTD, maxReportDelta)
	rep.TDRm = min(removed-r.sentTDRm, maxReportDelta)
	if rep.empty() {
		return nil
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	// readEdge is the connection's only reader; this goroutine is its only
	// writer of data frames (pongs and the close are control frames, which
	// gorilla allows concurrently).
	_ = conn.SetWriteDeadline(time.Now().Add(edgeWriteTimeout))
	if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
		return err
	}
	r.sent(&rep)
	return nil
}

// reportLoop reports every ReportInterval until ctx ends or a write fails
// (the connection is going away; the next one reports the change).
func (c *Client) reportLoop(ctx context.Context, conn *websocket.Conn, edgeTok *atomic.Pointer[string]) {
	var tick <-chan time.Time
	if c.cfg.ReportInterval >= 0 {
		t := time.NewTicker(c.cfg.ReportInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if err := c.report(conn); err != nil {
				return
			}
		case <-c.tokenNews:
			if err := c.sendToken(conn, edgeTok); err != nil {
				return
			}
		}
	}
}

// sendToken sends the session's token in-band when the edge holds an older
// one: the connection then outlives the token it was opened with, without
// reconnecting (the edge closes a connection whose token expired).
func (c *Client) sendToken(conn *websocket.Conn, edgeTok *atomic.Pointer[string]) error {
	tok := c.sess.Load().entry.Token
	if tok == *edgeTok.Load() {
		return nil
	}
	b, err := json.Marshal(struct {
		Token string `json:"token"`
	}{tok})
	if err != nil {
		return err
	}
	c.reporter.mu.Lock() // one writer of data frames at a time, as report
	defer c.reporter.mu.Unlock()
	_ = conn.SetWriteDeadline(time.Now().Add(edgeWriteTimeout))
	if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
		return err
	}
	edgeTok.Store(&tok)
	return nil
}
