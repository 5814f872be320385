// Package backoff is the one retry wait of the server: exponential growth
// to a cap with full jitter — each wait drawn uniformly from zero to the
// current bound — so that the many loops a shared failure stops at once (a
// Redis failover stops every edge's per-room reader) do not retry in step
// when it ends.
//
// A Policy is a value, safe for concurrent use when its Rand is; a Backoff
// counts one loop's failures in a row and belongs to that loop alone.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Rand draws a uniform integer in [0, n). *rand.Rand of math/rand/v2
// implements it; tests pass a seeded or fixed source.
type Rand interface {
	Int64N(n int64) int64
}

// Policy is how long to wait before a retry.
type Policy struct {
	// Base bounds the first wait; each failure in a row doubles the bound.
	// Zero: 100 ms.
	Base time.Duration
	// Max caps the bound. Zero or less than Base: Base.
	Max time.Duration
	// Rand draws the jitter. Nil: math/rand/v2's global source.
	Rand Rand
}

const defaultBase = 100 * time.Millisecond

// Bound is the largest wait before the n-th retry (n ≥ 1; less counts as
// 1): min(Max, Base·2^(n-1)).
func (p Policy) Bound(n int) time.Duration {
	base := p.Base
	if base <= 0 {
		base = defaultBase
	}
	top := max(p.Max, base)
	d := base
	for i := 1; i < n && d < top; i++ {
		d = min(2*d, top) // 2*d ≤ 2*top: no overflow while top ≤ MaxInt64/2
	}
	return min(d, top)
}

// Delay is the wait before the n-th retry: uniform in [0, Bound(n)].
func (p Policy) Delay(n int) time.Duration {
	b := int64(p.Bound(n))
	if p.Rand != nil {
		return time.Duration(p.Rand.Int64N(b + 1))
	}
	return time.Duration(rand.Int64N(b + 1))
}

// Backoff is one retry loop's state: failures in a row under a Policy.
// The zero value uses the zero Policy's defaults.
type Backoff struct {
	Policy
	n int
}

// New returns a Backoff whose first wait is at most base, doubling to max.
func New(base, max time.Duration) *Backoff {
	return &Backoff{Policy: Policy{Base: base, Max: max}}
}

// Next counts a failure and returns the wait before the retry.
func (b *Backoff) Next() time.Duration {
	b.n++
	return b.Delay(b.n)
}

// Failures is the number of failures in a row since the last Reset.
func (b *Backoff) Failures() int { return b.n }

// Reset starts again from the first wait: call it after a success.
func (b *Backoff) Reset() { b.n = 0 }

// Sleep waits d, or until ctx is done: false if ctx ended first. It is
// the retry loops' wait (a timer stopped on return, unlike time.After).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
