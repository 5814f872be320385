package ingest

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/backoff"
	"danmaku/internal/bucket"
	"danmaku/internal/clock"
	"danmaku/sdk/wire"
)

// Write-behind defaults (docs/architecture.md, "Room limits").
const (
	// defaultWindow is the least time between two Flushes of a room on a
	// node (comments gather meanwhile). It sets the round trips: three
	// nodes sharing a room flush at most 3/window times a second, 20 at
	// 150 ms, however many comments arrive; and it adds up to that much to
	// a comment's answer and display (nothing to one into a quiet room).
	defaultWindow = 150 * time.Millisecond
	// defaultHold is how long a comment admitted while the gate is
	// unreachable waits on the node for it to come back before it is
	// answered 503 (and never stored): long enough to ride out a Redis
	// restart without refusing anything.
	defaultHold = 15 * time.Second
	// maxBatch bounds the messages of one Flush (one script's arguments).
	maxBatch = 1024
	// minUndecided is the fewest undecided comments a Flush offers the
	// bucket: the offer adapts to what the bucket gave last time (twice
	// that), so that a room over its limit does not ship the comments the
	// bucket cannot take, while a bucket with tokens to spare is drained
	// in a few flushes.
	minUndecided = 64
	// maxQueued bounds a room's comments waiting on one node. Only while
	// the gate is unreachable can a queue grow (admitted comments wait
	// for it); past this, new comments are answered 503 at once.
	maxQueued = 1 << 16
	// flushTimeout bounds one Flush.
	flushTimeout = 2 * time.Second
	// maxRetryWait caps the backoff between Flushes of a failing gate.
	maxRetryWait = time.Second
)

// outcome is what became of a comment given to the writer.
type outcome uint8

const (
	outStored      outcome = iota // appended to the room's stream
	outRoomBucket                 // dropped: the room bucket was dry
	outRoomShare                  // dropped: the node's share was dry (gate unreachable)
	outUnavailable                // not stored: the gate stayed unreachable past hold, or the queue was full
	outGone                       // the client went away while the comment was queued; not stored
)

// writer is a node's write-behind path to the RoomGate: per room, a queue
// of comments and a flusher that sends them in one Flush per window.
//
// A comment is answered only once the gate has said what became of it:
// appended, or dropped by the bucket (nothing answered "ok" is lost). While
// the gate is unreachable the node decides by its share of the room's limit
// (room limit ÷ live ingest nodes), never open, never closed; what it
// admits waits for the gate to come back (up to hold) and is then appended
// whatever the bucket holds. A batch whose Flush failed is sent again
// unchanged, which the gate answers once (its batch record), so an
// ambiguous failure stores nothing twice.
type writer struct {
	gate   RoomGate
	node   string
	window time.Duration
	hold   time.Duration
	clock  clock.Clock
	// flush times the window, the hold and the retries: its Now and its
	// timers (the server's FlushClock).
	flush clock.Timers
	log   *slog.Logger
	// nodes returns how many ingest nodes share a room (≥ 1), for the
	// share while the gate is unreachable.
	nodes func() int
	// phase returns this node's offset within the window: nodes sharing
	// a room flush on evenly spaced slots of the wall clock (node i of n
	// at i·window/n), so that the room bucket is drained every window/n
	// rather than in clumps when nodes happen to flush together. The
	// admitted rate then holds the refill rate second by second, not only
	// on average. Nil: 0.
	phase func(window time.Duration) time.Duration
	m     writerMetrics

	seq   atomic.Uint64
	mu    sync.Mutex
	rooms map[string]*roomQueue
}

type writerMetrics struct {
	flushes   *prometheus.CounterVec
	flushSize prometheus.Histogram
	queued    prometheus.Gauge
	failing   prometheus.Gauge
}

func newWriterMetrics() writerMetrics {
	return writerMetrics{
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "danmaku_ingest_flushes_total",
			Help: "Flushes of a room's write-behind queue to the room gate (one round trip each), by result: ok, replayed (a resent batch the gate had stored), error.",
		}, []string{"result"}),
		flushSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "danmaku_ingest_flush_messages",
			Help:    "Comments per flush.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "danmaku_ingest_queued_comments",
			Help: "Comments waiting on this node for their room's next flush.",
		}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "danmaku_ingest_gate_failing_rooms",
			Help: "Rooms whose gate is unreachable from this node: they run on the node's share of the room limit.",
		}),
	}
}

func (m writerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.flushes, m.flushSize, m.queued, m.failing}
}

// pending is one comment in a room's queue.
type pending struct {
	msg wire.Message
	at  time.Time // arrival, real time
	// admitted: decided by the node's share (the gate was unreachable);
	// else undecided, for the bucket to decide.
	admitted bool
	// sent: part of a batch given to the gate; it can no longer be
	// withdrawn.
	sent bool
	// answered: done has been sent to (a comment of a failing batch is
	// answered at hold while the batch is still resent).
	answered bool
	done     chan outcome // buffered: one answer, so the flusher never blocks
}

// answer tells the waiting request what became of p, once. Called with
// the room's lock held.
func (p *pending) answer(o outcome) {
	if !p.answered {
		p.answered = true
		p.done <- o
	}
}

// roomLimit is the bucket a room's comments are judged by.
type roomLimit struct{ capacity, perSec float64 }

// roomQueue is one room's write-behind state on this node.
type roomQueue struct {
	w    *writer
	room string
	kick chan struct{}

	mu    sync.Mutex
	limit roomLimit
	// queue: admitted comments first, then undecided ones, each in arrival
	// order (a failing gate turns every undecided comment into a decided
	// one, and only undecided ones arrive while it answers).
	queue []*pending
	// head is a batch whose Flush failed: it is sent again, unchanged,
	// before anything else.
	head    *sentBatch
	running bool
	// offer is how many undecided comments the next Flush offers; dry says
	// the last Flush found the bucket dry (the next waits a whole window
	// from it, for the refill).
	offer     int
	dry       bool
	lastFlush time.Time
	// failing: the gate is unreachable; share is the node's bucket then.
	failing  bool
	failures int
	retryAt  time.Time
	share    bucket.Bucket
}

type sentBatch struct {
	batch   Batch
	entries []*pending
}

func newWriter(gate RoomGate, node string, window, hold time.Duration, c clock.Clock, flush clock.Timers, log *slog.Logger, nodes func() int, phase func(time.Duration) time.Duration) *writer {
	if flush == nil {
		flush = clock.Real{}
	}
	return &writer{gate: gate, node: node, window: window, hold: hold, clock: c, flush: flush, log: log, nodes: nodes, phase: phase, m: newWriterMetrics(), rooms: map[string]*roomQueue{}}
}

func (w *writer) queueOf(room string) *roomQueue {
	w.mu.Lock()
	defer w.mu.Unlock()
	q, ok := w.rooms[room]
	if !ok {
		q = &roomQueue{w: w, room: room, kick: make(chan struct{}, 1), offer: minUndecided}
		w.rooms[room] = q
	}
	return q
}

// submit queues m for room and waits until the gate has decided it (or
// ctx is done: the client went away).
func (w *writer) submit(ctx context.Context, room string, m wire.Message, lim roomLimit) outcome {
	q := w.queueOf(room)
	p := &pending{msg: m, at: w.flush.Now(), done: make(chan outcome, 1)}
	q.mu.Lock()
	q.limit = lim
	if len(q.queue) >= maxQueued {
		q.mu.Unlock()
		return outUnavailable
	}
	if q.failing {
		if !q.takeShare(w.clock.Now()) {
			q.mu.Unlock()
			return outRoomShare
		}
		p.admitted = true
	}
	q.queue = append(q.queue, p)
	w.m.queued.Inc()
	if !q.running {
		q.running = true
		go q.run()
	} else if q.full() {
		q.poke()
	}
	q.mu.Unlock()

	select {
	case o := <-p.done:
		return o
	case <-ctx.Done():
		// The client went away. Unsent, the comment is withdrawn (and the
		// flusher told, so that an empty queue lets it stop); sent, the
		// gate decides it, and nobody hears.
		q.mu.Lock()
		if !p.sent && q.remove(p) {
			q.poke()
		}
		q.mu.Unlock()
		return outGone
	}
}

// poke wakes the flusher to look at the queue again.
func (q *roomQueue) poke() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// takeShare takes a token from the node's share of the room's bucket.
func (q *roomQueue) takeShare(now time.Time) bool {
	n := float64(max(1, q.w.nodes()))
	return q.share.Take(now, max(1, q.limit.capacity/n), q.limit.perSec/n, 1)
}

// remove takes p out of the queue; it reports whether p was there.
func (q *roomQueue) remove(p *pending) bool {
	for i, e := range q.queue {
		if e == p {
			q.queue = append(q.queue[:i], q.queue[i+1:]...)
			q.w.m.queued.Dec()
			return true
		}
	}
	return false
}

// full reports whether the queue holds a whole Flush: the most a batch
// takes, or (with tokens to spare) the undecided comments it offers.
func (q *roomQueue) full() bool {
	if len(q.queue) >= maxBatch {
		return true
	}
	if q.dry || q.failing {
		return false
	}
	und := 0
	for i := len(q.queue) - 1; i >= 0 && !q.queue[i].admitted; i-- {
		und++
	}
	return und >= q.offer
}

// due returns when the next Flush should go: zero if now, and ok false
// when there is nothing to send.
func (q *roomQueue) due(now time.Time) (time.Time, bool) {
	switch {
	case q.head != nil:
		return q.retryAt, true
	case len(q.queue) == 0:
		return time.Time{}, false
	case q.failing:
		return q.retryAt, true
	case q.queue[0].admitted, q.full():
		// Admitted comments (of an outage just over) go at once.
		return time.Time{}, true
	}
	// One Flush per window, on the leading edge: a comment into a quiet
	// room goes at once, and under load each waits at most a window (the
	// round trips are the same; the latency is not). After a dry Flush
	// this also gives the bucket a window to refill. Under load the
	// flushes settle on this node's slots (phase), a window apart.
	return later(q.w.slot(q.lastFlush.Add(q.w.window/2)), q.queue[0].at), true
}

// slot returns the first of this node's flush slots at or after t: the
// times t' with t' ≡ phase (mod window) on the wall clock (nodes' clocks
// agree to a few ms, which is all the spacing needs).
func (w *writer) slot(t time.Time) time.Time {
	win := int64(w.window)
	if win <= 0 {
		return t
	}
	var off int64
	if w.phase != nil {
		off = int64(w.phase(w.window)) % win
	}
	r := ((t.UnixNano()-off)%win + win) % win
	if r == 0 {
		return t
	}
	return t.Add(time.Duration(win - r))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// run is the room's flusher. It stops when the queue is empty; the next
// comment starts it again.
func (q *roomQueue) run() {
	timer, fired := q.w.flush.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := q.w.flush.Now()
		q.mu.Lock()
		q.expire(now)
		at, ok := q.due(now)
		if !ok {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if wait := at.Sub(now); wait > 0 {
			timer.Reset(wait) // drops a stale value (Go 1.23 timers; Fake too)
			select {
			case <-fired:
			case <-q.kick:
				timer.Stop()
			}
			continue // re-judge: a kick may only mean "look again"
		}
		q.flush()
	}
}

// expire answers the comments that waited past hold for a failing gate.
// Unsent ones are not stored. Those of the failing batch are answered too
// (the client is not kept waiting beyond hold), but the batch is still
// resent until the gate answers: it may have been stored already, and a
// batch is never half-kept.
func (q *roomQueue) expire(now time.Time) {
	if !q.failing {
		return
	}
	if q.head != nil {
		for _, p := range q.head.entries {
			if now.Sub(p.at) >= q.w.hold {
				p.answer(outUnavailable)
			}
		}
	}
	if len(q.queue) == 0 || now.Sub(q.queue[0].at) < q.w.hold {
		return
	}
	kept := q.queue[:0]
	for _, p := range q.queue {
		if now.Sub(p.at) >= q.w.hold {
			p.answer(outUnavailable)
			q.w.m.queued.Dec()
			continue
		}
		kept = append(kept, p)
	}
	clear(q.queue[len(kept):])
	q.queue = kept
}

// cut takes the next batch off the queue: the admitted comments first,
// then up to offer undecided ones, maxBatch in all.
func (q *roomQueue) cut() *sentBatch {
	n, admitted := 0, 0
	for n < len(q.queue) && n < maxBatch && q.queue[n].admitted {
		n++
	}
	admitted = n
	for n < len(q.queue) && n < maxBatch && n-admitted < q.offer {
		n++
	}
	sb := &sentBatch{entries: make([]*pending, n)}
	copy(sb.entries, q.queue)
	q.queue = append(q.queue[:0], q.queue[n:]...)
	msgs := make([]wire.Message, n)
	for i, p := range sb.entries {
		p.sent = true
		msgs[i] = p.msg
	}
	id := q.w.node + "-" + strconv.FormatUint(q.w.seq.Add(1), 36)
	sb.batch = Batch{ID: id, Msgs: msgs, Admitted: admitted, Capacity: q.limit.capacity, PerSec: q.limit.perSec}
	q.w.m.queued.Sub(float64(n))
	return sb
}

// flush sends the head batch, or a new one, and settles what it holds.
func (q *roomQueue) flush() {
	q.mu.Lock()
	sb := q.head
	if sb == nil {
		sb = q.cut()
	}
	q.mu.Unlock()

	sent := q.w.flush.Now()
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	res, err := q.w.gate.Flush(ctx, q.room, sb.batch)
	cancel()

	q.mu.Lock()
	defer q.mu.Unlock()
	since := sent.Sub(q.lastFlush)
	q.lastFlush = sent
	if err != nil {
		q.w.m.flushes.WithLabelValues("error").Inc()
		q.head = sb // sent again, unchanged: the gate answers it once
		q.failures++
		q.retryAt = q.w.flush.Now().Add(backoff.Policy{Base: q.w.window, Max: maxRetryWait}.Delay(q.failures))
		if !q.failing {
			q.failing = true
			q.w.m.failing.Inc()
			q.w.log.Warn("ingest: room gate unreachable; admitting by this node's share", "room", q.room, "nodes", q.w.nodes(), "err", err)
			// The share starts full: the node's part of the burst the
			// room bucket would have allowed.
			q.share = bucket.Bucket{}
			now := q.w.clock.Now()
			kept := q.queue[:0]
			for _, p := range q.queue {
				if q.takeShare(now) {
					p.admitted = true
					kept = append(kept, p)
					continue
				}
				p.answer(outRoomShare)
				q.w.m.queued.Dec()
			}
			clear(q.queue[len(kept):])
			q.queue = kept
		}
		return
	}
	result := "ok"
	if res.Replayed {
		result = "replayed"
	}
	q.w.m.flushes.WithLabelValues(result).Inc()
	q.w.m.flushSize.Observe(float64(len(sb.entries)))
	if q.failing {
		q.failing = false
		q.w.m.failing.Dec()
		q.w.log.Info("ingest: room gate reachable again", "room", q.room, "failures", q.failures)
	}
	q.head, q.failures = nil, 0
	b := sb.batch
	undecided := len(b.Msgs) - b.Admitted
	for i, p := range sb.entries {
		if i < b.Admitted+res.Granted {
			p.answer(outStored)
		} else {
			p.answer(outRoomBucket)
		}
	}
	q.dry = res.Granted < undecided
	if !q.dry {
		q.offer = min(2*q.offer, maxBatch)
		return
	}
	// Dry: offer twice what the bucket gave, but never less than twice
	// what the whole room refills between two of this node's flushes —
	// else, when flushes come late (a busy node), the offers fall below
	// the refill, the bucket fills up unasked and wastes its tokens, and
	// the admitted rate swings instead of holding the refill rate.
	refill := 2 * b.PerSec * min(max(since, q.w.window), time.Second).Seconds()
	q.offer = min(max(2*res.Granted, minUndecided, int(min(refill, maxBatch))), maxBatch)
	// The bucket was dry when this batch reached it: the undecided
	// comments that were waiting then would get nothing either.
	kept := q.queue[:0]
	for _, p := range q.queue {
		if !p.admitted && p.at.Before(sent) {
			p.answer(outRoomBucket)
			q.w.m.queued.Dec()
			continue
		}
		kept = append(kept, p)
	}
	clear(q.queue[len(kept):])
	q.queue = kept
}
