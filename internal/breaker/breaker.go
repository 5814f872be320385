// Package breaker stops calls to a dependency (Redis, S3) that is failing,
// so that callers fail fast and serve their fallback instead of each
// waiting out a timeout. It wraps sony/gobreaker with the project's
// settings and metrics.
//
// A Breaker opens after Failures consecutive failed calls — errors that say
// the dependency is down or overloaded, and calls slower than SlowCall —
// and then refuses every call for OpenFor with an error that matches
// ErrOpen. After OpenFor it lets Probes calls through (half-open): if they
// all succeed it closes, if one fails it opens again for another OpenFor.
// A call the caller cancelled counts neither way. The open period runs on
// gobreaker's clock, time.Now: tests of it run in a testing/synctest
// bubble, where that clock is fake.
//
// One Breaker guards one target (a Redis node, an S3 endpoint and bucket);
// For hands out one Breaker per target and dependency, shared by every
// client of the process that talks to it. A Breaker is safe for concurrent
// use.
//
// Each component's fallback while a breaker is open (docs/reliability.md):
// the ingest admits by its node's share of each room's and event's limit;
// the slicer keeps unwritten slots as read messages and writes them in
// order once the store answers; the gslb allocates from its last good load
// table up to its maximum age; the edge keeps serving the clients it has.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// ErrOpen is returned, wrapped with the dependency and target, for a call
// refused because its breaker is open (or half-open with its probes in
// flight). Nothing was sent: the call is safe to retry later, and the
// caller's fallback applies.
var ErrOpen = errors.New("breaker: open")

// errSlow is what a call that succeeded but took longer than SlowCall
// counts as, for the breaker only: the caller gets its result.
var errSlow = errors.New("breaker: slow call")

// Defaults of Config.
const (
	defaultFailures = 5
	defaultOpenFor  = 2 * time.Second
	defaultProbes   = 1
)

// State is a breaker's state, as its metric reports it.
type State int

// States, in the order of the danmaku_breaker_state gauge's values.
const (
	Closed   State = 0
	HalfOpen State = 1
	Open     State = 2
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	}
	return Closed
}

// Config configures a Breaker.
type Config struct {
	// Dep names the dependency ("redis", "s3"): the dep label of the
	// metrics. Required.
	Dep string
	// Target names what is guarded (a Redis node's address, an S3
	// endpoint and bucket): the target label and the logs. Required.
	Target string
	// Failures is how many consecutive failed or slow calls open the
	// breaker. Zero: 5 — a few, so that one lost connection does not
	// cut a healthy dependency off, and few enough that a dead one is
	// found within its first second of timeouts.
	Failures int
	// SlowCall is the duration past which a call that succeeded still
	// counts as failed: a dependency that answers this slowly holds every
	// request path up. Probes are not judged by it. Zero: no call counts
	// as slow (only errors do).
	SlowCall time.Duration
	// OpenFor is how long an open breaker refuses calls before it lets
	// probes through. Zero: 2 s — what a failing dependency costs is one
	// probe per OpenFor, and what a recovered one waits is at most that.
	OpenFor time.Duration
	// Probes is how many calls a half-open breaker lets through; that many
	// successes close it. Zero: 1.
	Probes int
	// IsFailure tells a failure of the dependency (unreachable, timed
	// out, overloaded) from an answer (not found, a refused condition, a
	// script error), which counts as success. Nil: every error is a
	// failure. Context cancellation is never counted, whatever IsFailure
	// says: the caller gave up, the dependency said nothing.
	IsFailure func(error) bool
	// Logger logs each state change. Nil: slog.Default().
	Logger *slog.Logger
}

// Breaker guards calls to one target of one dependency.
type Breaker struct {
	cfg Config
	cb  *gobreaker.TwoStepCircuitBreaker[struct{}]
	// metered is set for the breakers of For, which alone have metrics: a
	// breaker made by New may share its target with another.
	metered bool
}

// ErrConfig is returned by New for a Config without Dep or Target, or
// with a negative setting.
var ErrConfig = errors.New("breaker: bad config")

// New checks cfg, applies its defaults and returns a closed Breaker.
func New(cfg Config) (*Breaker, error) {
	if cfg.Dep == "" || cfg.Target == "" {
		return nil, fmt.Errorf("%w: Dep and Target are required", ErrConfig)
	}
	if cfg.Failures < 0 || cfg.SlowCall < 0 || cfg.OpenFor < 0 || cfg.Probes < 0 {
		return nil, fmt.Errorf("%w: negative setting", ErrConfig)
	}
	if cfg.Failures == 0 {
		cfg.Failures = defaultFailures
	}
	if cfg.OpenFor == 0 {
		cfg.OpenFor = defaultOpenFor
	}
	if cfg.Probes == 0 {
		cfg.Probes = defaultProbes
	}
	if cfg.IsFailure == nil {
		cfg.IsFailure = func(error) bool { return true }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Breaker{cfg: cfg}
	failures := uint32(cfg.Failures)
	isFailure := cfg.IsFailure
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        cfg.Dep + " " + cfg.Target,
		MaxRequests: uint32(cfg.Probes),
		Timeout:     cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return errors.Is(err, context.Canceled) },
		IsSuccessful: func(err error) bool {
			return err == nil || (!errors.Is(err, errSlow) && !isFailure(err))
		},
		OnStateChange: func(_ string, from, to gobreaker.State) { b.changed(stateOf(from), stateOf(to)) },
	})
	return b, nil
}

// changed records a transition; gobreaker calls it under its lock, so the
// gauge always ends at the newest state.
func (b *Breaker) changed(from, to State) {
	if b.metered {
		stateGauge.WithLabelValues(b.cfg.Dep, b.cfg.Target).Set(float64(to))
		transitions.WithLabelValues(b.cfg.Dep, to.String()).Inc()
	}
	switch to {
	case Open:
		if from == HalfOpen {
			b.cfg.Logger.Debug("breaker: probe failed; open again", "dep", b.cfg.Dep, "target", b.cfg.Target, "for", b.cfg.OpenFor)
			return
		}
		b.cfg.Logger.Warn("breaker: open; calls fail fast", "dep", b.cfg.Dep, "target", b.cfg.Target, "for", b.cfg.OpenFor)
	case Closed:
		b.cfg.Logger.Info("breaker: closed; calls go through again", "dep", b.cfg.Dep, "target", b.cfg.Target)
	}
}

// Dep returns the dependency the breaker guards.
func (b *Breaker) Dep() string { return b.cfg.Dep }

// Target returns what the breaker guards.
func (b *Breaker) Target() string { return b.cfg.Target }

// State returns the breaker's state now (an open breaker whose OpenFor has
// passed reads half-open).
func (b *Breaker) State() State { return stateOf(b.cb.State()) }

// Allow asks to make one call. When the breaker refuses, err matches
// ErrOpen and nothing may be sent. Otherwise the caller makes the call and
// then calls done exactly once with the call's error and how long it took
// (pass 0 for a call whose duration says nothing, such as a blocking
// read).
func (b *Breaker) Allow() (done func(err error, took time.Duration), err error) {
	end, err := b.cb.Allow()
	if err != nil {
		return nil, b.openErr()
	}
	probe := b.cb.State() == gobreaker.StateHalfOpen
	return func(err error, took time.Duration) {
		// A probe is judged by its answer alone: the first call after an
		// outage often carries what piled up meanwhile (a held batch) and
		// is slow for that, not because the dependency still is.
		if err == nil && !probe && b.cfg.SlowCall > 0 && took > b.cfg.SlowCall {
			err = errSlow
		}
		end(err)
	}, nil
}

// Do runs fn through the breaker: refused (ErrOpen) while open, counted
// afterwards.
func (b *Breaker) Do(fn func() error) error {
	done, err := b.Allow()
	if err != nil {
		return err
	}
	start := time.Now()
	err = fn()
	done(err, time.Since(start))
	return err
}

func (b *Breaker) openErr() error {
	return fmt.Errorf("%s %s: %w", b.cfg.Dep, b.cfg.Target, ErrOpen)
}

// registry holds For's breakers, one per dependency and target.
var registry = struct {
	sync.Mutex
	m map[[2]string]*Breaker
}{m: map[[2]string]*Breaker{}}

// For returns the process's breaker of cfg.Dep and cfg.Target, made from
// cfg on first use, so that every client of one target shares one breaker
// (the target is down for all of them alike) and its metric has one series.
// Later calls get the first breaker whatever their other settings.
func For(cfg Config) (*Breaker, error) {
	key := [2]string{cfg.Dep, cfg.Target}
	registry.Lock()
	defer registry.Unlock()
	if b := registry.m[key]; b != nil {
		return b, nil
	}
	b, err := New(cfg)
	if err != nil {
		return nil, err
	}
	b.metered = true
	stateGauge.WithLabelValues(cfg.Dep, cfg.Target).Set(float64(Closed))
	registry.m[key] = b
	return b, nil
}
