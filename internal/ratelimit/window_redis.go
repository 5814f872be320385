package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"danmaku/internal/clock"
	"danmaku/internal/redisx"
)

var _ Window = (*RedisWindow)(nil)

// WindowKey is the Redis key of a window: a sorted set of admissions
// scored by Redis's clock in microseconds. The hash tag holds the whole
// key (rule and counted key), so that a Cluster spreads the windows of
// many users over its slots while the one key a check touches always
// sits in one.
func WindowKey(key string) string {
	return redisx.Prefix + "{rl:" + key + "}:w"
}

// RedisWindow is the Window shared by every node: one sorted set per key,
// trimmed, counted and added to in one Lua script timed by Redis's TIME,
// so every node sees one window on one clock and two nodes cannot both
// take the last slot.
type RedisWindow struct {
	rdb redis.UniversalClient
	// clk, when set, times the script instead of Redis's TIME (tests).
	clk clock.Clock
	// node and seq make every admission a distinct member, even two in one
	// microsecond from two nodes.
	node string
	seq  atomic.Uint64
}

// NewRedisWindow returns the windows kept in rdb, timed by Redis's clock.
func NewRedisWindow(rdb redis.UniversalClient) *RedisWindow {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &RedisWindow{rdb: rdb, node: hex.EncodeToString(b)}
}

// NewRedisWindowOn returns the windows kept in rdb, timed by c instead of
// Redis's clock: for tests, whose fake clock then slides the windows
// without sleeping. Every node must share c, which only a test can do.
// The sets still expire on Redis's clock, one window after their last
// admission, so a test's windows should be longer than its pauses.
func NewRedisWindowOn(rdb redis.UniversalClient, c clock.Clock) *RedisWindow {
	w := NewRedisWindow(rdb)
	w.clk = c
	return w
}

// windowScript is a sliding log: drop what left the window, admit if
// fewer than the limit remain, and say when the oldest leaves otherwise.
// The set expires one window after its newest admission, so an idle key
// costs nothing.
//
// KEYS[1] the set; ARGV[1] limit; ARGV[2] window in ms; ARGV[3] a member
// suffix unique to this call; ARGV[4], when given, the time in µs instead
// of Redis's TIME (NewRedisWindowOn). Returns {admitted 0|1, count, retry
// ms}.
var windowScript = redis.NewScript(`
local now
if ARGV[4] then
	now = tonumber(ARGV[4])
else
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local win = tonumber(ARGV[2]) * 1000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - win)
local n = redis.call('ZCARD', KEYS[1])
if n < tonumber(ARGV[1]) then
	redis.call('ZADD', KEYS[1], now, now .. '.' .. ARGV[3])
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return {1, n + 1, 0}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local retry = math.ceil((tonumber(oldest[2]) + win - now) / 1000)
if retry < 1 then
	retry = 1
end
return {0, n, retry}
`)

// Take implements Window.
func (w *RedisWindow) Take(ctx context.Context, key string, limit int64, window time.Duration) (WindowResult, error) {
	ms, err := redisx.PX(window)
	if err != nil {
		return WindowResult{}, fmt.Errorf("ratelimit: window %s: %w", key, err)
	}
	member := w.node + "." + strconv.FormatUint(w.seq.Add(1), 36)
	args := []any{limit, ms, member}
	if w.clk != nil {
		args = append(args, w.clk.Now().UnixMicro())
	}
	v, err := windowScript.Run(ctx, w.rdb, []string{WindowKey(key)}, args...).Int64Slice()
	if err != nil {
		return WindowResult{}, fmt.Errorf("ratelimit: window %s: %w", key, err)
	}
	if len(v) != 3 {
		return WindowResult{}, fmt.Errorf("ratelimit: window %s: script answered %d values", key, len(v))
	}
	return WindowResult{Allowed: v[0] == 1, Count: v[1], RetryIn: time.Duration(v[2]) * time.Millisecond}, nil
}
