// Package clock lets components read the time, and wait for it to pass,
// through an interface so that segment boundaries, token epochs, bucket
// refills, flush timers and sweep tickers are tested without sleeping.
// Clock tells the time; Timers (timers.go) also makes timers, tickers and
// AfterFuncs. Real is package time; Fake (fake.go) moves only when told to.
// Both are safe for concurrent use.
package clock

import (
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now(): always in a production build; a binary built
// with the test-only tag faultclock adds its fault offset (offset_fault.go).
func (Real) Now() time.Time { return now() }

// Or returns c, or Real when c is nil; components call it when applying defaults.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}
