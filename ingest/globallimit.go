package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/breaker"
	"danmaku/internal/bucket"
	"danmaku/internal/clock"
)

// GlobalLimiter is the token bucket of a whole event, shared by every
// ingest node: it bounds the comments per second the event admits across
// all its rooms. Nodes take tokens in batches (GlobalGate), so one call
// serves many comments. The Redis implementation runs the refill-and-take
// in one Lua call on Redis's clock; the memory one serves embedded mode and
// tests.
type GlobalLimiter interface {
	// Take takes up to n tokens from event's bucket (capacity burst,
	// refilled at perSec a second) and returns how many it took: fewer
	// than n, down to 0, when the bucket holds fewer.
	Take(ctx context.Context, event string, burst, perSec float64, n int) (int, error)
}

// Defaults of GlobalGateConfig.
const (
	defaultGlobalLease   = time.Second
	defaultGlobalRetry   = time.Second
	defaultGlobalTimeout = 250 * time.Millisecond
	defaultGlobalBurst   = time.Second
	// globalBatchSpan is how much of a node's share of the rate one batch
	// covers when Batch is not set: 50 ms, so a node asks Redis about 20
	// times a second per event however busy it is.
	globalBatchSpan = 50 * time.Millisecond
	maxGlobalBatch  = 10_000
	// maxGlobalEmptyWait bounds how long a node waits before asking again
	// after the shared bucket ran dry.
	maxGlobalEmptyWait = 100 * time.Millisecond
)

// GlobalGateConfig configures a GlobalGate.
type GlobalGateConfig struct {
	// Limiter is the shared bucket. Nil: a MemoryGlobalLimiter (one node).
	Limiter GlobalLimiter
	// Nodes returns how many ingest nodes share the event's rate now (the
	// load table's live ingest nodes). It sizes the default batch and the
	// share a node falls back to while the Limiter fails. Nil, or a result
	// below 1: 1.
	Nodes func() int
	// Batch is how many tokens a node takes at once. Zero: 50 ms of its
	// share of the rate (rate / Nodes / 20), at least 1, at most 10,000.
	Batch int
	// Lease is how long a node may keep taken tokens unused; older ones are
	// dropped, so no node saves up a burst for later. Zero: 1 s.
	Lease time.Duration
	// Burst is the shared bucket's capacity, in seconds of rate. Zero: 1 s.
	Burst time.Duration
	// Timeout bounds one Take; a comment waits at most this long for a
	// batch. Zero: 250 ms.
	Timeout time.Duration
	// RetryAfter is how long a node keeps to its fallback share after the
	// Limiter failed, before asking it again: an outage costs one timeout
	// per RetryAfter, not one per batch. Zero: 1 s.
	RetryAfter time.Duration
	// Clock tells the time. Nil: real clock.
	Clock clock.Clock
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// GlobalGate admits comments against their event's global rate: each node
// holds a few tokens taken from the shared GlobalLimiter in a batch and
// spends them locally, so the shared bucket sees one call per batch. When
// the Limiter fails (Redis unreachable, or its breaker open: an error
// matching breaker.ErrOpen, at once), the node admits at its share of the
// rate (rate / Nodes) from a local bucket until it can ask again: never
// open (the event's rate still holds, roughly), never closed (the event
// does not fall silent). Safe for concurrent use.
//
// The batch is taken while holding the event's lock, so the comments that
// arrive meanwhile wait for that one call (at most Timeout) instead of each
// asking Redis.
type GlobalGate struct {
	cfg GlobalGateConfig
	clk clock.Clock
	log *slog.Logger

	mu     sync.Mutex
	events map[string]*globalState

	overflow prometheus.Counter
	fallback prometheus.Counter
	takes    *prometheus.CounterVec
}

type globalState struct {
	mu       sync.Mutex
	tokens   int
	expires  time.Time
	nextAsk  time.Time // after a short grant: the shared bucket was dry
	degraded time.Time // until then: the fallback share, no Limiter call
	share    bucket.Bucket
	failing  bool
}

// NewGlobalGate returns a gate.
func NewGlobalGate(cfg GlobalGateConfig) (*GlobalGate, error) {
	if cfg.Batch < 0 || cfg.Lease < 0 || cfg.Burst < 0 || cfg.Timeout < 0 || cfg.RetryAfter < 0 {
		return nil, errors.New("ingest: global gate: negative setting")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Limiter == nil {
		cfg.Limiter = NewMemoryGlobalLimiter(cfg.Clock)
	}
	if cfg.Lease == 0 {
		cfg.Lease = defaultGlobalLease
	}
	if cfg.Burst == 0 {
		cfg.Burst = defaultGlobalBurst
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultGlobalTimeout
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = defaultGlobalRetry
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	g := &GlobalGate{cfg: cfg, clk: cfg.Clock, log: cfg.Logger, events: map[string]*globalState{}}
	g.overflow = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_ingest_global_overflow_total",
		Help: "Comments dropped because their event's global rate was used up.",
	})
	g.fallback = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "danmaku_ingest_global_fallback_total",
		Help: "Comments judged by this node's share of the global rate because the shared limiter failed.",
	})
	g.takes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ingest_global_takes_total",
		Help: "Batches asked of the shared global limiter, by result (ok, short, error; open: refused by the open Redis breaker, no call made).",
	}, []string{"result"})
	for _, c := range []prometheus.Collector{g.overflow, g.fallback, g.takes} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("ingest: global gate metrics: %w", err)
		}
	}
	return g, nil
}

func (g *GlobalGate) nodes() int {
	if g.cfg.Nodes == nil {
		return 1
	}
	return max(1, g.cfg.Nodes())
}

func (g *GlobalGate) state(event string) *globalState {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.events[event]
	if st == nil {
		st = &globalState{}
		g.events[event] = st
	}
	return st
}

// Allow admits one comment of event, whose global rate is perSec comments
// a second (<= 0 or not finite: no global limit), and reports whether it
// may pass. A false answer is counted as an overflow.
func (g *GlobalGate) Allow(event string, perSec float64) bool {
	if !(perSec > 0) || math.IsInf(perSec, 0) {
		return true
	}
	st := g.state(event)
	st.mu.Lock()
	defer st.mu.Unlock()
	now := g.clk.Now()
	if !now.Before(st.expires) {
		st.tokens = 0
	}
	if st.tokens > 0 {
		st.tokens--
		return true
	}
	if now.Before(st.degraded) {
		return g.fallbackTake(st, now, perSec)
	}
	if now.Before(st.nextAsk) {
		g.overflow.Inc()
		return false
	}
	nodes := g.nodes()
	batch := g.cfg.Batch
	if batch == 0 {
		batch = int(math.Ceil(perSec / float64(nodes) * globalBatchSpan.Seconds()))
	}
	batch = min(max(batch, 1), maxGlobalBatch)
	burst := max(perSec*g.cfg.Burst.Seconds(), float64(batch))
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
	got, err := g.cfg.Limiter.Take(ctx, event, burst, perSec, batch)
	cancel()
	if err != nil {
		// An open Redis breaker answers at once: the fallback is the same,
		// and the label tells an outage being waited out from calls that
		// each failed on their own.
		result := "error"
		if errors.Is(err, breaker.ErrOpen) {
			result = "open"
		}
		g.takes.WithLabelValues(result).Inc()
		if !st.failing {
			g.log.Warn("ingest: global limiter failed; admitting this node's share", "event", event, "nodes", nodes, "err", err)
			st.failing = true
		}
		st.degraded = now.Add(g.cfg.RetryAfter)
		return g.fallbackTake(st, now, perSec)
	}
	if st.failing {
		g.log.Info("ingest: global limiter answers again", "event", event)
		st.failing = false
	}
	st.tokens, st.expires = got, now.Add(g.cfg.Lease)
	if got < batch {
		g.takes.WithLabelValues("short").Inc()
		// The shared bucket is dry: it refills batch tokens in batch/perSec
		// seconds, and asking sooner only adds calls.
		wait := time.Duration(float64(batch-got) / perSec * float64(time.Second))
		st.nextAsk = now.Add(min(max(wait, time.Millisecond), maxGlobalEmptyWait))
	} else {
		g.takes.WithLabelValues("ok").Inc()
	}
	if st.tokens > 0 {
		st.tokens--
		return true
	}
	g.overflow.Inc()
	return false
}

// fallbackTake judges a comment by this node's share of the rate.
func (g *GlobalGate) fallbackTake(st *globalState, now time.Time, perSec float64) bool {
	g.fallback.Inc()
	share := perSec / float64(g.nodes())
	if st.share.Take(now, max(share*g.cfg.Burst.Seconds(), 1), share, 1) {
		return true
	}
	g.overflow.Inc()
	return false
}

// validGlobalTake checks a Take's arguments. (Its own check rather than the
// room limiter's helper: the two limiters' files change independently.)
func validGlobalTake(burst, perSec float64, n int) bool {
	ok := func(f float64) bool { return f >= 0 && !math.IsInf(f, 0) } // NaN fails f >= 0
	return ok(burst) && ok(perSec) && n >= 0
}
