package redisx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"danmaku/internal/breaker"
	"danmaku/internal/breaker/breakertest"
	"danmaku/internal/testenv"
	"danmaku/internal/testwait"
)

func TestIsFailure(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.Nil, false},
		{redis.ErrClosed, false},
		{fmt.Errorf("x: %w", breaker.ErrOpen), false},
		{errors.New("dial tcp: connection refused"), true},
		{context.DeadlineExceeded, true},
		{redisError("NOSCRIPT No matching script"), false},
		{redisError("NOGROUP No such key"), false},
		{redisError("WRONGTYPE Operation against a key"), false},
		{redisError("LOADING Redis is loading the dataset in memory"), true},
		{redisError("BUSY Redis is busy running a script"), true},
		{redisError("BUSYGROUP Consumer Group name already exists"), false},
		{redisError("OOM command not allowed when used memory > 'maxmemory'."), true},
		{fmt.Errorf("stream: read: %w", redisError("LOADING Redis is loading")), true},
		{redisError("CLUSTERDOWN The cluster is down"), true},
		{redisError("READONLY You can't write against a read only replica."), true},
	}
	for _, c := range cases {
		if got := isFailure(c.err); got != c.want {
			t.Errorf("isFailure(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// redisError is an error reply as go-redis hands it over.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// TestSlowCallRule: by default a call slower than half the IOTimeout
// counts against the server; a negative SlowCall turns that rule off, and
// then only errors do.
func TestSlowCallRule(t *testing.T) {
	for _, c := range []struct {
		slow time.Duration
		open bool
	}{{0, true}, {-1, false}} {
		addr := fmt.Sprintf("%s-%d", t.Name(), c.slow)
		cfg := Config{URL: addr, Breaker: breaker.Config{Failures: 2, OpenFor: time.Hour, SlowCall: c.slow}}
		if err := checkBreaker(cfg); err != nil {
			t.Fatalf("SlowCall %v: %v", c.slow, err)
		}
		h, err := newBreakerHook(addr, cfg, time.Second, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if done, err := h.b.Allow(); err == nil {
				done(nil, time.Hour)
			}
		}
		if got := h.b.State() == breaker.Open; got != c.open {
			t.Errorf("SlowCall %v: open after slow answers = %v, want %v", c.slow, got, c.open)
		}
	}
}

func TestBlockOf(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		cmd  redis.Cmder
		want time.Duration
	}{
		{redis.NewStringCmd(ctx, "get", "k"), 0},
		{redis.NewXStreamSliceCmd(ctx, "xreadgroup", "group", "g", "c", "count", 10, "block", int64(1500), "streams", "s", ">"), 1500 * time.Millisecond},
		{redis.NewXStreamSliceCmd(ctx, "xread", "count", 10, "streams", "s", "0"), 0},
		{redis.NewIntCmd(ctx, "wait", 1, 250), 250 * time.Millisecond},
		{redis.NewStringSliceCmd(ctx, "blpop", "k", 2), 2 * time.Second},
	}
	for _, c := range cases {
		if got := blockOf(c.cmd); got != c.want {
			t.Errorf("blockOf(%v) = %v, want %v", c.cmd.Args(), got, c.want)
		}
	}
}

// TestRedisOutage cuts the path to Redis (a proxy that swallows every
// byte: calls hang, as with a paused server or lost packets) under a load
// of concurrent commands for DANMAKU_OUTAGE (default 3 s): the breaker
// opens, commands then fail at once with ErrOpen, every failed call was
// ended by its deadline (a timeout) or the breaker — none by anything
// else, none hangs — and the breaker closes once Redis is back.
//
// Nothing here asserts on wall-clock windows (CI runs on a busy machine):
// the outage lasts until the breaker has opened, at least DANMAKU_OUTAGE,
// and the longest call is logged as a figure; that the deadline ended the
// hung calls is shown by the errors they returned.
func TestRedisOutage(t *testing.T) {
	outage := breakertest.Outage(t, 3*time.Second)
	proxy := breakertest.NewProxy(t, testenv.Redis(t))
	// The production settings: 1 s read and write timeouts, 3 s per call,
	// open for 1 s.
	const call = defaultCallTimeout
	ctx := context.Background()
	c, err := Connect(ctx, Config{URL: proxy.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var (
		tl   breakertest.Timeline
		stop = make(chan struct{})
		wg   sync.WaitGroup

		mu    sync.Mutex
		other []error // failures ended by neither a deadline nor the breaker
	)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				var err error
				if i%2 == 0 {
					err = c.Set(ctx, key, i, 0).Err()
				} else {
					_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
						p.Incr(ctx, key+"n")
						p.Get(ctx, key)
						return nil
					})
				}
				tl.Record(start, err)
				if err != nil && err != redis.Nil && !endedByDeadlineOrBreaker(err) {
					mu.Lock()
					other = append(other, err)
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond) // pacing the load, not synchronisation
			}
		}()
	}
	// Redis answers before the cut.
	for deadline := time.Now().Add(30 * time.Second); tl.Figures().OK == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no command answered before the cut")
		}
	}
	b, _ := breaker.For(breaker.Config{Dep: breakerDep, Target: proxy.Addr()})
	tl.Cut()
	proxy.Cut()
	// The outage lasts until the breaker has opened and refused calls,
	// and at least the configured time.
	end := time.Now().Add(outage)
	for deadline := time.Now().Add(60 * time.Second); b.State() != breaker.Open || tl.Figures().Refused == 0 || time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker never opened and refused during the outage (state %v): %v", b.State(), tl.Figures())
		}
	}
	proxy.Restore()
	tl.Restored()
	for deadline := time.Now().Add(testwait.Limit); b.State() != breaker.Closed || tl.Figures().ClosedAfter == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker stays %v after Redis came back: %v", b.State(), tl.Figures())
		}
	}
	close(stop)
	wg.Wait()

	f := tl.Figures()
	t.Logf("redis outage %v, 16 workers: %v", outage, f)
	t.Logf("longest call %v (deadline %v; a figure, not asserted: scheduling on a busy machine adds to it)", f.Longest, call)
	if len(other) > 0 {
		t.Fatalf("%d calls failed by neither their deadline nor the breaker, e.g. %v", len(other), other[0])
	}
}

// endedByDeadlineOrBreaker: the call was refused by the open breaker or
// ended by a timeout (its read/write deadline, the per-call context
// deadline, or the pool's wait for a connection, all bounded).
func endedByDeadlineOrBreaker(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.Is(err, breaker.ErrOpen) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, redis.ErrPoolTimeout) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// TestClusterNodesHaveBreakers: every node of a Cluster client gets its
// own breaker (one dead master must not cut the others' rooms off).
func TestClusterNodesHaveBreakers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := testenv.RedisCluster(t)
	ctx := context.Background()
	c, err := Connect(ctx, Config{URL: cl.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, room := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := c.Set(ctx, RoomKey(room, "k"), "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "danmaku_breaker_state" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" {
					targets[l.GetValue()] = true
				}
			}
		}
	}
	masters := 0
	for _, n := range cl.Nodes() {
		if role, err := n.Role(); err == nil && role == "master" {
			masters++
			if !targets[n.Addr] {
				t.Errorf("master %s has no breaker (breakers: %v)", n.Addr, targets)
			}
		}
	}
	if masters == 0 {
		t.Fatal("no master found")
	}
}

// TestBreakerProbeThroughANewConnection: a half-open breaker's probe that
// must dial (the outage closed every pooled connection) sends the new
// connection's handshake as part of itself. Counted as calls of their own,
// the handshake was refused by the probe's own half-open breaker, and the
// refusal counted as an answer closed the breaker while Redis was still
// away.
func TestBreakerProbeThroughANewConnection(t *testing.T) {
	proxy := breakertest.NewProxy(t, testenv.Redis(t))
	ctx := context.Background()
	c, err := Connect(ctx, Config{URL: proxy.Addr(), IOTimeout: 100 * time.Millisecond, Breaker: breaker.Config{Failures: 2, OpenFor: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := breaker.For(breaker.Config{Dep: breakerDep, Target: proxy.Addr()})
	proxy.Cut()
	for b.State() != breaker.Open {
		if err := c.Get(ctx, "k").Err(); err == nil {
			t.Fatal("GET answered through a cut path")
		}
	}
	// Every connection is gone (as after a reset); the probe must dial.
	proxy.Restore()
	proxy.Cut()
	// Whether the failed probe opened the breaker again is read from the
	// transitions, not the state: a loaded machine may let the 100 ms open
	// period pass before the state is read.
	reg := prometheus.NewRegistry()
	reg.MustRegister(Collectors()...)
	opens := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "danmaku_breaker_transitions_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				ls := map[string]string{}
				for _, l := range m.GetLabel() {
					ls[l.GetName()] = l.GetValue()
				}
				if ls["dep"] == breakerDep && ls["to"] == "open" {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	for range 5 {
		for b.State() != breaker.HalfOpen {
			time.Sleep(5 * time.Millisecond) // polling the state
		}
		before := opens()
		err := c.Get(ctx, "k").Err()
		if errors.Is(err, breaker.ErrOpen) || err == nil {
			t.Fatalf("the probe: %v, want its own failure", err)
		}
		if n := opens() - before; n != 1 {
			t.Fatalf("after a failed probe the breaker opened %v times, want once (now %v)", n, b.State())
		}
	}
	proxy.Restore()
	for deadline := time.Now().Add(testwait.Limit); c.Get(ctx, "k").Err() != redis.Nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no answer after recovery; breaker %v", b.State())
		}
	}
}
