package loadgen

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"danmaku/sdk"
	"danmaku/sdk/wire"
)

// pollerState is one SDK viewer timing delivery.
type pollerState struct {
	id     string
	c      *sdk.Client
	done   chan struct{} // closed when Run has returned
	runErr error         // valid once done is closed
}

// decodeEvent is a decode whose send was not yet answered when it was
// decoded (the POST's answer and the segment raced): it is timed at the end.
type decodeEvent struct {
	gift   bool
	poller int // index in Generator.pollers
	seq    int64
	id     string
	at     time.Time
}

// maxPending bounds the decodes kept for later: gifts of other senders in
// the room are not the generator's and would otherwise pile up.
const maxPending = 100_000

// pollerCounters are what the generator counts of the pollers' decodes.
type pollerCounters struct {
	pairs, giftPairs atomic.Int64 // (poller, own comment) and (poller, own gift) decodes
	joinErrors       counterMap
	wg               sync.WaitGroup
}

func (g *Generator) startPollers(ctx context.Context) {
	n := g.cfg.share(g.cfg.Pollers)
	for i := range n {
		idx := g.cfg.Shard + i*g.cfg.Shards
		id := g.cfg.UserPrefix + "p" + strconv.Itoa(idx)
		ticket, err := g.ticketFor(ctx, id, "p"+strconv.Itoa(idx%10_000))
		if err != nil {
			g.pc.joinErrors.add(err.Error(), 1)
			continue
		}
		c, err := sdk.New(sdk.Config{
			EntryURL: g.cfg.GSLB, Room: g.cfg.Room, Ticket: ticket,
			HTTPClient: g.pollHC, Logger: g.cfg.Logger,
			// Every poller must be polling before the first comment; the
			// join storm of a hundred is nothing to a gslb.
			FirstJoinJitter: -1,
			NoEdge:          !g.cfg.PollerEdge,
		})
		if err != nil {
			g.pc.joinErrors.add(err.Error(), 1)
			continue
		}
		p := &pollerState{id: id, c: c, done: make(chan struct{})}
		pi := len(g.pollers)
		g.pollers = append(g.pollers, p)
		g.pc.wg.Go(func() {
			defer close(p.done)
			if p.runErr = g.joins.wait(ctx); p.runErr != nil {
				return
			}
			p.runErr = c.Run(ctx)
		})
		g.pc.wg.Go(func() { g.consume(pi, c) })
	}
}

// consume reads poller pi's merged stream (it must be read, or the SDK
// drops barrage) and times the generator's own comments and gifts.
func (g *Generator) consume(pi int, c *sdk.Client) {
	for m := range c.Messages() {
		now := time.Now()
		switch m.Kind {
		case sdk.KindBarrage:
			if seq, ok := g.ownSeq(m.Text); ok {
				g.barrageDecoded(seq, m.ID, now)
			}
		case sdk.KindGift:
			if len(m.Merged) == 0 {
				g.giftDecoded(pi, m.ID, now)
			}
			for _, id := range m.Merged {
				g.giftDecoded(pi, id, now)
			}
		}
	}
}

func (g *Generator) barrageDecoded(seq int64, id string, at time.Time) {
	g.seqs.decoded(seq)
	g.pc.pairs.Add(1)
	if acc := g.seqs.acceptedAt(seq); acc != 0 {
		g.observeBarrageE2E(at.Sub(time.Unix(0, acc)))
		g.observeBarrageSplit(acc, id, at)
		return
	}
	g.addPending(decodeEvent{seq: seq, id: id, at: at})
}

// observeBarrageSplit cuts one (poller, comment) delivery at the stream
// id's time (when the ingest appended it, by the store clock) and at the
// end of its segment's slot: the send's way to the store, the wait for the
// slot to end (0 to a segment), and the slot's end to the decode (the
// publish delay, the clock margin, the poll, the CDN, the decode). The
// store clock is taken for the generator's: true on one machine, within
// NTP's error across machines.
func (g *Generator) observeBarrageSplit(schedNs int64, id string, decoded time.Time) {
	dur := g.segmentMs.Load()
	idMs, _, err := wire.ParseID(id)
	if err != nil || dur <= 0 {
		return
	}
	stored := time.UnixMilli(idMs)
	end := time.UnixMilli(wire.Timing{SegmentMs: dur}.End(idMs / dur))
	g.lat.toStore.Observe(stored.Sub(time.Unix(0, schedNs)))
	g.lat.toEnd.Observe(end.Sub(stored))
	g.lat.afterEnd.Observe(decoded.Sub(end))
}

func (g *Generator) giftDecoded(pi int, id string, at time.Time) {
	if e := (decodeEvent{gift: true, poller: pi, id: id, at: at}); !g.resolve(e) {
		g.addPending(e) // decoded before its answer was read
	}
}

func (g *Generator) addPending(e decodeEvent) {
	g.pendingMu.Lock()
	defer g.pendingMu.Unlock()
	if len(g.pending) < maxPending {
		g.pending = append(g.pending, e)
		return
	}
	g.pendingOver.Add(1)
}

// startResolver matches the decodes that beat their answers every second
// until the returned stop is called, not only at the end: a gift reaches
// a thousand viewers through the edge before its POST's answer is read,
// and the pending decodes would outgrow their bound within the run.
func (g *Generator) startResolver() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { g.resolveEvery(time.Second, done) })
	return func() { close(done); wg.Wait() }
}

// resolveEvery matches the pending decodes to their answers every period
// until done is closed.
func (g *Generator) resolveEvery(period time.Duration, done <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			g.resolvePending(false)
		}
	}
}

// pendingLife is how long a decode waits for its POST's answer before it
// is judged never answered: the longest a request takes (HTTPTimeout),
// for a gift through all its retries (GiftRetryFor).
func (g *Generator) pendingLife() time.Duration {
	return g.cfg.GiftRetryFor + g.cfg.HTTPTimeout
}

// resolvePending times the decodes that beat their answers. A comment
// decoded but never answered 200 is counted: the ingest stored it and the
// answer was lost (a timeout), which the report should show. A gift never
// answered is not the generator's (another sender's in the room). Before
// the end (final false) a decode whose answer may still come — younger
// than pendingLife — is kept for the next call.
func (g *Generator) resolvePending(final bool) {
	g.pendingMu.Lock()
	pending := g.pending
	g.pending = nil
	g.pendingMu.Unlock()
	var keep []decodeEvent
	for _, e := range pending {
		if g.resolve(e) {
			continue
		}
		if !final && time.Since(e.at) < g.pendingLife() {
			keep = append(keep, e)
			continue
		}
		if !e.gift {
			g.decodeUnacc.Add(1)
		}
	}
	if len(keep) > 0 {
		g.pendingMu.Lock()
		g.pending = append(keep, g.pending...)
		g.pendingMu.Unlock()
	}
}

// resolve times decode e if its POST's answer is in, and reports whether
// it was.
func (g *Generator) resolve(e decodeEvent) bool {
	if !e.gift {
		acc := g.seqs.acceptedAt(e.seq)
		if acc == 0 {
			return false
		}
		g.observeBarrageE2E(e.at.Sub(time.Unix(0, acc)))
		g.observeBarrageSplit(acc, e.id, e.at)
		return true
	}
	g.giftMu.Lock()
	s := g.giftIDs[e.id]
	if s != nil {
		s.seen(e.poller, g.cfg.share(g.cfg.Pollers))
	}
	g.giftMu.Unlock()
	if s == nil {
		return false
	}
	g.pc.giftPairs.Add(1)
	g.observeGiftE2E(e.at.Sub(time.Unix(0, s.sentNs)))
	return true
}

// awaitPollers waits until every poller has joined (or failed to).
func (g *Generator) awaitPollers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.joinTimeout())
	defer cancel()
	for {
		waiting := 0
		for _, p := range g.pollers {
			select {
			case <-p.done:
			default:
				if p.c.Entry().Token == "" {
					waiting++
				}
			}
		}
		if waiting == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil // the report says how many joined
			}
			return fmt.Errorf("loadgen: joining pollers: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (g *Generator) waitPollers() { g.pc.wg.Wait() }

// joinedPollers are the pollers polling now.
func (g *Generator) joinedPollers() int {
	n := 0
	for _, p := range g.pollers {
		select {
		case <-p.done:
		default:
			if p.c.Entry().Token != "" {
				n++
			}
		}
	}
	return n
}

// pollerStats sums the pollers' SDK counters (maxima for the gauges).
func (g *Generator) pollerStats() sdk.Stats {
	var t sdk.Stats
	for _, p := range g.pollers {
		s := p.c.Stats()
		t.SegmentsFetched += s.SegmentsFetched
		t.FirstPollHits += s.FirstPollHits
		t.NotFoundRetries += s.NotFoundRetries
		t.MismatchRetries += s.MismatchRetries
		t.FetchErrors += s.FetchErrors
		t.DecodeErrors += s.DecodeErrors
		t.SeqGaps += s.SeqGaps
		t.JumpsToLive += s.JumpsToLive
		t.SkippedSeconds += s.SkippedSeconds
		t.EdgeConnects += s.EdgeConnects
		t.EdgeReconnects += s.EdgeReconnects
		t.EdgeFrames += s.EdgeFrames
		t.Delivered += s.Delivered
		t.Duplicates += s.Duplicates
		t.DroppedBarrage += s.DroppedBarrage
		t.EntryFetches += s.EntryFetches
		t.LastSegmentLagMs = max(t.LastSegmentLagMs, s.LastSegmentLagMs)
		t.ClockMarginMs = max(t.ClockMarginMs, s.ClockMarginMs)
	}
	return t
}

// drain waits for the pollers to decode what was sent: until every
// accepted comment and gift has reached every poller, or the drain time is
// up (comments the ingest dropped silently or the slicer sampled away
// never arrive, so under load the whole drain is spent).
func (g *Generator) drain(ctx context.Context) {
	seg := time.Duration(max(g.segmentMs.Load(), 250)) * time.Millisecond
	pub := time.Duration(g.publishDelayMs.Load()) * time.Millisecond
	d := g.cfg.Drain
	if d == 0 {
		d = 2*seg + pub + 2*time.Second
	}
	if len(g.pollers) == 0 {
		// Nothing to decode; but the slicer counts what it sampled away
		// when it writes the segment, after the last comment's slot.
		d = min(d, seg+pub+500*time.Millisecond)
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n := int64(g.joinedPollers()); n > 0 {
			g.giftMu.Lock()
			gifts := int64(len(g.giftIDs))
			g.giftMu.Unlock()
			traced := g.answeredOK.Load() - g.keywordOK.Load()
			if g.pc.pairs.Load() >= traced*n && g.pc.giftPairs.Load() >= gifts*n {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
