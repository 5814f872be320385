package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"danmaku/ingest"
	"danmaku/internal/breaker"
	"danmaku/internal/clock"
	"danmaku/internal/redisx/redistest"
	"danmaku/internal/testwait"
)

// globalBackend is one GlobalLimiter under test; pass lets time go by as
// in stateBackend (a fake clock for memory, sleeping for Redis).
type globalBackend struct {
	name string
	open func(t *testing.T) (lim ingest.GlobalLimiter, pass func(time.Duration), rdb redis.UniversalClient)
}

func globalBackends() []globalBackend {
	out := []globalBackend{{"memory", func(t *testing.T) (ingest.GlobalLimiter, func(time.Duration), redis.UniversalClient) {
		c := clock.NewFake(time.Unix(1_700_000_000, 0))
		return ingest.NewMemoryGlobalLimiter(c), c.Advance, nil
	}}}
	for _, k := range redistest.Kinds() {
		out = append(out, globalBackend{k.Name, func(t *testing.T) (ingest.GlobalLimiter, func(time.Duration), redis.UniversalClient) {
			rdb := k.Client(t)
			return ingest.NewRedisGlobalLimiter(rdb), time.Sleep, rdb
		}})
	}
	return out
}

// globalTiny is a refill rate that adds no whole token while a case runs.
const globalTiny = 1e-6

func takeGlobal(t *testing.T, lim ingest.GlobalLimiter, event string, burst, perSec float64, n int) int {
	t.Helper()
	got, err := lim.Take(context.Background(), event, burst, perSec, n)
	if err != nil {
		t.Fatalf("Take(%s): %v", event, err)
	}
	return got
}

// TestGlobalLimiterConformance runs every GlobalLimiter through the same
// cases; each case uses its own events.
func TestGlobalLimiterConformance(t *testing.T) {
	cases := []struct {
		name string
		run  func(t *testing.T, lim ingest.GlobalLimiter, pass func(time.Duration), rdb redis.UniversalClient)
	}{
		{"partial grants", func(t *testing.T, lim ingest.GlobalLimiter, _ func(time.Duration), _ redis.UniversalClient) {
			if got := takeGlobal(t, lim, "partial", 10, globalTiny, 4); got != 4 {
				t.Fatalf("4 of 10: got %d", got)
			}
			if got := takeGlobal(t, lim, "partial", 10, globalTiny, 8); got != 6 {
				t.Fatalf("8 of 6: got %d, want the 6 left", got)
			}
			if got := takeGlobal(t, lim, "partial", 10, globalTiny, 1); got != 0 {
				t.Fatalf("1 of 0: got %d", got)
			}
			if got := takeGlobal(t, lim, "partial-other", 10, globalTiny, 10); got != 10 {
				t.Fatalf("another event's bucket: got %d", got)
			}
		}},
		{"refills up to the burst", func(t *testing.T, lim ingest.GlobalLimiter, pass func(time.Duration), _ redis.UniversalClient) {
			const burst, perSec = 5, 20 // a token every 50 ms
			takeGlobal(t, lim, "refill", burst, perSec, burst)
			waitFor(t, pass, 20*time.Millisecond, 10*time.Second, func() bool {
				return takeGlobal(t, lim, "refill", burst, perSec, 1) == 1
			})
			pass(time.Second) // 20 tokens' time, capped at 5
			// The refill is credited at the rate of the call that sees it, so
			// this call passes the same rate.
			if got := takeGlobal(t, lim, "refill", burst, perSec, 100); got != burst {
				t.Fatalf("after idling: got %d, want the burst %d", got, burst)
			}
		}},
		{"concurrent takes never over-grant", func(t *testing.T, lim ingest.GlobalLimiter, _ func(time.Duration), _ redis.UniversalClient) {
			const burst = 100
			var granted atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 10 {
						n, err := lim.Take(context.Background(), "race", burst, globalTiny, 3)
						if err != nil {
							t.Error(err)
							return
						}
						granted.Add(int64(n))
					}
				})
			}
			wg.Wait()
			if got := granted.Load(); got != burst {
				t.Fatalf("granted %d tokens from a bucket of %d", got, burst)
			}
		}},
		{"bad arguments", func(t *testing.T, lim ingest.GlobalLimiter, _ func(time.Duration), _ redis.UniversalClient) {
			for _, a := range [][2]float64{{-1, 1}, {1, -1}} {
				if _, err := lim.Take(context.Background(), "bad", a[0], a[1], 1); err == nil {
					t.Fatalf("Take(burst %v, rate %v) accepted", a[0], a[1])
				}
			}
		}},
		{"idle buckets vanish", func(t *testing.T, lim ingest.GlobalLimiter, _ func(time.Duration), rdb redis.UniversalClient) {
			takeGlobal(t, lim, "idle", 100, 100, 10)
			if rdb == nil {
				return
			}
			key := ingest.GlobalBucketKey("idle")
			if !strings.HasPrefix(key, "danmaku:{event:idle}") {
				t.Fatalf("key %q is outside the event's hash tag", key)
			}
			ttl, err := rdb.PTTL(context.Background(), key).Result()
			if err != nil || ttl <= 0 || ttl > 2*time.Second {
				t.Fatalf("PTTL %s = %v, %v; want about 0.1 s", key, ttl, err)
			}
		}},
	}
	for _, b := range globalBackends() {
		t.Run(b.name, func(t *testing.T) {
			lim, pass, rdb := b.open(t)
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) { c.run(t, lim, pass, rdb) })
			}
		})
	}
}

// scriptedLimiter counts calls and fails while told to.
type scriptedLimiter struct {
	inner ingest.GlobalLimiter
	calls atomic.Int64
	fail  atomic.Bool
}

func (s *scriptedLimiter) Take(ctx context.Context, event string, burst, perSec float64, n int) (int, error) {
	s.calls.Add(1)
	if s.fail.Load() {
		return 0, errors.New("redis: connection refused")
	}
	return s.inner.Take(ctx, event, burst, perSec, n)
}

func newGate(t *testing.T, cfg ingest.GlobalGateConfig) *ingest.GlobalGate {
	t.Helper()
	cfg.Logger = quiet
	g, err := ingest.NewGlobalGate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func allowN(g *ingest.GlobalGate, event string, perSec float64, n int) int {
	ok := 0
	for range n {
		if g.Allow(event, perSec) {
			ok++
		}
	}
	return ok
}

// TestGlobalGateBatches: a node asks the shared bucket once per batch, and
// two nodes together admit the event's rate, not each.
func TestGlobalGateBatches(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	shared := &scriptedLimiter{inner: ingest.NewMemoryGlobalLimiter(clk)}
	reg := prometheus.NewRegistry()
	a := newGate(t, ingest.GlobalGateConfig{Limiter: shared, Batch: 10, Clock: clk, Registerer: reg})
	b := newGate(t, ingest.GlobalGateConfig{Limiter: shared, Batch: 10, Clock: clk})
	const rate = 100 // burst: one second, 100
	if got := allowN(a, "ev", rate, 30); got != 30 || shared.calls.Load() != 3 {
		t.Fatalf("node a: %d admitted with %d calls; want 30 with 3", got, shared.calls.Load())
	}
	// Both nodes drain the rest of the burst: 70 more, then nothing.
	got := allowN(a, "ev", rate, 50) + allowN(b, "ev", rate, 50)
	if got != 70 {
		t.Fatalf("both nodes admitted %d more, want the 70 left of the burst", got)
	}
	// Dry: node a learns it from one short answer (it has not asked since
	// b drained the bucket), then refuses without asking again at once.
	calls := shared.calls.Load()
	if allowN(a, "ev", rate, 20) != 0 || shared.calls.Load() != calls+1 {
		t.Fatalf("a dry bucket was asked %d more times, want 1", shared.calls.Load()-calls)
	}
	clk.Advance(100 * time.Millisecond) // 10 tokens refilled
	if got := allowN(a, "ev", rate, 20); got != 10 {
		t.Fatalf("after 100 ms: %d admitted, want 10", got)
	}
	if n := testutil.ToFloat64(prometheus.Collector(mustCounter(t, reg, "danmaku_ingest_global_overflow_total"))); n != 30 {
		t.Fatalf("overflow counter %v, want 30", n)
	}
	// No limit configured: everything passes, nothing is asked.
	calls = shared.calls.Load()
	if allowN(a, "other", 0, 1000) != 1000 || shared.calls.Load() != calls {
		t.Fatal("a zero rate limited or asked")
	}
}

// mustCounter returns the registered counter named name.
func mustCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Counter {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: name})
			c.Add(mf.GetMetric()[0].GetCounter().GetValue())
			return c
		}
	}
	t.Fatalf("no counter %s", name)
	return nil
}

// TestGlobalGateLease: tokens taken and left unused lapse, so a quiet node
// cannot save up a burst.
func TestGlobalGateLease(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	shared := &scriptedLimiter{inner: ingest.NewMemoryGlobalLimiter(clk)}
	g := newGate(t, ingest.GlobalGateConfig{Limiter: shared, Batch: 50, Clock: clk})
	allowN(g, "ev", 100, 1) // takes 50, keeps 49
	clk.Advance(time.Second)
	calls := shared.calls.Load()
	allowN(g, "ev", 100, 1)
	if shared.calls.Load() != calls+1 {
		t.Fatal("tokens older than the lease were spent")
	}
}

// TestGlobalGateFallback: while the shared limiter fails, a node admits
// its share of the rate — neither everything nor nothing — and asks again
// only after RetryAfter.
func TestGlobalGateFallback(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	shared := &scriptedLimiter{inner: ingest.NewMemoryGlobalLimiter(clk)}
	shared.fail.Store(true)
	g := newGate(t, ingest.GlobalGateConfig{Limiter: shared, Nodes: func() int { return 4 }, Clock: clk})
	const rate = 400 // a share of 100/s, burst 100
	if got := allowN(g, "ev", rate, 1000); got != 100 {
		t.Fatalf("first second of the outage: %d admitted, want the share's burst 100", got)
	}
	if shared.calls.Load() != 1 {
		t.Fatalf("the failing limiter was asked %d times within RetryAfter", shared.calls.Load())
	}
	clk.Advance(500 * time.Millisecond)
	if got := allowN(g, "ev", rate, 1000); got != 50 {
		t.Fatalf("half a second later: %d admitted, want 50", got)
	}
	clk.Advance(600 * time.Millisecond) // past RetryAfter: asks again
	shared.fail.Store(false)
	if got := allowN(g, "ev", rate, 1000); got != rate {
		t.Fatalf("after recovery: %d admitted, want the shared burst %d", got, rate)
	}
	if _, err := ingest.NewGlobalGate(ingest.GlobalGateConfig{Batch: -1}); err == nil {
		t.Fatal("negative batch accepted")
	}
}

// openLimiter is a shared limiter behind an open Redis breaker: every call
// is refused at once.
type openLimiter struct{ calls atomic.Int64 }

func (o *openLimiter) Take(context.Context, string, float64, float64, int) (int, error) {
	o.calls.Add(1)
	return 0, fmt.Errorf("ingest: global bucket ev: redis 127.0.0.1:1: %w", breaker.ErrOpen)
}

// TestGlobalGateBreakerOpen: a limiter refused by an open breaker gets the
// same fallback as a failing one — the node's share, asked again only
// after RetryAfter — counted as takes{result="open"}.
func TestGlobalGateBreakerOpen(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	shared := &openLimiter{}
	reg := prometheus.NewRegistry()
	g := newGate(t, ingest.GlobalGateConfig{Limiter: shared, Nodes: func() int { return 4 }, Clock: clk, Registerer: reg})
	const rate = 400 // a share of 100/s, burst 100
	if got := allowN(g, "ev", rate, 1000); got != 100 {
		t.Fatalf("breaker open: %d admitted, want the share's burst 100", got)
	}
	if shared.calls.Load() != 1 {
		t.Fatalf("the limiter was asked %d times within RetryAfter", shared.calls.Load())
	}
	if got := testutil.ToFloat64(mustCounterVec(t, reg, "danmaku_ingest_global_takes_total", "open")); got != 1 {
		t.Fatalf("takes{result=open} = %v, want 1", got)
	}
}

// mustCounterVec reads one labelled counter from reg.
func mustCounterVec(t *testing.T, reg *prometheus.Registry, name, result string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return m.GetCounter().GetValue() })
				}
			}
		}
	}
	t.Fatalf("no %s{result=%q}", name, result)
	return nil
}

// TestGlobalGateRedis: the gate over Redis on two "nodes" admits about the
// event's burst, and falls back to its share when Redis is gone. The gates'
// own time (leases, the fallback share's refill) is a fake clock: on a busy
// machine the real one refilled the share by a token or lapsed a lease
// between two calls.
func TestGlobalGateRedis(t *testing.T) {
	rdb := redistest.Client(t)
	lim := ingest.NewRedisGlobalLimiter(rdb)
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	// A Take's timeout is real time: a guard here, so that a starved
	// process does not see Redis as failing (seen under a CPU hog: the
	// 250 ms default ran out, and the fallback admitted 2, not 7).
	a := newGate(t, ingest.GlobalGateConfig{Limiter: lim, Batch: 7, Clock: clk, Timeout: testwait.Limit})
	b := newGate(t, ingest.GlobalGateConfig{Limiter: lim, Batch: 7, Clock: clk, Timeout: testwait.Limit})
	const rate = 1e-3 // burst: max(rate × 1 s, batch) = 7 tokens, no refill to speak of
	got := allowN(a, "ev", rate, 5) + allowN(b, "ev", rate, 5) + allowN(a, "ev", rate, 5)
	if got != 7 {
		t.Fatalf("two nodes admitted %d, want the burst 7", got)
	}
	_ = rdb.Close()
	c := newGate(t, ingest.GlobalGateConfig{Limiter: lim, Nodes: func() int { return 2 }, Clock: clk})
	if got := allowN(c, "ev2", 200, 1000); got != 100 {
		t.Fatalf("Redis gone: %d admitted, want the share's burst 100", got)
	}
}

// BenchmarkGlobalGate is one comment's global check when the node holds
// tokens (the usual case: one shared call per batch).
func BenchmarkGlobalGate(b *testing.B) {
	g, err := ingest.NewGlobalGate(ingest.GlobalGateConfig{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		g.Allow("ev", 1e9)
	}
}
