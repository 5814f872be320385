// Package redisx connects to Redis for the components' Redis backends and
// holds what they share: the key layout (every key of one room carries the
// hash tag {room:ID}, so that Redis Cluster keeps a room on one shard) and
// the conversion of TTLs to milliseconds.
//
// Connect returns a go-redis client, which is safe for concurrent use; the
// helpers here are pure functions.
package redisx

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"danmaku/internal/breaker"
)

// Prefix starts every key the project writes, so that a shared Redis can be
// told apart and ACL key patterns (~danmaku:...) can be written per role.
const Prefix = "danmaku:"

// RoomKey returns the key of one of room's records, "danmaku:{room:ID}:name".
// The hash tag keeps all of a room's keys in one Cluster slot, so one Lua
// script or MULTI may touch several of them.
func RoomKey(room, name string) string {
	return Prefix + "{room:" + room + "}:" + name
}

// ErrTTL is returned for a TTL that Redis cannot store (zero or negative).
var ErrTTL = errors.New("redisx: ttl must be positive")

// PX returns ttl in whole milliseconds for SET PX and PEXPIRE, rounded up so
// that a positive ttl below a millisecond does not become 0 (which Redis
// refuses).
func PX(ttl time.Duration) (int64, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("%w (got %v)", ErrTTL, ttl)
	}
	return int64((ttl + time.Millisecond - 1) / time.Millisecond), nil
}

const (
	// defaultDialTimeout bounds a connection attempt. Redis sits in the same
	// region as the nodes and connects in milliseconds; a longer hang only
	// delays the failover of whoever waits on it.
	defaultDialTimeout = 2 * time.Second
	// defaultIOTimeout bounds one command's write and read. Every command the
	// backends send is O(1) or a short Lua script; a second without an answer
	// means Redis is gone or blocked, and request paths (the room bucket on
	// every comment) must fail fast instead of piling up.
	defaultIOTimeout = time.Second
	// defaultPingTimeout bounds Connect's check when ctx has no deadline.
	defaultPingTimeout = 5 * time.Second
	// defaultCallTimeout bounds one whole call — the wait for a pooled
	// connection, a dial, the command's write and read — which otherwise
	// could wait out each of those timeouts in a row (pool 2 s, dial 2 s,
	// write and read 1 s each) while Redis hangs.
	defaultCallTimeout = 3 * time.Second
)

// dialAttempts is go-redis's DialerRetries (total attempts per dial). Its
// default, 5 attempts 100 ms apart each with its own DialTimeout, makes every
// command wait up to ~10 s while Redis is unreachable — longer than a slicer
// lease — and logs each failure past slog. One attempt fails fast; the next
// command dials again.
const dialAttempts = 1

// noRetries is go-redis's MaxRetries for "never retry", set on every client
// whatever the URL says (max_retries). go-redis retries a command or a
// pipeline after a read timeout, when Redis may already have run it, and
// writes like XADD are not idempotent: a stall after an XADD arrived would
// store the message twice. Callers retry where it is safe instead: the
// slicer on its next tick, the gift script by order id (ingest.GiftLog),
// clients on a 503. (A Cluster client still follows MOVED/ASK redirects,
// and its redirect loop — MaxRedirects — also resends a command after a
// network error, timeouts included; that cannot be turned off without
// losing redirects. The gift script is safe there too, by its order key;
// a barrage or announcement XADD is not.)
const noRetries = -1

// noIdentity turns off go-redis's CLIENT SETINFO on every new connection.
// The command exists from Redis 7.2 on only, so a role's ACL user (acl.go)
// cannot be granted it on every server the project supports (Redis 7.0
// refuses the grant), and where it exists but is not granted, each new
// connection would leave a refusal in the ACL log. It only labels the
// connection in CLIENT LIST.
const noIdentity = true

// ErrNoAddr is returned by Connect for a Config without a URL.
var ErrNoAddr = errors.New("redisx: no Redis address")

// Config says how to reach Redis.
type Config struct {
	// URL is where Redis is: "redis://[user:password@]host:port[/db][?opts]"
	// ("rediss://" for TLS; opts as go-redis ParseURL, e.g.
	// read_timeout=2s), or a bare "host:port". A comma-separated list of
	// bare addresses, or Cluster, makes a Redis Cluster client. Required.
	URL string
	// Username and Password are the ACL user to authenticate as; they
	// override the URL's user info. "": the URL's, or none (the default
	// user).
	Username string
	Password string
	// Cluster makes a Cluster client from a single seed address (a
	// configuration endpoint). False: cluster only for several addresses.
	Cluster bool
	// DialTimeout bounds one connection attempt. Zero: 2 s, unless the URL
	// sets dial_timeout.
	DialTimeout time.Duration
	// IOTimeout bounds one command's write and read. Zero: 1 s, unless the
	// URL sets read_timeout/write_timeout.
	IOTimeout time.Duration
	// PoolSize is the number of connections per node. Zero: go-redis's
	// default (10 per CPU), unless the URL sets pool_size.
	PoolSize int
	// CallTimeout bounds one command or pipeline from the wait for a
	// connection to its answer, plus what the command itself asks to block
	// (XREADGROUP BLOCK, WAIT), unless the caller's context ends sooner.
	// Zero: 3 s.
	CallTimeout time.Duration
	// Breaker tunes the circuit breaker every server (or Cluster node)
	// gets: Failures, SlowCall, OpenFor and Probes (Dep, Target and
	// IsFailure are set here). Zero fields: breaker's defaults, OpenFor
	// 1 s and SlowCall half the IOTimeout; a negative SlowCall turns the
	// slow-call rule off (only errors and timeouts count: what tests on a
	// loaded machine want, where a starved process makes a fast answer
	// look slow). A server's breaker is the
	// process's, shared by every client of its address: the first
	// client's settings hold. While it is open, commands fail at once with
	// an error that matches breaker.ErrOpen (docs/reliability.md).
	Breaker breaker.Config
}

// Connect returns a client for cfg after checking, with PING, that Redis
// answers and accepts the credentials. Context deadlines bound every command
// (ContextTimeoutEnabled), and so does CallTimeout; every server the client
// talks to is guarded by its breaker. The caller closes the client.
func Connect(ctx context.Context, cfg Config) (redis.UniversalClient, error) {
	c, where, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultPingTimeout)
		defer cancel()
	}
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redisx: ping %s: %w", where, err)
	}
	return c, nil
}

// newClient builds the client without talking to Redis. where names the
// server(s) for error messages, without credentials.
func newClient(cfg Config) (c redis.UniversalClient, where string, err error) {
	u := strings.TrimSpace(cfg.URL)
	if u == "" {
		return nil, "", ErrNoAddr
	}
	dial, rw, call := cfg.DialTimeout, cfg.IOTimeout, cfg.CallTimeout
	if dial <= 0 {
		dial = defaultDialTimeout
	}
	if rw <= 0 {
		rw = defaultIOTimeout
	}
	if call <= 0 {
		call = defaultCallTimeout
	}
	var addrs []string
	if !strings.Contains(u, "://") {
		for _, a := range strings.Split(u, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			return nil, "", ErrNoAddr
		}
	}
	cluster := cfg.Cluster || len(addrs) > 1
	if cluster {
		var o *redis.ClusterOptions
		if addrs != nil {
			o = &redis.ClusterOptions{Addrs: addrs}
		} else if o, err = redis.ParseClusterURL(u); err != nil {
			return nil, "", fmt.Errorf("redisx: parse cluster URL: %w", redactErr(err, u))
		}
		setString(&o.Username, cfg.Username)
		setString(&o.Password, cfg.Password)
		setDuration(&o.DialTimeout, dial)
		setDuration(&o.ReadTimeout, rw)
		setDuration(&o.WriteTimeout, rw)
		if cfg.PoolSize > 0 {
			o.PoolSize = cfg.PoolSize
		}
		o.MaxRetries = noRetries
		o.DialerRetries = dialAttempts
		o.ContextTimeoutEnabled = true
		o.DisableIdentity = noIdentity
		// Each node gets its own breaker: one dead master must not cut
		// the rooms of the others off.
		if err := checkBreaker(cfg); err != nil {
			return nil, "", err
		}
		read := o.ReadTimeout
		cc := redis.NewClusterClient(o)
		cc.OnNewNode(func(node *redis.Client) {
			// Cannot fail: checkBreaker passed the same settings.
			if h, err := newBreakerHook(node.Options().Addr, cfg, call, read); err == nil {
				node.AddHook(h)
			}
		})
		cc.AddHook(reloadOnFailure{cc})
		cc.AddHook(countTrips{})
		return cc, "cluster " + strings.Join(o.Addrs, ","), nil
	}
	var o *redis.Options
	if addrs != nil {
		o = &redis.Options{Addr: addrs[0]}
	} else if o, err = redis.ParseURL(u); err != nil {
		return nil, "", fmt.Errorf("redisx: parse URL: %w", redactErr(err, u))
	}
	setString(&o.Username, cfg.Username)
	setString(&o.Password, cfg.Password)
	setDuration(&o.DialTimeout, dial)
	setDuration(&o.ReadTimeout, rw)
	setDuration(&o.WriteTimeout, rw)
	if cfg.PoolSize > 0 {
		o.PoolSize = cfg.PoolSize
	}
	o.MaxRetries = noRetries
	o.DialerRetries = dialAttempts
	o.ContextTimeoutEnabled = true
	o.DisableIdentity = noIdentity
	h, err := newBreakerHook(o.Addr, cfg, call, o.ReadTimeout)
	if err != nil {
		return nil, "", fmt.Errorf("redisx: %w", err)
	}
	rc := redis.NewClient(o)
	// First, so outermost: a command the breaker refuses is no round trip.
	rc.AddHook(h)
	rc.AddHook(countTrips{})
	return rc, o.Addr, nil
}

// roundTrips counts the round trips of every client Connect made, by
// command (a pipeline counts once, as "pipeline"; a script call is its
// EVALSHA, and EVAL when the script had to be loaded).
var roundTrips = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "danmaku_redis_round_trips_total",
	Help: "Round trips to Redis by this process, by command (a pipeline counts once as \"pipeline\").",
}, []string{"cmd"})

// Collectors returns the metrics of the clients Connect makes — and the
// process's breakers', Redis's and S3's alike — for the process's registry
// (register them once).
func Collectors() []prometheus.Collector {
	return append([]prometheus.Collector{roundTrips}, breaker.Collectors()...)
}

// RoundTrips returns how many round trips the clients of this process
// made so far, all commands together.
func RoundTrips() float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { roundTrips.Collect(ch); close(ch) }()
	var n float64
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) == nil && pb.Counter != nil {
			n += pb.Counter.GetValue()
		}
	}
	return n
}

// countTrips feeds roundTrips.
type countTrips struct{}

func (countTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (countTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		roundTrips.WithLabelValues(cmd.Name()).Inc()
		return next(ctx, cmd)
	}
}

func (countTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		roundTrips.WithLabelValues("pipeline").Inc()
		return next(ctx, cmds)
	}
}

// reloadOnFailure makes a Cluster client re-read the slot map (CLUSTER
// SLOTS, from any node that answers) when a command fails in a way that may
// mean the map is stale: the node did not answer (dead, unreachable) or
// the cluster said it is down. go-redis re-reads the map on a MOVED, which
// only a live node can answer; a master killed outright answers nothing,
// and the client kept sending its slots' commands to the dead address
// until its periodic refresh (every 60 s) — a minute without the rooms of
// a shard although its replica had taken over within two seconds (measured
// with cluster-node-timeout 1 s). go-redis coalesces these reloads (one at
// a time, at most one every 200 ms), so a burst of failures costs a few
// CLUSTER SLOTS, not one per command.
type reloadOnFailure struct{ c *redis.ClusterClient }

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if staleMapErr(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if staleMapErr(c.Err()) {
				h.c.ReloadState(ctx)
				break
			}
		}
		return err
	}
}

// staleMapErr reports whether err may come from a stale slot map: any
// failure that is not an answer of Redis (a refused or broken connection,
// a timeout), or CLUSTERDOWN (a master failed and its replica is not
// promoted yet). A cancelled or expired context says nothing about the
// map, and neither does a Redis error about the command itself.
func staleMapErr(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return redis.HasErrorPrefix(err, "CLUSTERDOWN")
	}
	return true
}

func setString(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

// setDuration sets *dst to v unless the URL already set it.
func setDuration(dst *time.Duration, v time.Duration) {
	if *dst == 0 {
		*dst = v
	}
}

// redactErr keeps a URL's password out of a parse error: url.Parse quotes
// the whole input in its errors.
func redactErr(err error, u string) error {
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return fmt.Errorf("%s <redis URL>: %w", ue.Op, ue.Err)
	}
	if msg := err.Error(); strings.Contains(msg, u) {
		return errors.New(strings.ReplaceAll(msg, u, "<redis URL>"))
	}
	return err
}
