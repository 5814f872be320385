package sdk

import (
	"container/heap"
	"context"
	"time"

	"danmaku/sdk/wire"
)

// PlayheadClock tells the client where the app's video is: the program date
// time (unix ms) of the frame on screen — hls.js's playingDate, AVPlayer's
// currentDate, ExoPlayer's window start plus position — and false while the
// player does not know it (no stream yet, a stream without program date
// times, between streams).
type PlayheadClock func() (ms int64, ok bool)

// Playhead synchronisation (docs/api.md, "Playhead time"). With a
// Config.Playhead and an entry that allows it (sync), a message is held until
// the app's playhead reaches the sender's (wire.PlayheadOf): a viewer 15 s
// behind live sees a comment typed 3 s behind live 12 s after it arrived, at
// the moment it reacts to, never before. The rules, in the order they apply:
//
//   - No playhead (the clock says false) or no sync in the entry: wall-clock
//     mode. What is held is shown at once and new messages pass straight
//     through, as without a playhead clock; counted as a fallback.
//   - A jump: between two reads the playhead moved more than playheadJump
//     more (a seek forward, a discontinuity) or less (a seek back, a stall)
//     than the local clock. Forward: what is now due is shown, but barrage
//     more than playheadLate behind the new playhead is skipped (counted) —
//     a seek must not pour out the minutes it jumped over; gifts and system
//     messages are always shown. Back or stalled: nothing is re-shown, and
//     what is held waits for the playhead to reach it again.
//   - Otherwise each message is shown when the playhead reaches its time,
//     or at once if that time has passed when it arrives (counted late, by
//     how much).
//
// The held barrage is bounded (holdMaxBarrage; the oldest moment is shown
// early beyond it, counted); gifts and system messages are never dropped.
const (
	playheadJump   = 2 * time.Second
	playheadLate   = 5 * time.Second
	holdMaxBarrage = 10_000
	// holdTick bounds the wait between two reads of the playhead clock,
	// and with it how late a held message can be shown: the skew a viewer
	// can see is at most this plus the app's own frame time.
	holdTick = 20 * time.Millisecond
	// lateAfter is the skew past which a shown message counts as late: it
	// arrived after its moment (or the playhead jumped past it).
	lateAfter = 150
)

// skewBoundsMs are the upper bounds of the display-skew histogram (ms past a
// message's playhead time when it was shown); the last bucket is open.
var skewBoundsMs = [...]int64{25, 50, 100, 150, 250, 500, 1000, 2000, 5000, 10_000}

// SkewBuckets is the number of display-skew buckets.
const SkewBuckets = len(skewBoundsMs) + 1

// holdQueue orders held messages by their playhead time. It is not safe for
// concurrent use: the hold loop owns it.
type holdQueue struct {
	items   holdHeap
	seq     uint64
	barrage int

	lastPh, lastLocal int64
	haveLast          bool

	// What release decided, for the counters.
	held, late, skipped, fallbacks, jumps, early int64
	skew                                         [SkewBuckets]int64
	// reported is the skew again in the latency buckets every SDK shares
	// with the edge: the client report's "skew".
	reported [wire.LatencyBuckets]int64
	fallback bool
}

type heldMsg struct {
	at  int64 // wire.PlayheadOf
	seq uint64
	m   Message
}

type holdHeap []heldMsg

func (h holdHeap) Len() int { return len(h) }
func (h holdHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h holdHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *holdHeap) Push(x any)   { *h = append(*h, x.(heldMsg)) }
func (h *holdHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = heldMsg{}
	*h = old[:len(old)-1]
	return x
}

// push holds m. Beyond holdMaxBarrage held barrage, the one with the
// earliest moment is returned to be shown now (early rather than lost: the
// app's render queue still applies its own rules).
func (q *holdQueue) push(m Message) (early []Message) {
	if t, ok := TakedownOf(m); ok {
		// A takedown of a message still held: it goes, and the app, which
		// never saw it, hears nothing. Of one already shown: the notice
		// goes to the app at once.
		for i := range q.items {
			if x := &q.items[i].m; x.Kind == t.Kind && x.ID == t.ID {
				if x.Kind == KindBarrage {
					q.barrage--
				}
				heap.Remove(&q.items, i)
				return nil
			}
		}
		return []Message{m}
	}
	q.seq++
	heap.Push(&q.items, heldMsg{at: wire.PlayheadOf(&m), seq: q.seq, m: m})
	q.held++
	if m.Kind == KindBarrage {
		q.barrage++
	}
	for q.barrage > holdMaxBarrage {
		// The earliest held barrage; gifts before it are shown with it.
		x := heap.Pop(&q.items).(heldMsg)
		if x.m.Kind == KindBarrage {
			q.barrage--
			q.early++
		}
		early = append(early, x.m)
	}
	return early
}

// next is the playhead time of the earliest held message.
func (q *holdQueue) next() (int64, bool) {
	if len(q.items) == 0 {
		return 0, false
	}
	return q.items[0].at, true
}

// release returns, in playhead order, what is to be shown now: ph is the
// playhead (ok false: unknown), local the local clock (ms), sync whether the
// entry allows synchronisation.
func (q *holdQueue) release(ph int64, ok, sync bool, local int64) []Message {
	if !ok || !sync {
		if !q.fallback {
			q.fallback = true
			q.fallbacks++
		}
		q.haveLast = false
		return q.drain(func(heldMsg) bool { return true }, 0, false)
	}
	q.fallback = false
	forward := false
	if q.haveLast {
		drift := (ph - q.lastPh) - (local - q.lastLocal)
		if drift > playheadJump.Milliseconds() || drift < -playheadJump.Milliseconds() {
			q.jumps++
			forward = drift > 0
		}
	}
	q.lastPh, q.lastLocal, q.haveLast = ph, local, true
	return q.drain(func(x heldMsg) bool { return x.at <= ph }, ph, forward)
}

// drain pops what due says is due, counting each one's skew against ph
// (when measured); after a forward jump it skips barrage too far behind.
func (q *holdQueue) drain(due func(heldMsg) bool, ph int64, forward bool) []Message {
	var out []Message
	for len(q.items) > 0 && due(q.items[0]) {
		x := heap.Pop(&q.items).(heldMsg)
		if x.m.Kind == KindBarrage {
			q.barrage--
		}
		if ph != 0 {
			skew := ph - x.at
			if forward && x.m.Kind == KindBarrage && skew > playheadLate.Milliseconds() {
				q.skipped++
				continue
			}
			q.observe(skew)
		}
		out = append(out, x.m)
	}
	return out
}

func (q *holdQueue) observe(skew int64) {
	if skew > lateAfter {
		q.late++
	}
	q.reported[wire.LatencyBucket(skew)]++
	i := 0
	for i < len(skewBoundsMs) && skew > skewBoundsMs[i] {
		i++
	}
	q.skew[i]++
}

// skewQuantile is the upper bound of the bucket holding the q-th quantile
// of the display skews seen (the last bucket's lower bound when it is
// there), 0 before any.
func skewQuantile(b [SkewBuckets]int64, q float64) int64 {
	var n int64
	for _, c := range b {
		n += c
	}
	if n == 0 {
		return 0
	}
	rank := int64(q*float64(n) + 0.5)
	rank = max(rank, 1)
	var seen int64
	for i, c := range b {
		seen += c
		if seen >= rank {
			if i < len(skewBoundsMs) {
				return skewBoundsMs[i]
			}
			return skewBoundsMs[len(skewBoundsMs)-1]
		}
	}
	return skewBoundsMs[len(skewBoundsMs)-1]
}

// holdLoop moves messages from the merger (in) to the app's channel at the
// app's playhead, until ctx ends; then what is still held is dropped with
// the client.
func (c *Client) holdLoop(ctx context.Context, in <-chan Message) {
	q := &c.hold
	timer := time.NewTimer(holdTick)
	defer timer.Stop()
	for {
		select {
		case m := <-in:
			c.holdMu.Lock()
			early := q.push(m)
			c.holdMu.Unlock()
			if c.show(ctx, early) != nil {
				return
			}
			continue // drain what else is waiting before reading the clock
		default:
		}
		c.holdMu.Lock()
		ph, ok := c.cfg.Playhead()
		out := q.release(ph, ok, c.sess.Load().entry.Sync, c.clk.Now().UnixMilli())
		wait := holdTick
		if at, held := q.next(); held && ok && at > ph {
			wait = min(wait, time.Duration(at-ph)*time.Millisecond)
		}
		c.holdMu.Unlock()
		if c.show(ctx, out) != nil {
			return
		}
		timer.Reset(wait)
		select {
		case m := <-in:
			c.holdMu.Lock()
			early := q.push(m)
			c.holdMu.Unlock()
			if c.show(ctx, early) != nil {
				return
			}
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}

// show hands released messages to the app: barrage only if the channel has
// room (counted as dropped otherwise, as the merger does), gifts and system
// messages waiting for it. The merger counted them delivered, and their
// latency, when they reached the hold: that is the system's latency; the
// hold's own delay is the display skew, counted apart.
func (c *Client) show(ctx context.Context, ms []Message) error {
	for _, m := range ms {
		if m.Kind == KindBarrage {
			select {
			case c.msgs <- m:
			default:
				c.stats.droppedBarrage.Add(1)
			}
			continue
		}
		select {
		case c.msgs <- m:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// sendPlayhead is the playhead a comment or announcement is sent with: the
// app's, when it has one the ingest will take (it refuses one more than 2 s
// ahead of its clock or 2 minutes behind), else none.
func (c *Client) sendPlayhead() int64 {
	if c.cfg.Playhead == nil {
		return 0
	}
	ph, ok := c.cfg.Playhead()
	if !ok || ph <= 0 {
		return 0
	}
	now := c.serverNow().UnixMilli()
	if ph > now+time.Second.Milliseconds() || ph < now-110*time.Second.Milliseconds() {
		return 0
	}
	return ph
}

// PlayheadStats are the playhead synchronisation's counters (zero without a
// Config.Playhead).
type PlayheadStats struct {
	// Held counts messages that went through the hold; Late those shown
	// more than 150 ms past their moment (they arrived after it, or a seek
	// jumped past it); Skipped barrage a forward seek jumped over; Early
	// barrage shown before its moment because the hold was full.
	Held, Late, Skipped, Early int64
	// Fallbacks counts switches to wall-clock mode (no playhead, or sync not
	// allowed by the entry); Jumps the seeks, stalls and discontinuities seen.
	Fallbacks, Jumps int64
	// Waiting is how many messages are held now.
	Waiting int64
	// SkewP50Ms and SkewP99Ms are the display skew's median and 99th
	// percentile (the upper bound of their histogram buckets): how long
	// after its playhead time a message was shown.
	SkewP50Ms, SkewP99Ms int64
}

// Playhead returns the playhead synchronisation's counters.
func (c *Client) Playhead() PlayheadStats {
	c.holdMu.Lock()
	defer c.holdMu.Unlock()
	q := &c.hold
	return PlayheadStats{
		Held: q.held, Late: q.late, Skipped: q.skipped, Early: q.early,
		Fallbacks: q.fallbacks, Jumps: q.jumps, Waiting: int64(len(q.items)),
		SkewP50Ms: skewQuantile(q.skew, 0.5), SkewP99Ms: skewQuantile(q.skew, 0.99),
	}
}

// playheadStart is where the poller starts: at live (liveMs), or, for a
// viewer synchronised to a video that is behind live, at its playhead less
// playheadJump — every message whose moment is still ahead of the video
// was stored at or after that moment (an id is stamped when the ingest
// takes it, after its sender saw it), so the segments from there hold them
// all; the CDN already has them cached. Bounded by the ingest's oldest
// playhead (2 minutes).
func (c *Client) playheadStart(liveMs int64) int64 {
	if c.cfg.Playhead == nil || !c.sess.Load().entry.Sync {
		return liveMs
	}
	ph, ok := c.cfg.Playhead()
	if !ok {
		return liveMs
	}
	start := ph - playheadJump.Milliseconds()
	return min(liveMs, max(start, liveMs-maxPlayheadBehind.Milliseconds()))
}

// maxPlayheadBehind is the ingest's oldest playhead: no message is placed
// further behind live.
const maxPlayheadBehind = 2 * time.Minute
