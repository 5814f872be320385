package ratelimit

import (
	"context"
	"time"
)

// Window is a sliding-window counter shared by the nodes: it admits a
// request for key while fewer than limit were admitted in the last window,
// on one clock for every node. The Redis implementation is what a
// deployment uses; the memory one is the embedded default (one process is
// every node) and the reference the shared conformance tests hold the
// Redis one to.
type Window interface {
	// Take admits one request for key unless limit were admitted within
	// the window ending now, and says how many the window holds after.
	Take(ctx context.Context, key string, limit int64, window time.Duration) (WindowResult, error)
}

// WindowResult is a Take's verdict.
type WindowResult struct {
	// Allowed: the request was admitted and counted.
	Allowed bool
	// Count is how many admitted requests the window holds now.
	Count int64
	// RetryIn is, when not Allowed, how long until the oldest admitted
	// request leaves the window.
	RetryIn time.Duration
}
