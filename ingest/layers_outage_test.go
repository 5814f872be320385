package ingest

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"danmaku/internal/breaker"
	"danmaku/internal/breaker/breakertest"
	"danmaku/internal/redisx"
	"danmaku/internal/testenv"
)

// TestRedisOutageFallsBackToShare cuts the path to Redis (requests hang,
// as with a paused server) for DANMAKU_OUTAGE (default 5 s) while two
// ingest nodes take a room's barrage at three times its refill. The nodes
// fall back to their share of the room limit: comments go on being
// admitted at about the room's rate — never all of them (open), never
// none (closed) — every request is answered within the hold (what the
// shares admitted waits there for the room gate), the Redis breaker opens,
// and once Redis is back what the shares admitted is stored and the
// breaker closes.
func TestRedisOutageFallsBackToShare(t *testing.T) {
	if testing.Short() {
		t.Skip("an outage of seconds against a real Redis")
	}
	// 5 s: the room gate's flushes, backed off, are the only Redis calls
	// here, each failing at a 500 ms read timeout. The breaker opens after
	// 2 failures in a row, not the default 5: five backed-off flushes took
	// up to the whole outage on a loaded machine, and this test is about
	// the fallback while the breaker is open, not about the count.
	outage := breakertest.Outage(t, 5*time.Second)
	const (
		nodes    = 2
		refill   = 200.0
		capacity = 100.0
		offered  = 3 * refill
		users    = 2000
		before   = time.Second
		after    = 6 * time.Second
		// closeGuard bounds the wait for the breaker to close after
		// recovery: a guard against a breaker stuck open, not a speed.
		closeGuard = time.Minute
	)
	proxy := breakertest.NewProxy(t, testenv.Redis(t))
	r := newLoadRig(t, redisx.Config{URL: proxy.Addr(), Breaker: breaker.Config{Failures: 2}}, nodes, "outage-room", capacity, refill)
	tokens := r.tokens(t, users)
	b, _ := breaker.For(breaker.Config{Dep: "redis", Target: proxy.Addr()})

	var (
		res  *loadResult
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Go(func() {
		defer close(done)
		res = r.drive(tokens, before+outage+after, func(time.Duration) float64 { return offered })
	})
	time.Sleep(before) // the load runs this long before the cut: a phase of the scenario, not synchronisation
	cut := time.Now()
	proxy.Cut()
	// The room gate's flushes, backed off, are the only Redis calls here:
	// on a busy machine the fifth failure in a row can come late in the
	// outage, so an opening is watched for until the breaker closes again.
	var opened, closed time.Duration
	watch := func() {
		if opened == 0 && b.State() == breaker.Open {
			opened = time.Since(cut)
		}
	}
	// The cut lasts the outage, and on a machine so busy that the gate's
	// backed-off flushes have not yet opened the breaker, on until they
	// have (bounded by half the run after it, so that load still comes
	// to close it again).
	for end := cut.Add(outage); time.Now().Before(end) || (opened == 0 && time.Since(cut) < outage+after/2); time.Sleep(10 * time.Millisecond) {
		watch() // polling the breaker's state
	}
	proxy.Restore()
	restored := time.Now()
	// Closing waits for a probe, and the probe for the gate's next
	// backed-off flush: however long a loaded machine takes, it must come
	// (the guard only turns a breaker stuck open into a failure).
	for closed == 0 && time.Since(restored) < closeGuard {
		if watch(); opened != 0 && b.State() == breaker.Closed {
			closed = time.Since(restored)
		}
		time.Sleep(10 * time.Millisecond) // polling the breaker's state
	}
	<-done
	wg.Wait()
	// Let the held comments land (they were answered once stored).
	stored := len(r.stored(t))
	run := (before + outage + after).Seconds()
	longest := res.pct(100)
	t.Logf("outage %v: breaker open after %v, closed %v after recovery; %d comments offered, %d stored (room limit about %.0f), p50 %v, p99 %v, longest %v; answers %v",
		outage, opened.Round(time.Millisecond), closed.Round(time.Millisecond), res.attempts, stored, refill*run+capacity,
		res.pct(50).Round(time.Millisecond), res.pct(99).Round(time.Millisecond), longest.Round(time.Millisecond), codes(res))

	if opened == 0 {
		t.Errorf("the Redis breaker never opened")
	}
	if closed == 0 {
		t.Errorf("the Redis breaker did not close within %v of recovery", closeGuard)
	}
	// A comment the share admitted waits for the gate up to the hold
	// (15 s), then is answered 503: a 503 from a handler that ran for
	// less than the hold is one the hold does not explain. (On a busy
	// machine the gate's backed-off flushes can keep a comment waiting
	// the whole hold even in a short outage: that 503 is the documented
	// answer, not a loss — the client retries it.)
	c := codes(res)
	if c[http.StatusOK]+c[http.StatusServiceUnavailable] != res.attempts || res.early503.Load() > 0 {
		t.Errorf("answers %v to %d requests, %d of the 503s before the hold: want 200, or 503 only past the hold", c, res.attempts, res.early503.Load())
	}
	// Never open: the shares together admit about the room's limit
	// (each share's bucket starts full: one more burst).
	if limit := refill*run + 2*capacity; float64(stored) > 1.2*limit {
		t.Errorf("%d comments stored in %.0f s, over the room's limit %.0f: the fallback let everything in", stored, run, limit)
	}
	// Never closed: the outage's seconds admitted their share too — of
	// what the driver managed to offer, which on a busy machine can be
	// less than the room's limit.
	if low := 0.6 * min(refill*run, float64(res.attempts)); float64(stored) < low {
		t.Errorf("%d comments stored in %.0f s, under %.0f: the room fell silent", stored, run, low)
	}
	// The hold is checked by the room's flusher, late by what a loaded
	// machine delays it: the handler's longest run is a figure; only a
	// handler that ran a minute past the hold — one the hold never
	// answered — fails the test.
	serve := time.Duration(res.longestServe.Load())
	t.Logf("longest handler run %v (hold %v)", serve.Round(time.Millisecond), defaultHold)
	if serve > defaultHold+time.Minute {
		t.Errorf("a request's handler ran %v: the hold (%v) never answered it", serve, defaultHold)
	}
}

// codes lists the answers of a run by status.
func codes(res *loadResult) map[int]int64 {
	out := map[int]int64{}
	for _, c := range []int{http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusInternalServerError} {
		if n := res.count(c); n > 0 {
			out[c] = n
		}
	}
	return out
}
