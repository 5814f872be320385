package ratelimit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"danmaku/internal/clock"
)

// Defaults of Config.
const (
	defaultPoll          = 250 * time.Millisecond
	defaultWindowTimeout = 100 * time.Millisecond
	defaultRetryWindow   = time.Second
	// sweepEvery is how often Run forgets idle buckets and windows.
	sweepEvery = time.Second
)

// Config configures a Limiter.
type Config struct {
	// Rules are in force from New until Source holds a document that
	// parses. Zero: no rule (every request passes).
	Rules Rules
	// Source is where the rules are changed at run time (a file, Redis).
	// Nil: Rules for good.
	Source RuleSource
	// Poll is how often Run reads Source: a change is in force on every
	// node within one Poll plus the read. Zero: 250 ms.
	Poll time.Duration
	// Window keeps the "window" rules' counts, shared by the nodes. Nil: a
	// MemoryWindow (one process; embedded mode).
	Window Window
	// WindowTimeout bounds one Window call; past it the rule falls back to
	// this node's share. Zero: 100 ms.
	WindowTimeout time.Duration
	// RetryWindow is how long a rule keeps to its fallback after the
	// Window failed before asking it again, so that an outage costs one
	// timeout per rule and RetryWindow, not one per request. Zero: 1 s.
	RetryWindow time.Duration
	// Nodes says how many nodes share a window rule's limit; while the
	// Window fails each node admits its share, limit/Nodes. Nil, or a
	// result below 1: 1.
	Nodes func() int
	// Credentials are the service keys by class ("gift": the gift API's
	// keys, "operator": ...): a request bearing one is counted by
	// "credential" rules under the key's fingerprint, never the key.
	Credentials map[string][]string
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Clock tells the time. Nil: the real clock.
	Clock clock.Clock
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Limiter applies the rules. It is safe for concurrent use.
type Limiter struct {
	cfg   Config
	doc   atomic.Pointer[document]
	creds []credential

	// states keeps each rule's buckets across reloads, by stateKey.
	mu     sync.Mutex
	states map[string]*ruleState

	requests     *prometheus.CounterVec
	windowErrors *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	lastBad      []byte // the last document refused, logged once
}

// document is a compiled rules document with each rule's live state.
type document struct {
	raw        []byte
	changed    chan struct{} // closed when another document replaces this one
	rules      []*compiled
	active     []*active
	allowNets  []netip.Prefix
	allowCreds map[string]bool
	// routes caches the active rules of each route (method and path), in
	// the order they are checked: local first, so that a request refused
	// on this node costs no round trip.
	routes sync.Map
}

// active is a compiled rule bound to its state and metrics.
type active struct {
	*compiled
	*ruleState
	reserve                   float64 // local: tokens left below which a take is near
	cAllowed, cNear, cLimited prometheus.Counter
	windowErr                 prometheus.Counter
	windowKey                 string // prefix of the rule's window keys
	needsUser, needsCredent   bool
}

// ruleState outlives reloads that keep the rule's name and what it counts.
type ruleState struct {
	local *localBuckets // the buckets of a local rule; a window rule's fallback
	// downUntil (UnixNano) is when a window rule asks the Window again
	// after a failure.
	downUntil atomic.Int64
}

type credential struct {
	class string
	key   []byte
	fp    string
}

// Outcomes of a rule's check, the metric's outcome label.
const (
	OutcomeAllowed = "allowed"
	OutcomeNear    = "near_limit"
	OutcomeLimited = "limited"
)

// New checks cfg and returns a Limiter with cfg.Rules in force. It starts
// nothing.
func New(cfg Config) (*Limiter, error) {
	if cfg.Poll == 0 {
		cfg.Poll = defaultPoll
	}
	if cfg.WindowTimeout == 0 {
		cfg.WindowTimeout = defaultWindowTimeout
	}
	if cfg.RetryWindow == 0 {
		cfg.RetryWindow = defaultRetryWindow
	}
	if cfg.Poll < 0 || cfg.WindowTimeout < 0 || cfg.RetryWindow < 0 {
		return nil, errors.New("ratelimit: Poll, WindowTimeout and RetryWindow must not be negative")
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Window == nil {
		cfg.Window = NewMemoryWindow(cfg.Clock)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Limiter{cfg: cfg, states: map[string]*ruleState{}}
	for class, keys := range cfg.Credentials {
		if !validName(class) {
			return nil, fmt.Errorf("ratelimit: credential class %q: want 1-%d of a-z 0-9 _ -", class, maxNameLen)
		}
		for _, k := range keys {
			if k != "" {
				l.creds = append(l.creds, credential{class: class, key: []byte(k), fp: Fingerprint(k)})
			}
		}
	}
	l.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ratelimit_requests_total",
		Help: "Requests checked by each rate-limit rule, by outcome: allowed, near_limit (allowed, most of the budget used), limited (429).",
	}, []string{"rule", "outcome"})
	l.windowErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ratelimit_window_errors_total",
		Help: "Shared-window (Redis) checks that failed; the rule then admits this node's share from a local bucket.",
	}, []string{"rule"})
	l.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "danmaku_ratelimit_reloads_total",
		Help: "Rules documents read from the source, by outcome: applied, invalid (kept the rules in force), failed (source unreadable).",
	}, []string{"outcome"})
	for _, c := range []prometheus.Collector{l.requests, l.windowErrors, l.reloads} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("ratelimit: metrics: %w", err)
		}
	}
	raw, err := json.Marshal(cfg.Rules)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: rules: %w", err)
	}
	if _, err := l.apply(raw); err != nil {
		return nil, err
	}
	return l, nil
}

// fingerprintHex is how many hex digits of a key's SHA-256 name it:
// enough to tell a deployment's keys apart, too few to help guess one.
const fingerprintHex = 16

// Fingerprint names a service key without revealing it: "sha256:" and the
// first 16 hex digits of its SHA-256. Rules documents, metrics and Redis
// keys name credentials by it.
func Fingerprint(key string) string {
	h := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(h[:])[:fingerprintHex]
}

// Rules returns the rules in force.
func (l *Limiter) Rules() Rules {
	d := l.doc.Load()
	var r Rules
	for _, c := range d.rules {
		r.Rules = append(r.Rules, c.Rule)
	}
	for _, p := range d.allowNets {
		r.Allow.CIDRs = append(r.Allow.CIDRs, p.String())
	}
	for c := range d.allowCreds {
		r.Allow.Credentials = append(r.Allow.Credentials, c)
	}
	return r
}

// Loaded returns the rules document in force as it was read (the source's
// bytes; the configured rules' JSON until the source held one) and a
// channel closed when another document replaces it: a watcher waits on it
// instead of polling.
func (l *Limiter) Loaded() (doc []byte, changed <-chan struct{}) {
	d := l.doc.Load()
	return d.raw, d.changed
}

// apply parses raw and puts it in force, keeping the state of rules that
// count the same thing as before. It reports whether anything changed.
func (l *Limiter) apply(raw []byte) (bool, error) {
	if cur := l.doc.Load(); cur != nil && bytes.Equal(cur.raw, raw) {
		return false, nil
	}
	r, err := Parse(raw)
	if err != nil {
		return false, err
	}
	d, err := compile(r)
	if err != nil {
		return false, err
	}
	d.raw = bytes.Clone(raw)
	l.mu.Lock()
	states := map[string]*ruleState{}
	for _, c := range d.rules {
		sk := c.Name + "|" + c.Key + "|" + c.Credential + "|" + c.Algorithm
		st := l.states[sk]
		if st == nil {
			st = &ruleState{local: newLocalBuckets()}
		}
		states[sk] = st
		a := &active{
			compiled: c, ruleState: st,
			reserve:   (1 - c.near) * c.capacity,
			cAllowed:  l.requests.WithLabelValues(c.Name, OutcomeAllowed),
			cNear:     l.requests.WithLabelValues(c.Name, OutcomeNear),
			cLimited:  l.requests.WithLabelValues(c.Name, OutcomeLimited),
			windowErr: l.windowErrors.WithLabelValues(c.Name),
			windowKey: c.Name + ":", needsUser: c.Key == KeyUser, needsCredent: c.Key == KeyCredential,
		}
		d.active = append(d.active, a)
	}
	l.states = states
	d.changed = make(chan struct{})
	if old := l.doc.Swap(d); old != nil {
		close(old.changed)
	}
	l.mu.Unlock()
	return true, nil
}

// Refresh reads the Source once and applies its document if it changed.
// A source without a document leaves the rules as they are.
func (l *Limiter) Refresh(ctx context.Context) error {
	if l.cfg.Source == nil {
		return nil
	}
	raw, err := l.cfg.Source.Load(ctx)
	if errors.Is(err, ErrNoRules) {
		return nil
	}
	if err != nil {
		l.reloads.WithLabelValues("failed").Inc()
		return err
	}
	changed, err := l.apply(raw)
	if err != nil {
		l.reloads.WithLabelValues("invalid").Inc()
		l.mu.Lock()
		first := !bytes.Equal(l.lastBad, raw)
		l.lastBad = bytes.Clone(raw)
		l.mu.Unlock()
		if first {
			l.cfg.Logger.Error("ratelimit: rules document refused; the rules in force stay", "err", err)
		}
		return err
	}
	if changed {
		l.reloads.WithLabelValues("applied").Inc()
		l.cfg.Logger.Info("ratelimit: rules changed", "rules", len(l.doc.Load().rules))
	}
	return nil
}

// Run reloads the rules every Poll and forgets idle buckets every second
// until ctx is done, on the Config's clock (its timers when it has them:
// clock.TimersOf). It returns nil then.
func (l *Limiter) Run(ctx context.Context) error {
	timers := clock.TimersOf(l.cfg.Clock)
	poll, pollC := timers.NewTicker(l.cfg.Poll)
	defer poll.Stop()
	sweep, sweepC := timers.NewTicker(sweepEvery)
	defer sweep.Stop()
	_ = l.Refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-pollC:
			// A failure is counted and logged by Refresh; the rules in
			// force stay.
			_ = l.Refresh(ctx)
		case <-sweepC:
			l.Sweep()
		}
	}
}

// Sweep forgets the buckets and in-memory windows that hold nothing.
func (l *Limiter) Sweep() {
	now := l.cfg.Clock.Now()
	for _, a := range l.doc.Load().active {
		a.local.sweep(now)
	}
	if s, ok := l.cfg.Window.(interface{ Sweep() }); ok {
		s.Sweep()
	}
}

// forRoute returns the rules covering a route, local ones first.
func (d *document) forRoute(method, path string) []*active {
	k := method + " " + path
	if v, ok := d.routes.Load(k); ok {
		return v.([]*active)
	}
	var out []*active
	for _, want := range []string{AlgorithmLocal, AlgorithmWindow} {
		for _, a := range d.active {
			if a.Algorithm == want && a.matches(method, path) {
				out = append(out, a)
			}
		}
	}
	// Routes are the server's registered ones (never a client's raw
	// path), so the cache is bounded by them.
	d.routes.Store(k, out)
	return out
}

// verdict is one rule's answer for one request.
type verdict struct {
	ok, near bool
	retry    time.Duration
}

// check takes one request for key from rule a.
func (l *Limiter) check(ctx context.Context, a *active, key string, now time.Time) verdict {
	if a.Algorithm == AlgorithmLocal {
		ok, near := a.local.take(key, now, a.capacity, a.perSec, a.reserve)
		return verdict{ok: ok, near: near, retry: time.Duration(float64(time.Second) / a.perSec)}
	}
	if now.UnixNano() >= a.downUntil.Load() {
		wctx, cancel := context.WithTimeout(ctx, l.cfg.WindowTimeout)
		res, err := l.cfg.Window.Take(wctx, a.windowKey+key, a.Limit, a.per)
		cancel()
		if err == nil {
			return verdict{ok: res.Allowed, near: res.Allowed && float64(res.Count) > a.near*float64(a.Limit), retry: res.RetryIn}
		}
		a.windowErr.Inc()
		if prev := a.downUntil.Swap(now.Add(l.cfg.RetryWindow).UnixNano()); prev <= now.UnixNano() {
			l.cfg.Logger.Warn("ratelimit: shared window failed; admitting this node's share until it answers", "rule", a.Name, "err", err)
		}
	}
	// This node's share of the limit, from a local bucket: never more
	// than the rule allows in all, never open.
	share := 1.0
	if l.cfg.Nodes != nil {
		share = float64(max(1, l.cfg.Nodes()))
	}
	capacity := math.Max(1, float64(a.Limit)/share)
	perSec := float64(a.Limit) / a.per.Seconds() / share
	ok, near := a.local.take(key, now, capacity, perSec, (1-a.compiled.near)*capacity)
	return verdict{ok: ok, near: near, retry: time.Duration(float64(time.Second) / perSec)}
}
