// Package testwait is the tests' one way to wait for a condition: poll it
// until it holds, and fail the test, saying what it waited for, once a
// generous limit has passed. The limit is a guard against a hung test, never
// a measurement: no test asserts how long a wait took.
package testwait

import (
	"context"
	"testing"
	"time"
)

// Limit bounds For's wait.
const Limit = 30 * time.Second

// The pause between two calls of a condition starts at firstPause, so that
// a condition about to hold ends the wait at once, and doubles to
// maxPause, so that a long wait does not compete with the code it waits for
// on a loaded machine.
const (
	firstPause = time.Millisecond
	maxPause   = 50 * time.Millisecond
)

// Poll calls cond until it returns true (Poll returns true) or ctx ends
// (false).
func Poll(ctx context.Context, cond func() bool) bool {
	pause := firstPause
	t := time.NewTimer(pause)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		pause = min(2*pause, maxPause)
		t.Reset(pause)
	}
	return true
}

// For polls cond until it holds; it fails t, naming what, once Limit has
// passed or the test's context has ended.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Limit)
	defer cancel()
	Ctx(t, ctx, what, cond)
}

// Ctx is For bounded by ctx instead of Limit.
func Ctx(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	if !Poll(ctx, cond) {
		t.Fatalf("gave up waiting for %s", what)
	}
}
