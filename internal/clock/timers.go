package clock

import (
	"context"
	"time"
)

// Timers is a Clock that also makes timers, tickers and AfterFuncs, in the
// style of tailscale's tstime.Clock: a component that waits for time to
// pass takes a Timers, so that its test moves a Fake instead of sleeping.
//
// It is a second interface rather than more methods on Clock so that every
// type that only tells the time (Follower, the tests' own fakes) stays a
// Clock; TimersOf picks the timers a component's Clock can give.
type Timers interface {
	Clock
	// NewTimer is time.NewTimer: the channel receives the time once d has
	// passed.
	NewTimer(d time.Duration) (Timer, <-chan time.Time)
	// NewTicker is time.NewTicker: the channel receives the time every d,
	// dropping ticks a slow reader misses. d must be positive.
	NewTicker(d time.Duration) (Ticker, <-chan time.Time)
	// AfterFunc is time.AfterFunc: f runs once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer controls a timer or an AfterFunc, with time.Timer's semantics
// (those of Go 1.23 and later: after Stop or Reset returns, no value armed
// before the call is received).
type Timer interface {
	// Stop prevents the timer from firing; it reports whether the call
	// stopped it (false: it had already fired, or was stopped).
	Stop() bool
	// Reset rearms the timer to fire d from now; it reports whether the
	// timer had been active.
	Reset(d time.Duration) bool
}

// Ticker controls a ticker, with time.Ticker's semantics.
type Ticker interface {
	// Stop turns the ticker off; no tick is received after it returns.
	Stop()
	// Reset stops the ticker and restarts it with period d from now.
	Reset(d time.Duration)
}

// TimersOf returns c's timers when c makes them (Real, Fake), and Real's
// otherwise (nil, a Follower, a test's Now-only fake). A Follower's offset
// does not matter to a timer: a duration is the same on both clocks.
func TimersOf(c Clock) Timers {
	if t, ok := c.(Timers); ok {
		return t
	}
	return Real{}
}

// Sleep waits d on c's timers, or until ctx is done (its error).
func Sleep(ctx context.Context, c Timers, d time.Duration) error {
	t, ch := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
		return nil
	}
}

// NewTimer is time.NewTimer.
func (Real) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := time.NewTimer(d)
	return t, t.C
}

// NewTicker is time.NewTicker.
func (Real) NewTicker(d time.Duration) (Ticker, <-chan time.Time) {
	t := time.NewTicker(d)
	return t, t.C
}

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
