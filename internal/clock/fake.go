package clock

import (
	"context"
	"sync"
	"time"
)

// Fake is a clock that moves only when told to, with timers, tickers and
// AfterFuncs that fire when it moves past their deadline (tailscale's
// tstest.Clock is the model). Safe for concurrent use.
//
// The semantics, pinned against package time by TestFakeMatchesTime (run in
// a testing/synctest bubble, whose clock is exact):
//   - Advance(d) and Set(t) fire every timer, ticker and AfterFunc whose
//     deadline is at or before the new time, in deadline order (creation
//     order breaks ties). Now() reads each deadline while its timer fires,
//     and the new time once Advance returns.
//   - A timer's channel receives its deadline, once. A ticker's channel
//     receives the deadline of the first tick due; a ticker fires at most
//     once per Advance or Set, and its next tick is its first deadline after
//     the new time: the ticks in between are dropped, as time.Ticker drops
//     the ticks of a reader that is not keeping up. Its channel holds one
//     tick; a tick finding it full is dropped.
//   - Advance runs due AfterFunc functions itself, one at a time, without
//     holding the clock's lock, and returns once they have returned; f may
//     use the clock (make or reset timers; one falling due before the new
//     time fires in the same Advance), but must not wait for the goroutine
//     that called Advance.
//   - A timer made or reset with d <= 0 fires at once: its channel holds
//     the value when NewTimer or Reset returns; an AfterFunc's f starts in
//     its own goroutine, as time.AfterFunc's does.
//   - Stop and Reset follow Go 1.23 timers: once they return, no value sent
//     before the call is received (they empty the channel), and Stop
//     reports true for a timer that had fired but whose value was not
//     received.
//   - Set to an earlier time moves the clock back and fires nothing; the
//     deadlines stay where they were.
//   - Advance and Set are serialised: two callers step one after the other.
//
// A test that needs a component to have armed its timer before it moves
// the clock waits with BlockUntil.
type Fake struct {
	step sync.Mutex // serialises Advance and Set

	mu      sync.Mutex
	now     time.Time
	armed   []*fakeTimer
	seq     uint64
	changed chan struct{} // made by BlockUntil, closed when armed grows
}

type fakeTimer struct {
	f      *Fake
	when   time.Time
	period time.Duration  // a ticker's; 0 for timers and AfterFuncs
	ch     chan time.Time // nil for an AfterFunc
	fn     func()         // an AfterFunc's
	seq    uint64         // creation order, to break deadline ties
	on     bool           // in f.armed
}

// NewFake returns a Fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the clock forward by d, firing what falls due.
func (f *Fake) Advance(d time.Duration) {
	f.step.Lock()
	defer f.step.Unlock()
	f.moveTo(f.Now().Add(d))
}

// Set moves the clock to t, firing what falls due when t is later.
func (f *Fake) Set(t time.Time) {
	f.step.Lock()
	defer f.step.Unlock()
	f.moveTo(t)
}

// Armed returns how many timers, tickers and AfterFuncs are waiting to fire.
func (f *Fake) Armed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.armed)
}

// BlockUntil waits until at least n timers, tickers and AfterFuncs are
// armed, or ctx is done (its error): how a test knows the component it
// drives is waiting before it moves the clock.
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		ok, ch := len(f.armed) >= n, f.changed
		f.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Next returns the earliest armed deadline, if any: a test that does not
// know a component's interval can Set the clock to it.
func (f *Fake) Next() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t := f.nextLocked(); t != nil {
		return t.when, true
	}
	return time.Time{}, false
}

func (f *Fake) nextLocked() *fakeTimer {
	var first *fakeTimer
	for _, t := range f.armed {
		if first == nil || t.when.Before(first.when) || (t.when.Equal(first.when) && t.seq < first.seq) {
			first = t
		}
	}
	return first
}

// moveTo fires, in deadline order, what falls due at or before target,
// then leaves the clock at target.
func (f *Fake) moveTo(target time.Time) {
	f.mu.Lock()
	for {
		t := f.nextLocked()
		if t == nil || t.when.After(target) {
			break
		}
		if t.when.After(f.now) {
			f.now = t.when
		}
		when := t.when
		switch {
		case t.period > 0:
			// Fire once; the next tick is the first after target.
			t.when = when.Add(t.period * (target.Sub(when)/t.period + 1))
			send(t.ch, when)
		case t.ch != nil:
			f.disarmLocked(t)
			send(t.ch, when)
		default:
			f.disarmLocked(t)
			fn := t.fn
			f.mu.Unlock()
			fn()
			f.mu.Lock()
		}
	}
	f.now = target
	f.mu.Unlock()
}

func send(ch chan time.Time, v time.Time) {
	select {
	case ch <- v:
	default: // full: a tick is dropped (a timer's channel is never full)
	}
}

func drain(ch chan time.Time) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (f *Fake) armLocked(t *fakeTimer, d time.Duration) {
	t.when = f.now.Add(d)
	f.seq++
	t.seq = f.seq
	if !t.on {
		t.on = true
		f.armed = append(f.armed, t)
		if f.changed != nil {
			close(f.changed)
			f.changed = nil
		}
	}
}

func (f *Fake) disarmLocked(t *fakeTimer) {
	if !t.on {
		return
	}
	t.on = false
	for i, a := range f.armed {
		if a == t {
			f.armed = append(f.armed[:i], f.armed[i+1:]...)
			break
		}
	}
}

// start arms t for d from now, or fires it at once when d <= 0.
func (f *Fake) startLocked(t *fakeTimer, d time.Duration) {
	if d > 0 || t.period > 0 {
		f.armLocked(t, d)
		return
	}
	if t.ch != nil {
		send(t.ch, f.now)
		return
	}
	go t.fn()
}

// NewTimer makes a timer on the fake clock.
func (f *Fake) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := &fakeTimer{f: f, ch: make(chan time.Time, 1)}
	f.mu.Lock()
	f.startLocked(t, d)
	f.mu.Unlock()
	return fakeTimerCtl{t}, t.ch
}

// NewTicker makes a ticker on the fake clock; d must be positive.
func (f *Fake) NewTicker(d time.Duration) (Ticker, <-chan time.Time) {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &fakeTimer{f: f, ch: make(chan time.Time, 1), period: d}
	f.mu.Lock()
	f.startLocked(t, d)
	f.mu.Unlock()
	return fakeTickerCtl{t}, t.ch
}

// AfterFunc runs fn once the fake clock passes d from now.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	t := &fakeTimer{f: f, fn: fn}
	f.mu.Lock()
	f.startLocked(t, d)
	f.mu.Unlock()
	return fakeTimerCtl{t}
}

type fakeTimerCtl struct{ t *fakeTimer }

func (c fakeTimerCtl) Stop() bool {
	f := c.t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	was := c.t.on
	f.disarmLocked(c.t)
	return drain(c.t.ch) || was
}

func (c fakeTimerCtl) Reset(d time.Duration) bool {
	f := c.t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	was := drain(c.t.ch) || c.t.on
	f.disarmLocked(c.t)
	f.startLocked(c.t, d)
	return was
}

type fakeTickerCtl struct{ t *fakeTimer }

func (c fakeTickerCtl) Stop() {
	f := c.t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disarmLocked(c.t)
	drain(c.t.ch)
}

func (c fakeTickerCtl) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	f := c.t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	drain(c.t.ch)
	c.t.period = d
	f.disarmLocked(c.t)
	f.armLocked(c.t, d)
}
