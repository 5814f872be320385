package sdk

import (
	"cmp"
	"fmt"
	"math"
	"sync"
	"time"
)

// Render queue defaults.
const (
	// A phone screen shows about 32 comments before they overlap into noise.
	defaultRenderVisible = 32
	// 120 waiting comments are half a minute of screen time at the default
	// rate (32 slots / 8 s = 4 a second): anything older is stale for a live
	// show.
	defaultRenderBuffer = 120
	// About the time a scrolling comment takes to cross a phone screen at
	// the usual speed.
	defaultRenderDisplay = 8 * time.Second
)

// RenderConfig configures a RenderQueue. Every field has a default named on
// it; negative values are refused.
type RenderConfig struct {
	// Visible is the number of on-screen slots: at most this many messages
	// are shown at once. Zero: 32.
	Visible int
	// Buffer is how many messages may wait for a slot. A full buffer drops
	// its oldest barrage; gifts and system messages are never dropped and
	// may take the buffer beyond Buffer when it holds nothing else.
	// Zero: 120.
	Buffer int
	// Display is how long a message holds its slot once Next has handed it
	// to the UI; set it to the renderer's animation time. Zero: 8 s.
	Display time.Duration
	// Clock times the slots. Nil: the system clock.
	Clock Clock
}

// RenderStats are a RenderQueue's counters since NewRenderQueue. Fields are
// int64 so that the struct binds to mobile languages as it is.
type RenderStats struct {
	// Pushed counts messages given to Push.
	Pushed int64
	// Shown counts messages handed to the UI by Next.
	Shown int64
	// DroppedOverflow counts barrage dropped for a full buffer while the
	// queue was shown.
	DroppedOverflow int64
	// DroppedHidden counts barrage dropped for a full buffer while the queue
	// was hidden (and so not draining).
	DroppedHidden int64
	// BeyondBuffer counts gifts and system messages queued while the buffer
	// was full with no barrage left to drop: each took the buffer one
	// beyond Buffer.
	BeyondBuffer int64
	// CollapsedGifts counts gifts that arrived while hidden with the buffer
	// full of gifts and were folded into a waiting gift (same sender, gift
	// and value; else same gift and value, sender cleared): the waiting
	// gift's Count grew by theirs, so no gift is lost from the totals.
	CollapsedGifts int64
	// RemovedWaiting counts messages taken down by a moderator while they
	// waited for a slot: removed before the UI saw them.
	RemovedWaiting int64
	// RemovedShown counts messages taken down while on screen: their slot
	// was freed and Next handed the UI a KindTakedown notice naming them.
	RemovedShown int64
}

// Drops is the sum of the drop counters: what the client reports to the edge
// as {"drops": N} (render-queue drops, danmaku_client_render_drops_total).
func (s RenderStats) Drops() int64 { return s.DroppedOverflow + s.DroppedHidden }

// RenderQueue decides which messages are on screen. The app pushes what
// Client.Messages delivers; the UI pulls with Next whenever it can show
// more. It models a danmaku renderer: Visible slots, each held by one
// message for Display from the moment Next hands it out, and a bounded
// buffer of messages waiting for a slot.
//
// Next serves gifts and system messages before waiting barrage, and each
// kind in the order it was pushed: a paid gift or a host announcement must
// not wait behind half a minute of comments. A full buffer drops its oldest
// barrage (counted in RenderStats); a gift or system message is never
// dropped.
//
// While hidden (SetHidden(true): the app is in the background, or the
// viewer turned danmaku off) Next hands out nothing, the screen is empty,
// and messages keep arriving into the buffer, which still drops its oldest
// barrage; NewCount counts them for an "N new" badge. Gifts stay bounded
// too: once the buffer is full of gifts, a new one is folded into a waiting
// gift of the same sender, gift and value (or, failing that, of the same
// gift and value, with the sender cleared: "several viewers"), its count
// added, so a long background period holds at most one entry per gift in
// the catalogue and the sum of gift counts is kept exactly. Shown again, the
// queue resumes with what the buffer kept, oldest first: comments answer
// each other and the show, so they read in order; the drop policy already
// bounds how stale the oldest kept one is, and a busy room (where staleness
// would matter) keeps a full buffer, hidden or not.
//
// All methods are safe for concurrent use: Push is meant for the goroutine
// that reads Client.Messages, the rest for the UI thread. None blocks on
// anything but a short internal lock, and the UI-facing methods take and
// return plain values (no channels), so they bind to mobile languages
// through a thin facade.
type RenderQueue struct {
	visible int
	buffer  int
	display time.Duration
	clk     Clock

	mu       sync.Mutex
	barrage  renderRing[Message]    // oldest first; never more than buffer
	priority renderRing[Message]    // gifts and system messages, oldest first
	slots    renderRing[renderSlot] // by expiry, oldest first
	// removals are KindTakedown notices for messages on screen, served by
	// Next before anything else.
	removals renderRing[Message]
	hidden   bool
	newCount int
	stats    RenderStats
}

// NewRenderQueue checks cfg, applies its defaults and returns an empty,
// shown queue. Its errors wrap ErrConfig.
func NewRenderQueue(cfg RenderConfig) (*RenderQueue, error) {
	if cfg.Visible < 0 || cfg.Buffer < 0 || cfg.Display < 0 {
		return nil, fmt.Errorf("%w: render queue: Visible %d, Buffer %d, Display %v: negative",
			ErrConfig, cfg.Visible, cfg.Buffer, cfg.Display)
	}
	q := &RenderQueue{
		visible: cmp.Or(cfg.Visible, defaultRenderVisible),
		buffer:  cmp.Or(cfg.Buffer, defaultRenderBuffer),
		display: cmp.Or(cfg.Display, defaultRenderDisplay),
		clk:     clockOr(cfg.Clock),
	}
	// Both fill up in ordinary use: allocate once so that Push and Next
	// do not.
	q.barrage.init(q.buffer)
	q.slots.init(q.visible)
	return q, nil
}

// renderSlot is one taken slot: until when, and by which message (its id
// and lane, so that a takedown can free it; no string is built per slot).
type renderSlot struct {
	until time.Time
	id    string
	lane  byte
}

// laneOf is the first byte of m's identity (wire.Message.Identity): 'b'
// barrage, 'l' the live lane, 's' a site-wide broadcast.
func laneOf(m *Message) byte {
	switch {
	case m.Site:
		return 's'
	case m.Kind == KindBarrage:
		return 'b'
	}
	return 'l'
}

// Push queues m for display. A KindTakedown notice (TakedownOf) is not
// queued: it removes its target (Remove) and, if the target is on screen,
// is handed to the UI by the next call of Next so that it removes the
// element. When the buffer is full it drops the oldest
// barrage to make room; with no barrage in it, a new barrage message is
// dropped itself and a gift or system message is queued beyond the buffer.
// Kinds this version does not know are treated as barrage.
func (q *RenderQueue) Push(m Message) {
	if t, ok := TakedownOf(m); ok {
		q.mu.Lock()
		defer q.mu.Unlock()
		if _, shown := q.removeLocked(t); shown {
			q.removals.push(m)
		}
		return
	}
	keep := m.Kind == KindGift || m.Kind == KindSystem
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stats.Pushed++
	if q.hidden {
		q.newCount++
	}
	if q.barrage.len()+q.priority.len() >= q.buffer {
		if q.hidden && m.Kind == KindGift && q.barrage.len() == 0 && q.collapse(m) {
			q.stats.CollapsedGifts++
			return
		}
		switch {
		case q.barrage.len() > 0:
			q.barrage.pop()
			q.countDrop()
		case !keep:
			q.countDrop()
			return
		default:
			q.stats.BeyondBuffer++
		}
	}
	if keep {
		q.priority.push(m)
	} else {
		q.barrage.push(m)
	}
}

// collapse folds gift m into a waiting gift: one of the same sender, gift
// and value, else one of the same gift and value (whose sender is then
// cleared). It reports whether it found one.
func (q *RenderQueue) collapse(m Message) bool {
	same := func(w *Message) bool { return w.Kind == KindGift && w.Gift == m.Gift && w.Value == m.Value }
	i := q.priority.find(func(w *Message) bool { return same(w) && w.User == m.User })
	if i < 0 {
		i = q.priority.find(same)
	}
	if i < 0 {
		return false
	}
	w := q.priority.at(i)
	if w.User != m.User {
		w.User, w.Nick, w.Avatar = "", "", ""
	}
	// The ids no longer say which gifts the entry stands for; its count
	// does. Count saturates rather than wraps.
	w.Merged = nil
	w.Count = uint32(min(uint64(max(w.Count, 1))+uint64(max(m.Count, 1)), math.MaxUint32))
	return true
}

func (q *RenderQueue) countDrop() {
	if q.hidden {
		q.stats.DroppedHidden++
	} else {
		q.stats.DroppedOverflow++
	}
}

// Next returns the next message to show and takes a slot for it, which it
// holds for RenderConfig.Display. It returns false when the queue is hidden,
// every slot is taken, or nothing waits. The UI calls it on every frame (or
// on a short timer) until it returns false.
func (q *RenderQueue) Next() (Message, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clk.Now()
	q.expire(now)
	if q.removals.len() > 0 {
		m := q.removals.pop()
		q.removals.shrink(q.visible)
		return m, true
	}
	if q.hidden || q.slots.len() >= q.visible {
		return Message{}, false
	}
	var m Message
	switch {
	case q.priority.len() > 0:
		m = q.priority.pop()
		// A burst of gifts may have grown it far past the buffer: give
		// the memory back once it has drained.
		q.priority.shrink(q.buffer)
	case q.barrage.len() > 0:
		m = q.barrage.pop()
	default:
		return Message{}, false
	}
	q.slots.push(renderSlot{now.Add(q.display), m.ID, laneOf(&m)})
	q.stats.Shown++
	return m, true
}

// expire frees the slots whose display time has passed at now. Every slot
// is held for the same time and taken under the lock with the clock read
// under it, so they free in the order they were taken.
func (q *RenderQueue) expire(now time.Time) {
	for q.slots.len() > 0 && !now.Before(q.slots.peek().until) {
		q.slots.pop()
	}
}

// SetHidden hides or shows the queue. Hiding empties the screen (the UI
// removes what it shows; every slot is free when shown again) and starts
// NewCount from zero; showing resets NewCount and resumes Next with the
// buffered messages, gifts and system messages first, each kind oldest
// first. Setting the state the queue is already in does nothing.
func (q *RenderQueue) SetHidden(hidden bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if hidden == q.hidden {
		return
	}
	q.hidden = hidden
	q.newCount = 0
	if hidden {
		q.slots.reset()
		q.removals.reset()
	}
}

// Remove takes a message down: the waiting copy of the message of kind
// kind with id id is dropped, and if Next handed it to the UI and its
// display time has not passed, its slot is freed. It reports which it
// found; the caller removes an element that was shown. Push of a
// KindTakedown notice does the same and hands the notice back through Next
// when the message was shown, for apps that draw only from Next.
func (q *RenderQueue) Remove(id string, kind Kind) (waiting, shown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.removeLocked(TakenDown{ID: id, Kind: kind})
}

func (q *RenderQueue) removeLocked(t TakenDown) (waiting, shown bool) {
	lane := laneOf(&Message{Kind: t.Kind})
	same := func(m *Message) bool { return m.ID == t.ID && laneOf(m) == lane }
	for _, r := range []*renderRing[Message]{&q.barrage, &q.priority} {
		if i := r.find(same); i >= 0 {
			r.removeAt(i)
			waiting = true
		}
	}
	if waiting {
		q.stats.RemovedWaiting++
	}
	q.expire(q.clk.Now())
	if i := q.slots.find(func(s *renderSlot) bool { return s.id == t.ID && s.lane == lane }); i >= 0 {
		q.slots.removeAt(i)
		q.stats.RemovedShown++
		shown = true
	}
	return waiting, shown
}

// Hidden reports whether the queue is hidden.
func (q *RenderQueue) Hidden() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.hidden
}

// NewCount is the number of messages pushed since the queue was hidden, for
// an "N new" badge; zero while shown. It counts arrivals, so it may exceed
// what the buffer kept of them.
func (q *RenderQueue) NewCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.newCount
}

// Len is the number of messages waiting for a slot.
func (q *RenderQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.barrage.len() + q.priority.len()
}

// OnScreen is the number of slots taken now: messages handed out by Next
// whose display time has not passed. Zero while hidden.
func (q *RenderQueue) OnScreen() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.expire(q.clk.Now())
	return q.slots.len()
}

// Stats returns a snapshot of the counters.
func (q *RenderQueue) Stats() RenderStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

// Drops is RenderStats.Drops: every message the queue has dropped since
// NewRenderQueue. It only grows; a reporter sends the difference from its
// previous report, so a report that fails is simply included in the next.
func (q *RenderQueue) Drops() int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats.Drops()
}

// renderRing is a FIFO on a circular buffer that doubles when full. It is
// not safe for concurrent use.
type renderRing[T any] struct {
	buf  []T
	head int
	n    int
}

func (r *renderRing[T]) init(capacity int) { r.buf = make([]T, capacity) }

func (r *renderRing[T]) len() int { return r.n }

func (r *renderRing[T]) push(v T) {
	if r.n == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

// find returns the index (0: oldest) of the first element f accepts, or -1.
func (r *renderRing[T]) find(f func(*T) bool) int {
	for i := range r.n {
		if f(&r.buf[(r.head+i)%len(r.buf)]) {
			return i
		}
	}
	return -1
}

// at returns a pointer to the i-th oldest element.
func (r *renderRing[T]) at(i int) *T { return &r.buf[(r.head+i)%len(r.buf)] }

// removeAt removes the i-th oldest element, keeping the others' order.
func (r *renderRing[T]) removeAt(i int) {
	for ; i < r.n-1; i++ {
		*r.at(i) = *r.at(i + 1)
	}
	var zero T
	*r.at(r.n - 1) = zero
	r.n--
}

// peek returns the oldest element; the ring must not be empty.
func (r *renderRing[T]) peek() T { return r.buf[r.head] }

// pop removes and returns the oldest element; the ring must not be empty.
func (r *renderRing[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero // let the strings go
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v
}

func (r *renderRing[T]) grow() {
	buf := make([]T, max(2*len(r.buf), 8))
	for i := range r.n {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}

// shrink drops the storage of an empty ring larger than limit.
func (r *renderRing[T]) shrink(limit int) {
	if r.n == 0 && len(r.buf) > limit {
		r.buf, r.head = nil, 0
	}
}

func (r *renderRing[T]) reset() {
	clear(r.buf)
	r.head, r.n = 0, 0
}
